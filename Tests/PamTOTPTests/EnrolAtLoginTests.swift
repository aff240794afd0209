import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Enrolment at first login (`enroll_at_login=YYYY-MM-DD`): through the real libpam with an
/// application that reads the QR code drawn in the conversation (zbarimg) and types the code
/// its "app" shows; through pamtester on a pseudo-terminal; bounded by the date and by group
/// sections; libqrencode loaded only on this path.
final class EnrolAtLoginTests: XCTestCase {
    var fixture: PAMFixture!
    var store: Store!

    override func setUpWithError() throws {
        fixture = try PAMFixture()
        store = try Store(path: Array(fixture.store.path.utf8))
    }

    override func tearDown() { fixture?.cleanup() }

    /// The URI in a QR code drawn with half blocks (light modules drawn) among `messages`.
    static func decodeQR(_ messages: [String], in dir: URL) throws -> String {
        let text = messages.joined(separator: "\n")
        let image = dir.appendingPathComponent("conversation-qr.pgm")
        // Drawn light modules on the usual dark terminal: the dark theme shows them right.
        try terminalImage(text, theme: .dark).write(to: image, atomically: true, encoding: .ascii)
        let zbar = try runCommand(["zbarimg", "--raw", "-q", image.path])
        XCTAssertEqual(zbar.status, 0, "zbarimg: \(zbar.stderr)")
        return zbar.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A conversation that scans the QR code and answers with the code at `offset` steps
    /// (nil: a wrong code); `uri` receives what was scanned.
    func scanningConversation(offset: Int64? = 0, uri: Scanned) -> Conversation {
        let c = Conversation(answer: nil)
        let dir = fixture.root
        c.respond = { shown in
            guard let scanned = try? Self.decodeQR(shown, in: dir), let parsed = try? OTPAuthURI(parsing: Array(scanned.utf8)) else {
                return Array("000000".utf8)
            }
            uri.value = scanned
            guard let offset else { return Array("99999".utf8) }
            return try? TOTP.code(secret: parsed.secret, parameters: parsed.parameters, at: Int64(time(nil)) + offset * 30)
        }
        return c
    }

    func testAValidCodeSavesTheFactorAndSucceeds() throws {
        try fixture.service("enrol", ["auth required MODULE STORE enroll_at_login=2999-12-31"])
        awayFromStepBoundary()
        let uri = Scanned()
        let c = scanningConversation(uri: uri)
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: c), PAM_SUCCESS)
        XCTAssertTrue(c.prompts.first?.contains("no verification-code factor yet") == true, "\(c.prompts)")
        XCTAssertTrue(c.prompts.contains { $0.contains("2999-12-31") }, "the user is told until when")
        XCTAssertTrue(c.prompts.contains { $0.contains("Key: ") && $0.contains("URI: otpauth://totp/") }, "\(c.prompts)")
        XCTAssertTrue(c.prompts.contains("Verification code from your app: "))
        XCTAssertTrue(c.prompts.allSatisfy { $0.utf8.count < 512 }, "every message under PAM_MAX_MSG_SIZE")
        XCTAssertTrue(c.prompts.last?.hasPrefix("Enrolled.") == true, "\(c.prompts.last ?? "")")
        // The factor is saved with the proving step used, and its secret is the scanned one.
        let parsed = try OTPAuthURI(parsing: Array(uri.value.utf8))
        let record = try XCTUnwrap(try store.read(user: Array("nobody".utf8)))
        XCTAssertEqual(record.factors.count, 1)
        XCTAssertEqual(record.factors[0].otpKey?.secret, parsed.secret)
        XCTAssertEqual(record.uid, 65534, "bound to the account")
        XCTAssertEqual(record.factors[0].data.enrolledStep, UInt64(time(nil) / 30))
        // The same code cannot log in again; the next one can, at an ordinary prompt.
        let same = try TOTP.code(secret: parsed.secret, parameters: .default, at: Int64(time(nil)))
        let replay = Conversation(answer: same)
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: replay), PAM_AUTH_ERR)
        XCTAssertEqual(replay.prompts, ["Verification code: "], "an enrolled user is not offered enrolment")
        let next = try TOTP.code(secret: parsed.secret, parameters: .default, at: Int64(time(nil)) + 30)
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: Conversation(answer: next)), PAM_SUCCESS)
    }

    func testAnythingElseSavesNothingAndFails() throws {
        try fixture.service("enrol", ["auth required MODULE STORE enroll_at_login=2999-12-31"])
        let uri = Scanned()
        let wrong = scanningConversation(offset: nil, uri: uri)
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: wrong), PAM_AUTH_ERR)
        XCTAssertFalse(uri.value.isEmpty, "the QR code was scanned")
        XCTAssertNil(try store.read(user: Array("nobody".utf8)), "nothing saved")
        XCTAssertEqual(try store.users(), [])
        // A code far outside the window, and a failed conversation: nothing saved either.
        let late = scanningConversation(offset: 40, uri: uri)
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: late), PAM_AUTH_ERR)
        let broken = Conversation(answer: nil)
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: broken), PAM_CONV_ERR)
        XCTAssertNil(try store.read(user: Array("nobody".utf8)))
        // A name without an account is never offered enrolment (asked and denied as usual).
        let ghost = Conversation(answer: Array("123456".utf8))
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "no-such-user-\(getpid())", conversation: ghost), PAM_AUTH_ERR)
        XCTAssertEqual(ghost.prompts, ["Verification code: "])
    }

    /// Someone with only the password opens the enrolment prompt while the user has no factor;
    /// the user then enrols one (totp-enroll) before the prompt is answered. The answer must not
    /// add the intruder's secret beside the user's factor: enrolment at login is for a user with
    /// none, checked again under the lock.
    func testAFactorEnrolledWhileThePromptIsOpenWinsAndNothingIsAdded() throws {
        try fixture.service("enrol", ["auth required MODULE STORE enroll_at_login=2999-12-31"])
        awayFromStepBoundary()
        let uri = Scanned()
        let c = scanningConversation(uri: uri)
        let inner = c.respond
        let victimSecret = Array("abcdefghijabcdefghij".utf8)
        let store = self.store!
        c.respond = { shown in
            // The QR code is on screen: meanwhile the owner of the account enrols "phone".
            var rng = SystemRandomNumberGenerator()
            if let factor = try? Factor(label: Array("phone".utf8), parameters: .default, created: Int64(time(nil)),
                                        enrolledStep: 0, secret: victimSecret) {
                _ = try? store.enroll(user: Array("nobody".utf8), accountUID: 65534, factor: factor, using: &rng)
            }
            return inner?(shown)
        }
        XCTAssertEqual(fixture.authenticate(service: "enrol", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertFalse(uri.value.isEmpty, "the QR code was scanned and a right code typed")
        let record = try XCTUnwrap(try store.read(user: Array("nobody".utf8)))
        XCTAssertEqual(record.factors.map { String(decoding: $0.label, as: UTF8.self) }, ["phone"],
                       "only the owner's factor: the intruder's was not added beside it")
    }

    /// pamtester (libpam's own text conversation) on a pseudo-terminal, the QR code scanned from
    /// what it printed; and libqrencode is loaded on this path only (LD_DEBUG=libs).
    func testThroughPamtesterAndOnlyThisPathLoadsLibqrencode() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d")
        let service = "pam_totp_enrol_\(getpid())"
        try "auth required \(moduleURL.path) store=\(fixture.store.path) enroll_at_login=2999-12-31\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        defer { unlink("/etc/pam.d/" + service) }
        let script = fixture.root.appendingPathComponent("driver.py")
        try pamtesterDriver.write(to: script, atomically: true, encoding: .utf8)

        let wrong = try runCommand(["python3", script.path, "wrong", "pamtester", service, "nobody", "authenticate"])
        XCTAssertTrue(wrong.stdout.contains("\nEXIT 1\n") || !wrong.stdout.contains("EXIT 0"), wrong.stdout + wrong.stderr)
        XCTAssertTrue(wrong.stdout.contains("URI otpauth://totp/"), "the QR code printed by pamtester scans: " + wrong.stdout)
        XCTAssertNil(try store.read(user: Array("nobody".utf8)), "a wrong code saves nothing")

        awayFromStepBoundary(margin: 8)
        let r = try runCommand(["env", "LD_DEBUG=libs", "python3", script.path, "right", "pamtester", service, "nobody", "authenticate"])
        XCTAssertTrue(r.stdout.contains("\nEXIT 0\n"), r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("successfully authenticated"), r.stdout)
        XCTAssertTrue(r.stdout.contains("libqrencode.so.4"), "the enrolment path loads libqrencode")
        let scanned = try XCTUnwrap(r.stdout.split(separator: "\n").first { $0.hasPrefix("URI ") }).dropFirst(4)
        let record = try XCTUnwrap(try store.read(user: Array("nobody".utf8)))
        XCTAssertEqual(record.factors.first?.otpKey?.secret, try OTPAuthURI(parsing: Array(scanned.utf8)).secret)

        // An ordinary login of the now enrolled user never loads it.
        let next = String(decoding: try TOTP.code(secret: record.factors[0].otpKey?.secret ?? [], parameters: .default, at: Int64(time(nil)) + 30), as: UTF8.self)
        let login = try runCommand(["env", "LD_DEBUG=libs", "pamtester", service, "nobody", "authenticate"], input: next + "\n")
        XCTAssertEqual(login.status, 0, login.stdout + login.stderr)
        XCTAssertTrue(login.stderr.contains("pam_totp.so"), "LD_DEBUG shows the module being loaded")
        XCTAssertFalse((login.stdout + login.stderr).contains("libqrencode"), "an ordinary login loads libqrencode")
    }

    /// Through a real sshd (the shipped password-then-code stack with enroll_at_login added),
    /// over keyboard-interactive, as a user with no factor: the ssh client prints the QR code
    /// drawn in the conversation, which is scanned; the right code logs in and saves the factor,
    /// a wrong one saves nothing.
    func testThroughARealSSHD() throws {
        try XCTSkipUnless(isRoot, "a real sshd needs root (users, /etc/pam.d, /run/sshd)")
        let world = try SSHDWorld()
        defer { world.cleanup() }
        let server = try world.server("sshd", moduleArguments: "enroll_at_login=2999-12-31", tag: "enrol")
        let user = try XCTUnwrap(world.users[.unenrolled])
        let script = fixture.root.appendingPathComponent("driver.py")
        try pamtesterDriver.write(to: script, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["PAMTOTP_PASSWORD"] = user.password
        environment["LC_ALL"] = "C.UTF-8"  // the client prints UTF-8 (the half blocks) only in a UTF-8 locale
        func ssh(_ mode: String) throws -> CommandResult {
            try runCommand(["python3", script.path, mode, "ssh", "-F", "/dev/null", "-p", String(server.port),
                            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                            "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=keyboard-interactive",
                            "-o", "NumberOfPasswordPrompts=1", "-o", "ConnectTimeout=5",
                            user.name + "@127.0.0.1", SSHDServer.remoteCommand], environment: environment)
        }
        let userStore = try Store(path: Array(server.store.path.utf8))
        let wrong = try ssh("wrong")
        XCTAssertTrue(wrong.stdout.contains("URI otpauth://totp/"), "the QR code shown by ssh scans:\n" + wrong.stdout + "\n" + server.log())
        XCTAssertFalse(wrong.stdout.contains(SSHDServer.remoteOutput), wrong.stdout)
        XCTAssertNil(try userStore.read(user: Array(user.name.utf8)), "a wrong code saves nothing")

        awayFromStepBoundary(margin: 8)
        let right = try ssh("right")
        XCTAssertTrue(right.stdout.contains(SSHDServer.remoteOutput), "logged in after enrolling:\n" + right.stdout + "\n" + server.log())
        XCTAssertTrue(right.stdout.contains("\nEXIT 0\n"), right.stdout)
        XCTAssertTrue(server.log().contains("Accepted keyboard-interactive/pam for \(user.name) from 127.0.0.1"), server.log())
        let scanned = try XCTUnwrap(right.stdout.split(separator: "\n").first { $0.hasPrefix("URI ") }).dropFirst(4)
        let record = try XCTUnwrap(try userStore.read(user: Array(user.name.utf8)))
        XCTAssertEqual(record.factors.first?.otpKey?.secret, try OTPAuthURI(parsing: Array(scanned.utf8)).secret)
        XCTAssertEqual(record.uid, getpwnam(user.name).map { $0.pointee.pw_uid })
    }

    func testBoundedByTheLastDayAndByGroupSections() throws {
        // Past the last day: not offered; the user is unenrolled as usual (nullok: PAM_IGNORE).
        try fixture.service("over", ["auth required MODULE STORE enroll_at_login=2001-01-01"])
        try fixture.service("over-nullok", ["auth required MODULE STORE enroll_at_login=2001-01-01 nullok",
                                            "auth required pam_permit.so"])
        let over = Conversation(answer: Array("123456".utf8))
        XCTAssertEqual(fixture.authenticate(service: "over", user: "nobody", conversation: over), PAM_AUTH_ERR)
        XCTAssertEqual(over.prompts, ["Verification code: "])
        let overNullok = Conversation(answer: nil)
        XCTAssertEqual(fixture.authenticate(service: "over-nullok", user: "nobody", conversation: overNullok), PAM_SUCCESS)
        XCTAssertEqual(overNullok.prompts, [])
        // Offered only to the members of one group.
        let conf = fixture.root.appendingPathComponent("pam_totp.conf")
        try "nullok\n[group nogroup]\nenroll_at_login = 2999-12-31\n".write(to: conf, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(conf.path, 0o644), 0)
        try fixture.service("group", ["auth required MODULE STORE config=\(conf.path)", "auth required pam_permit.so"])
        let outsider = Conversation(answer: nil)
        XCTAssertEqual(fixture.authenticate(service: "group", user: "daemon", conversation: outsider), PAM_SUCCESS)
        XCTAssertEqual(outsider.prompts, [], "daemon is not in nogroup: nullok, not offered")
        let uri = Scanned()
        awayFromStepBoundary()
        let member = scanningConversation(uri: uri)
        XCTAssertEqual(fixture.authenticate(service: "group", user: "nobody", conversation: member), PAM_SUCCESS)
        XCTAssertNotNil(try store.read(user: Array("nobody".utf8)))
        // Malformed days deny like any bad option.
        for bad in ["enroll_at_login", "enroll_at_login=2026-02-30", "enroll_at_login=1999-12-31", "enroll_at_login=tomorrow"] {
            try fixture.service("bad", ["auth required MODULE STORE \(bad)"])
            XCTAssertEqual(fixture.authenticate(service: "bad", user: "daemon", conversation: Conversation(answer: nil)), PAM_SERVICE_ERR, bad)
        }
    }
}

/// Drives `pamtester SERVICE USER authenticate` on a pseudo-terminal like a person with a phone:
/// reads the conversation up to the code prompt, rebuilds the half-block QR code as an image,
/// scans it with zbarimg, takes the code for the scanned key from oathtool and types it.
/// Prints the transcript, then "URI <scanned>" and "EXIT <status>".
let pamtesterDriver = #"""
import os, pty, select, subprocess, sys, tempfile, time
wrong = sys.argv[1] == "wrong"
command = sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(command[0], command)
def read_until(markers, seconds):
    buf = b""
    end = time.time() + seconds
    while not any(m in buf for m in markers) and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            buf += data
    return buf
def scan(text):
    rows = []
    for line in text.splitlines():
        if not any(c in line for c in "\u2588\u2580\u2584"):
            continue
        top, bottom = [], []
        for c in line.rstrip("\r"):
            top.append(255 if c in "\u2588\u2580" else 0)
            bottom.append(255 if c in "\u2588\u2584" else 0)
        rows += [top, bottom]
    if not rows:
        return ""
    scale = 4
    width = max(len(r) for r in rows) * scale
    with tempfile.NamedTemporaryFile(suffix=".pgm", delete=False) as f:
        f.write(b"P5\n%d %d\n255\n" % (width, len(rows) * scale))
        for r in rows:
            r = r + [0] * (width // scale - len(r))
            f.write(bytes(v for v in r for _ in range(scale)) * scale)
        image = f.name
    uri = subprocess.run(["zbarimg", "--raw", "-q", image], capture_output=True, text=True).stdout.strip()
    os.unlink(image)
    return uri
transcript = b""
uri = ""
for _ in range(6):
    got = read_until([b"Password:", b"Verification code from your app:"], 30)
    transcript += got
    if b"Verification code from your app:" in got:
        uri = scan(transcript.decode("utf-8", "replace"))
        secret = ""
        for part in uri.split("?", 1)[-1].split("&"):
            if part.startswith("secret="):
                secret = part[7:]
        code = subprocess.run(["oathtool", "--totp", "-b", secret], capture_output=True, text=True).stdout.strip() if secret else "000000"
        os.write(fd, ((("99999" if wrong else code)) + "\n").encode())
        break
    elif b"Password:" in got:
        os.write(fd, (os.environ.get("PAMTOTP_PASSWORD", "") + "\n").encode())
    else:
        break
transcript += read_until([b"\x00never"], 20)
# Bounded: a program still waiting at a prompt nobody answered (no enrolment offered) is killed.
end = time.time() + 10
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.time() > end:
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
        break
    time.sleep(0.2)
sys.stdout.write(transcript.decode("utf-8", "replace"))
sys.stdout.write("\nURI %s\nEXIT %d\n" % (uri, os.waitstatus_to_exitcode(status)))
"""#

/// What a scanning conversation read from the QR code.
final class Scanned { var value = "" }
