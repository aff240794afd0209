import CPAM
import Foundation
import MFACore
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
        XCTAssertEqual(record.factors[0].secret, parsed.secret)
        XCTAssertEqual(record.uid, 65534, "bound to the account")
        XCTAssertEqual(record.factors[0].enrolledStep, UInt64(time(nil) / 30))
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

        let wrong = try runCommand(["python3", script.path, service, "nobody", "wrong"])
        XCTAssertTrue(wrong.stdout.contains("\nEXIT 1\n") || !wrong.stdout.contains("EXIT 0"), wrong.stdout + wrong.stderr)
        XCTAssertTrue(wrong.stdout.contains("URI otpauth://totp/"), "the QR code printed by pamtester scans: " + wrong.stdout)
        XCTAssertNil(try store.read(user: Array("nobody".utf8)), "a wrong code saves nothing")

        awayFromStepBoundary(margin: 8)
        let r = try runCommand(["env", "LD_DEBUG=libs", "python3", script.path, service, "nobody"])
        XCTAssertTrue(r.stdout.contains("\nEXIT 0\n"), r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("successfully authenticated"), r.stdout)
        XCTAssertTrue(r.stdout.contains("libqrencode.so.4"), "the enrolment path loads libqrencode")
        let scanned = try XCTUnwrap(r.stdout.split(separator: "\n").first { $0.hasPrefix("URI ") }).dropFirst(4)
        let record = try XCTUnwrap(try store.read(user: Array("nobody".utf8)))
        XCTAssertEqual(record.factors.first?.secret, try OTPAuthURI(parsing: Array(scanned.utf8)).secret)

        // An ordinary login of the now enrolled user never loads it.
        let next = String(decoding: try TOTP.code(secret: record.factors[0].secret, parameters: .default, at: Int64(time(nil)) + 30), as: UTF8.self)
        let login = try runCommand(["env", "LD_DEBUG=libs", "pamtester", service, "nobody", "authenticate"], input: next + "\n")
        XCTAssertEqual(login.status, 0, login.stdout + login.stderr)
        XCTAssertTrue(login.stderr.contains("pam_totp.so"), "LD_DEBUG shows the module being loaded")
        XCTAssertFalse((login.stdout + login.stderr).contains("libqrencode"), "an ordinary login loads libqrencode")
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
svc, user = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execvp("pamtester", ["pamtester", svc, user, "authenticate"])
def read_until(marker, seconds):
    buf = b""
    end = time.time() + seconds
    while marker not in buf and time.time() < end:
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
shown = read_until(b"Verification code from your app:", 30)
text = shown.decode("utf-8", "replace")
rows = []
for line in text.splitlines():
    if not any(c in line for c in "\u2588\u2580\u2584"):
        continue
    top, bottom = [], []
    for c in line.rstrip("\r"):
        top.append(255 if c in "\u2588\u2580" else 0)
        bottom.append(255 if c in "\u2588\u2584" else 0)
    rows += [top, bottom]
uri = ""
if rows:
    scale = 4
    width = max(len(r) for r in rows) * scale
    with tempfile.NamedTemporaryFile(suffix=".pgm", delete=False) as f:
        f.write(b"P5\n%d %d\n255\n" % (width, len(rows) * scale))
        for r in rows:
            r = r + [0] * (width // scale - len(r))
            line = bytes(v for v in r for _ in range(scale))
            f.write(line * scale)
        image = f.name
    uri = subprocess.run(["zbarimg", "--raw", "-q", image], capture_output=True, text=True).stdout.strip()
    os.unlink(image)
secret = ""
for part in uri.split("?", 1)[-1].split("&"):
    if part.startswith("secret="):
        secret = part[7:]
code = subprocess.run(["oathtool", "--totp", "-b", secret], capture_output=True, text=True).stdout.strip() if secret else "000000"
if len(sys.argv) > 3 and sys.argv[3] == "wrong":
    code = "99999"
os.write(fd, (code + "\n").encode())
rest = read_until(b"\x00never", 15)
_, status = os.waitpid(pid, 0)
sys.stdout.write(text + rest.decode("utf-8", "replace"))
sys.stdout.write("\nURI %s\nEXIT %d\n" % (uri, os.waitstatus_to_exitcode(status)))
"""#

/// What a scanning conversation read from the QR code.
final class Scanned { var value = "" }
