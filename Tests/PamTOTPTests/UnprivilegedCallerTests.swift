import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// pamtester run as an unprivileged user (setpriv), so pam_totp.so runs without root and asks
/// pam-totpd: what a screen locker does, without the X server. The service file lives in
/// /etc/pam.d under a name of its own (0644: read by the user's pamtester), removed in tearDown.
final class UnprivilegedCallerTests: XCTestCase {
    var daemon: DaemonFixture!
    var caller: ThrowawayAccount!
    var other: ThrowawayAccount!
    var service = ""

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: throwaway accounts, /etc/pam.d, pam-totpd")
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        service = "pam_totp_unpriv_\(getpid())"
        do {
            caller = try ThrowawayAccount(prefix: "tunpa")
            other = try ThrowawayAccount(prefix: "tunpb")
            daemon = try DaemonFixture()
            try daemon.start()
        } catch {
            cleanUp()  // whether or not XCTest calls tearDown after a throwing setUp
            throw error
        }
    }

    override func tearDown() { cleanUp() }

    /// Idempotent: undoes whatever setUp and the test made.
    func cleanUp() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        service = ""
        daemon?.cleanup()
        caller?.delete()
        other?.delete()
        daemon = nil
        caller = nil
        other = nil
    }

    /// Writes the service: `lines`, with MODULE for the module path and SOCKET for socket=PATH.
    func writeService(_ lines: [String]) throws {
        let path = "/etc/pam.d/" + service
        let text = lines.map {
            $0.replacingOccurrences(of: "MODULE", with: moduleURL.path)
              .replacingOccurrences(of: "SOCKET", with: "socket=" + daemon.socketPath)
        }.joined(separator: "\n") + "\n"
        unlink(path)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o644]))
        XCTAssertEqual(chmod(path, 0o644), 0)
    }

    /// `pamtester -v SERVICE USER authenticate` as `account`, `answer` on stdin (the prompt's answer).
    func pamtester(as account: ThrowawayAccount, user: String, answer: String) throws -> CommandResult {
        try runCommand(account.setpriv + ["pamtester", "-v", service, user, "authenticate"], input: answer + "\n")
    }

    func testOwnAccountRightCodeSucceeds() throws {
        try writeService(["auth required MODULE SOCKET"])
        let secret = randomTOTPSecret()
        try daemon.enroll(caller.name, uid: caller.uid, secret: secret)
        awayFromStepBoundary()
        let r = try pamtester(as: caller, user: caller.name, answer: codeNow(secret))
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr + daemon.output)
        XCTAssertEqual(try daemon.state(caller.name).lastSteps.count, 1, "pam-totpd recorded the step")
    }

    func testOwnAccountWrongCodeFails() throws {
        try writeService(["auth required MODULE SOCKET"])
        let secret = randomTOTPSecret()
        try daemon.enroll(caller.name, uid: caller.uid, secret: secret)
        let r = try pamtester(as: caller, user: caller.name, answer: codeOutsideWindow(secret))
        XCTAssertNotEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(try daemon.state(caller.name).failures, 1, "pam-totpd counted the failure: \(daemon.output)")
    }

    /// Asking about another enrolled user, even with that user's right code, fails, and leaves
    /// that user's state as it was (no failure counted against them, no step used up).
    func testAnotherUsersNameFailsAndLeavesTheirStateAlone() throws {
        try writeService(["auth required MODULE SOCKET"])
        let secret = randomTOTPSecret()
        try daemon.enroll(other.name, uid: other.uid, secret: secret)
        let before = try daemon.state(other.name)
        awayFromStepBoundary()
        let withRightCode = try pamtester(as: caller, user: other.name, answer: codeNow(secret))
        XCTAssertNotEqual(withRightCode.status, 0, "a user authenticated as another: " + withRightCode.stdout + withRightCode.stderr)
        let withWrongCode = try pamtester(as: caller, user: other.name, answer: codeOutsideWindow(secret))
        XCTAssertNotEqual(withWrongCode.status, 0, withWrongCode.stdout + withWrongCode.stderr)
        let after = try daemon.state(other.name)
        XCTAssertEqual(after.failures, before.failures, "another user's failures were counted by a stranger")
        XCTAssertEqual(after.lastSteps.count, before.lastSteps.count, "another user's code was used up by a stranger")
        XCTAssertEqual(after, before)
        // The refusal is about the caller, not the record: the owner still logs in with that code.
        let own = try pamtester(as: other, user: other.name, answer: codeNow(secret))
        XCTAssertEqual(own.status, 0, own.stdout + own.stderr + daemon.output)
    }

    /// nullok, then pam_permit: the module's PAM_IGNORE for an unenrolled user lets pam_permit
    /// decide (success); for an enrolled user with a wrong code the module's failure stands
    /// (`required` fails the stack whatever pam_permit says).
    func testNullokIgnoresUnenrolledButNotAWrongCode() throws {
        try writeService(["auth required MODULE SOCKET nullok", "auth required pam_permit.so"])
        let unenrolled = try pamtester(as: caller, user: caller.name, answer: "")
        XCTAssertEqual(unenrolled.status, 0, "unenrolled under nullok: " + unenrolled.stdout + unenrolled.stderr + daemon.output)
        let secret = randomTOTPSecret()
        try daemon.enroll(caller.name, uid: caller.uid, secret: secret)
        let wrong = try pamtester(as: caller, user: caller.name, answer: codeOutsideWindow(secret))
        XCTAssertNotEqual(wrong.status, 0, "enrolled, wrong code, under nullok: " + wrong.stdout + wrong.stderr)
        XCTAssertEqual(try daemon.state(caller.name).failures, 1)
    }

    /// Review: the module sent the answer to whatever listened on socket=PATH. With the socket
    /// in a directory another user can write, that user's listener heard every code (and, with
    /// forward_pass, could answer "success"). The module now asks the socket who made it
    /// (SO_PEERCRED) and sends nothing unless it is root's.
    func testAListenerThatIsNotRootHearsNothing() throws {
        let dir = try makeTemporaryDirectory("pam_totp_impostor")
        defer { removeTemporaryDirectory(dir) }
        XCTAssertEqual(chmod(dir.path, 0o755), 0)
        let own = dir.appendingPathComponent("impostor")
        XCTAssertEqual(mkdir(own.path, 0o755), 0)
        XCTAssertEqual(chown(own.path, other.uid, other.gid), 0)
        let socketPath = own.appendingPathComponent("socket").path
        let heard = own.appendingPathComponent("heard").path
        // The other user's listener: accepts one connection, counts the bytes it is sent.
        let script = """
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind(sys.argv[1]); s.listen(4)
            os.chmod(sys.argv[1], 0o777)
            s.settimeout(10); n = 0
            try:
                c, _ = s.accept(); c.settimeout(2)
                while True:
                    b = c.recv(4096)
                    if not b: break
                    n += len(b)
            except OSError: pass
            open(sys.argv[2], "w").write(str(n))
            """
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        listener.arguments = other.setpriv + ["/usr/bin/python3", "-c", script, socketPath, heard]
        try listener.run()
        defer { if listener.isRunning { listener.terminate() } }
        XCTAssertTrue(waitUntil(timeout: 5) {
            var st = stat()
            return stat(socketPath, &st) == 0 && st.st_mode & 0o777 == 0o777
        }, "the listener did not start")

        try writeService(["auth required MODULE socket=" + socketPath])
        let r = try pamtester(as: caller, user: caller.name, answer: "123456")
        XCTAssertNotEqual(r.status, 0, "a login answered by a listener that is not root must fail: \(r.stdout) \(r.stderr)")
        XCTAssertTrue(waitUntil(timeout: 15) { !listener.isRunning }, "the listener did not finish")
        XCTAssertEqual(try String(contentsOfFile: heard, encoding: .utf8), "0",
                       "the module sent the answer to a listener run by uid \(other.uid)")
    }
}
