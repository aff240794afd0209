import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// `trusted_callers` (issue 39: FreeRADIUS as Debian ships it runs as freerad, and every user
/// was refused: "a caller without root may only ask about its own account"). pamtester run as a
/// throwaway system account named in pam-totpd's `trusted_callers` stands in for radiusd: it
/// may ask about any user, counted like root's requests; an account not named gains nothing.
final class TrustedCallerTests: XCTestCase {
    var daemon: DaemonFixture!
    var trusted: ThrowawayAccount!
    var other: ThrowawayAccount!
    var service = ""

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: throwaway accounts, /etc/pam.d, pam-totpd")
        service = "pam_totp_trusted_\(getpid())"
        do {
            trusted = try ThrowawayAccount(prefix: "ttrua")
            other = try ThrowawayAccount(prefix: "ttrub")
            daemon = try DaemonFixture()
            try "store = \(daemon.store)\ntrusted_callers = \(trusted.name)\nmax_failures = 100\nlockout = 0\n"
                .write(toFile: daemon.config, atomically: true, encoding: .utf8)
            XCTAssertEqual(chmod(daemon.config, 0o644), 0)
            try daemon.start()
            let path = "/etc/pam.d/" + service
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(
                "auth required \(moduleURL.path) socket=\(daemon.socketPath)\n".utf8), attributes: [.posixPermissions: 0o644]))
        } catch {
            cleanUp()
            throw error
        }
    }

    override func tearDown() { cleanUp() }

    func cleanUp() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        service = ""
        daemon?.cleanup()
        trusted?.delete()
        other?.delete()
        (daemon, trusted, other) = (nil, nil, nil)
    }

    func pamtester(as account: ThrowawayAccount, user: String, answer: String) throws -> CommandResult {
        try runCommand(account.setpriv + ["pamtester", "-v", service, user, "authenticate"], input: answer + "\n")
    }

    func testATrustedCallerAsksAboutAnyUserAndNobodyElseGainsAnything() throws {
        let secret = randomTOTPSecret()
        try daemon.enroll("nobody", uid: 65534, secret: secret)
        awayFromStepBoundary()
        // The caller not named: refused, as before (nothing counted against nobody).
        let refused = try pamtester(as: other, user: "nobody", answer: try codeNow(secret))
        XCTAssertNotEqual(refused.status, 0, refused.stdout + refused.stderr)
        XCTAssertEqual(try daemon.state("nobody").failures, 0)
        // The trusted caller: a wrong code is counted against nobody like root's, the right one accepted once.
        let wrong = try pamtester(as: trusted, user: "nobody", answer: try codeOutsideWindow(secret))
        XCTAssertNotEqual(wrong.status, 0, wrong.stdout + wrong.stderr)
        XCTAssertEqual(try daemon.state("nobody").failures, 1, "counted: " + daemon.output)
        let right = try pamtester(as: trusted, user: "nobody", answer: try codeNow(secret))
        XCTAssertEqual(right.status, 0, right.stdout + right.stderr + daemon.output)
        XCTAssertEqual(try daemon.state("nobody").failures, 0)
        let replay = try pamtester(as: trusted, user: "nobody", answer: try codeNow(secret))
        XCTAssertNotEqual(replay.status, 0, "a replay is refused for a trusted caller too")
        // An admin operation stays root's: the trusted caller's own totp-enroll cannot act for others.
        let status = try runCommand(trusted.setpriv + [enrollURL.path, "status", "--user", "nobody"])
        XCTAssertNotEqual(status.status, 0, status.stdout)
    }

    /// Issue 39, item 3: on pam-totpd's refusal a forward_pass line still hands the password part
    /// on (pam_unix logged "auth could not identify password" before), and denies with a log line.
    /// pam_exec with expose_authtok stands in for the password module: it records what it got,
    /// and would have asked again ("Password: ") had nothing been handed on.
    func testARefusalStillHandsThePasswordOn() throws {
        let secret = randomTOTPSecret()
        try daemon.enroll("nobody", uid: 65534, secret: secret)
        let spool = try makeTemporaryDirectory("pam_totp_handon")
        defer { removeTemporaryDirectory(spool) }
        XCTAssertEqual(chmod(spool.path, 0o1777), 0)
        let got = spool.appendingPathComponent("got").path
        let checker = spool.appendingPathComponent("check").path
        try "#!/bin/sh\ntr -d '\\000' > \(got)\nexit 1\n".write(toFile: checker, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(checker, 0o755), 0)
        try """
            auth required \(moduleURL.path) forward_pass socket=\(daemon.socketPath)
            auth required pam_exec.so expose_authtok quiet \(checker)

            """.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        let r = try pamtester(as: other, user: "nobody", answer: "my password" + (try codeNow(secret)))
        XCTAssertNotEqual(r.status, 0, "a refused caller passed")
        XCTAssertFalse(r.stdout.contains("Password: "), "the password module asked again: nothing was handed on: " + r.stdout)
        XCTAssertEqual(try? String(contentsOfFile: got, encoding: .utf8), "my password", "the password part handed on")
        XCTAssertEqual(try daemon.state("nobody").failures, 0)
    }

    /// A bad list refuses to start, naming the setting; a name with no account is left out (with a
    /// warning in syslog) and the daemon starts.
    func testTheListIsChecked() throws {
        let d = try DaemonFixture()
        defer { d.cleanup() }
        for bad in ["trusted_callers = root", "trusted_callers = -x", "trusted_callers =", "trusted_callers = a/b"] {
            try "store = \(d.store)\n\(bad)\n".write(toFile: d.config, atomically: true, encoding: .utf8)
            let r = try runCommand([daemonURL.path, "--config", d.config, "--socket", d.socketPath])
            XCTAssertNotEqual(r.status, 0, bad)
            XCTAssertTrue(r.stderr.contains("trusted_callers"), bad + ": " + r.stderr)
        }
        try "store = \(d.store)\ntrusted_callers = nosuchaccount-xyz\n".write(toFile: d.config, atomically: true, encoding: .utf8)
        XCTAssertNoThrow(try d.start(), "a name with no account (FreeRADIUS not installed yet) is left out, not fatal")
    }
}
