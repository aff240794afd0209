import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// One login, one verdict (docs/ARCHITECTURE.md, section 4.18; a new admin's trial): with the
/// pam-auth-update profile enabled (`pam_totp.so nullok` in common-auth) and the README's
/// per-service line added, a wrong code made the second line ask again, a right answer there was
/// accepted and spent while the login was denied, each wrong code counted twice, and two
/// identical lines without arguments asked twice even for a right code. Within one
/// pam_authenticate the first line that asks decides for the user, store and service; later
/// lines prompt for nothing, count nothing and return its code. A line that did not ask (nullok
/// for an un-enrolled user) decides nothing. Nothing carries over to another pam_authenticate
/// (pam_setcred or not) or another handle.
final class OneVerdictTests: XCTestCase {
    var pam: PAMFixture!
    let secret = Array("12345678901234567890".utf8)

    override func setUpWithError() throws {
        pam = try PAMFixture()
        try pam.enroll("nobody", secret: secret)
    }

    override func tearDown() { pam?.cleanup() }

    /// Answers every question with `answer`, counting the code prompts.
    func conversation(_ answer: [UInt8]) -> Conversation { Conversation(answer: answer) }
    func codePrompts(_ c: Conversation) -> Int { c.prompts.filter { $0.contains("Verification code") }.count }

    func testTwoLinesInOneStackAskOnce() throws {
        try pam.service("twice", ["auth required MODULE STORE", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let c = conversation(try currentCode(secret))
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: c), PAM_SUCCESS)
        XCTAssertEqual(codePrompts(c), 1, "asked \(c.prompts)")
        XCTAssertEqual(try pam.state("nobody").failures, 0, "no replayed second answer counted")
    }

    /// A wrong code: one prompt, one failure, and the later line returns the same failure.
    /// Before, the second line asked again and each wrong code counted twice.
    func testAWrongCodeDecidesForTheLaterLines() throws {
        try pam.service("twice", ["auth required MODULE STORE", "auth required MODULE STORE"])
        let c = conversation(Array("000000".utf8))
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(codePrompts(c), 1, "the second line asked again: \(c.prompts)")
        XCTAssertEqual(try pam.state("nobody").failures, 1, "one wrong code, one failure")
        // An optional first line that failed and a required second one: the second returns the
        // first one's failure; the right code typed next is never asked for, so it is not spent.
        try pam.service("optional", ["auth optional MODULE STORE", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let good = try currentCode(secret)
        var asked = 0
        let d = Conversation(answer: nil)
        d.respond = { _ in asked += 1; return asked == 1 ? Array("000000".utf8) : good }
        XCTAssertEqual(pam.authenticate(service: "optional", user: "nobody", conversation: d), PAM_AUTH_ERR)
        XCTAssertEqual(asked, 1, "asked \(d.prompts)")
        XCTAssertEqual(try pam.state("nobody").failures, 2)
        try pam.service("once", ["auth required MODULE STORE"])
        XCTAssertEqual(pam.authenticate(service: "once", user: "nobody", conversation: conversation(good)), PAM_SUCCESS,
                       "the right code was not spent by a denied login")
    }

    /// The trial's replay: the profile's line (`nullok`) and the service's plain line, a wrong
    /// code then the right one. Before: two prompts, failures 0, the right code accepted and
    /// spent by the second line while the login was denied.
    func testTheProfileLineAndAServiceLineAskOnceAndCountOnce() throws {
        try pam.service("profile", ["auth required MODULE STORE nullok", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let good = try currentCode(secret)
        var asked = 0
        let c = Conversation(answer: nil)
        c.respond = { _ in asked += 1; return asked == 1 ? Array("111111".utf8) : good }
        XCTAssertEqual(pam.authenticate(service: "profile", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(asked, 1, "prompts: \(c.prompts)")
        XCTAssertEqual(try pam.state("nobody").failures, 1)
        let d = conversation(good)
        XCTAssertEqual(pam.authenticate(service: "profile", user: "nobody", conversation: d), PAM_SUCCESS, "the right code was not spent")
        XCTAssertEqual(codePrompts(d), 1)
        XCTAssertEqual(try pam.state("nobody").failures, 0)
    }

    /// A line that did not ask decides nothing: an un-enrolled user passes the profile's nullok
    /// line unasked, and the strict line after it asks and denies (as `totp-enroll policy`
    /// shows and `totp-enroll check` reports).
    func testANullokLineThatDidNotAskLeavesTheStrictLineToDecide() throws {
        try pam.service("profile", ["auth required MODULE STORE nullok", "auth required MODULE STORE"])
        let c = conversation(try currentCode(secret))
        XCTAssertEqual(pam.authenticate(service: "profile", user: "daemon", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(codePrompts(c), 1, "the strict line asked: \(c.prompts)")
        try pam.service("both-nullok", ["auth required MODULE STORE nullok", "auth required MODULE STORE nullok",
                                        "auth required pam_permit.so"])
        let d = conversation(try currentCode(secret))
        XCTAssertEqual(pam.authenticate(service: "both-nullok", user: "daemon", conversation: d), PAM_SUCCESS)
        XCTAssertEqual(codePrompts(d), 0, "\(d.prompts)")
    }

    /// Review of this change: a success bound every later line, a stricter one too, and an
    /// ignore did as well. Now a success binds a later line only of the same strength: a line
    /// that allows only HOTP does not take an app code the first line accepted, it decides on its
    /// own. A failure binds whatever the strength (one prompt, one failure). An ignore binds
    /// nothing: a forward_pass nullok line's ignore for a user without a factor does not skip a
    /// strict line after it (before, pam_permit after them let the user in with no code).
    func testOnlyASuccessOfTheSameStrengthAndAFailureBindALaterLine() throws {
        try pam.service("stricter", ["auth required MODULE STORE", "auth required MODULE STORE factor_kinds=hotp"])
        awayFromStepBoundary()
        let c = conversation(try currentCode(secret))
        XCTAssertEqual(pam.authenticate(service: "stricter", user: "nobody", conversation: c), PAM_AUTH_ERR,
                       "an app code passed a line that allows only tokens")
        XCTAssertTrue(c.prompts.contains { $0.contains("None of your factors may be used here.") }, "\(c.prompts)")
        let d = conversation(Array("000000".utf8))
        XCTAssertEqual(pam.authenticate(service: "stricter", user: "nobody", conversation: d), PAM_AUTH_ERR)
        XCTAssertEqual(codePrompts(d), 1, "a failure binds the stricter line: \(d.prompts)")
        XCTAssertEqual(try pam.state("nobody").failures, 1)
        try pam.service("ignored", ["auth required MODULE STORE forward_pass nullok", "auth required MODULE STORE",
                                    "auth required pam_permit.so"])
        let e = conversation(Array("password123456".utf8))
        XCTAssertEqual(pam.authenticate(service: "ignored", user: "daemon", conversation: e), PAM_AUTH_ERR,
                       "an earlier ignore skipped the strict line: \(e.prompts)")
        XCTAssertEqual(codePrompts(e), 1, "the strict line asked: \(e.prompts)")
    }

    func testAnotherStoreOrAnUnenrolledFirstLineIsNotReused() throws {
        // nullok on an unenrolled user's store gives PAM_IGNORE: never a verdict to reuse.
        let other = pam.root.appendingPathComponent("other-store")
        XCTAssertEqual(mkdir(other.path, 0o700), 0)
        try pam.service("stores", ["auth optional MODULE store=\(other.path) nullok", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let c = conversation(try currentCode(secret))
        XCTAssertEqual(pam.authenticate(service: "stores", user: "nobody", conversation: c), PAM_SUCCESS)
        XCTAssertEqual(codePrompts(c), 1, "the unenrolled store did not ask; the enrolled one did: \(c.prompts)")
        // An accepted code from one store is not another store's verdict.
        try Store(path: Array(other.path.utf8)).write(user: Array("nobody".utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: secret)]))
        try pam.service("two-stores", ["auth required MODULE store=\(other.path)", "auth required MODULE STORE"])
        let d = conversation(try currentCode(secret, offsetSteps: 1))
        XCTAssertEqual(pam.authenticate(service: "two-stores", user: "nobody", conversation: d), PAM_SUCCESS)
        XCTAssertEqual(codePrompts(d), 2, "each store asked: \(d.prompts)")
    }

    func testANewAuthenticationOnTheSameHandleAsksAgain() throws {
        try pam.service("locker", ["auth required MODULE STORE"])
        awayFromStepBoundary()
        // After pam_setcred (what an application does after a successful authentication).
        let c = conversation(try currentCode(secret))
        let (first, second) = pam.authenticateTwice(service: "locker", user: "nobody", conversation: c,
                                                    between: { XCTAssertEqual(pam_setcred($0, Int32(PAM_REFRESH_CRED)), PAM_SUCCESS) })
        XCTAssertEqual(first, PAM_SUCCESS)
        XCTAssertEqual(second, PAM_AUTH_ERR, "the same code again is a replay: it was asked and refused")
        XCTAssertEqual(codePrompts(c), 2)
        // A different user on the same handle is asked too.
        try pam.enroll("daemon", secret: secret)
        let d = conversation(try currentCode(secret, offsetSteps: 1))
        let (a, b) = pam.authenticateTwice(service: "locker", user: "nobody", conversation: d,
                                           between: { XCTAssertEqual(pam_set_item($0, PAM_USER, "daemon"), PAM_SUCCESS) })
        XCTAssertEqual(a, PAM_SUCCESS)
        XCTAssertEqual(b, PAM_SUCCESS, "daemon's own code (same secret, not yet used for daemon)")
        XCTAssertEqual(codePrompts(d), 2, "daemon was asked: \(d.prompts)")
    }

    /// An application that keeps its handle and calls pam_authenticate again without
    /// pam_setcred (a screen locker that skips it): the second call is asked again, whoever is
    /// at the keyboard (libpam clears the pass's mark, PAM_OLDAUTHTOK, around each call).
    func testAnotherPamAuthenticateOnTheSameHandleAsksAgainWithoutSetcred() throws {
        try pam.service("locker", ["auth required MODULE STORE"])
        awayFromStepBoundary()
        let c = conversation(try currentCode(secret))
        let (first, second) = pam.authenticateTwice(service: "locker", user: "nobody", conversation: c)
        XCTAssertEqual(first, PAM_SUCCESS)
        XCTAssertEqual(codePrompts(c), 2, "the second pam_authenticate was not asked: \(c.prompts)")
        XCTAssertEqual(second, PAM_AUTH_ERR, "the same code again is a replay: asked and refused")
        // Two lines: the first pass asks once, the second pass asks again (once: its second line
        // reuses its first line's new code).
        try pam.service("twice", ["auth required MODULE STORE", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let d = Conversation(answer: nil)
        let codes = [try currentCode(secret, offsetSteps: 1), try currentCode(secret, offsetSteps: 2)]
        var asked = 0
        d.respond = { _ in asked += 1; return codes[min(asked, 2) - 1] }
        let (a, b) = pam.authenticateTwice(service: "twice", user: "nobody", conversation: d)
        XCTAssertEqual(a, PAM_SUCCESS)
        XCTAssertEqual(b, PAM_SUCCESS, "the second pass's own code")
        XCTAssertEqual(asked, 2, "once per pam_authenticate: \(d.prompts)")
        // A failure is not carried over either: a locker's user who mistyped is asked again.
        let e = Conversation(answer: nil)
        let good = try currentCode(secret, offsetSteps: 3)
        var tries = 0
        e.respond = { _ in tries += 1; return tries == 1 ? Array("000000".utf8) : good }
        let (x, y) = pam.authenticateTwice(service: "twice", user: "nobody", conversation: e)
        XCTAssertEqual(x, PAM_AUTH_ERR)
        XCTAssertEqual(y, PAM_SUCCESS, "the second pam_authenticate asked and accepted its own code")
        XCTAssertEqual(tries, 2, "\(e.prompts)")
    }

    /// A new handle (a new login) asks again.
    func testANewHandleAsksAgain() throws {
        try pam.service("twice", ["auth required MODULE STORE", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let code = try currentCode(secret)
        let c = conversation(code)
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: c), PAM_SUCCESS)
        let d = conversation(code)
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: d), PAM_AUTH_ERR, "asked, a replay")
        XCTAssertEqual(codePrompts(c), 1)
        XCTAssertEqual(codePrompts(d), 1, "the new handle asked (its first line decided): \(d.prompts)")
    }

    /// A module between the two lines changes PAM_USER (a test module, pam_setuser, built
    /// here): the second line's user never proved anything, so it is asked, with its own code.
    func testAUserChangedBetweenTheLinesIsAskedAgain() throws {
        let other = Array("abcdefghijabcdefghij".utf8)
        try pam.enroll("daemon", secret: other)
        let source = pam.root.appendingPathComponent("pam_setuser.c"), module = pam.root.appendingPathComponent("pam_setuser.so")
        try """
            #include <security/pam_modules.h>
            int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
                (void)flags;
                return argc == 1 && pam_set_item(pamh, PAM_USER, argv[0]) == PAM_SUCCESS ? PAM_SUCCESS : PAM_SERVICE_ERR;
            }
            int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
                (void)pamh; (void)flags; (void)argc; (void)argv;
                return PAM_SUCCESS;
            }
            """.write(to: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["cc", "-shared", "-fPIC", "-Wall", "-o", module.path, source.path, "-lpam"])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        try pam.service("switch", ["auth required MODULE STORE", "auth required \(module.path) daemon", "auth required MODULE STORE"])
        awayFromStepBoundary()
        // nobody's code for both questions: the second, daemon's, is wrong.
        let c = conversation(try currentCode(secret))
        XCTAssertEqual(pam.authenticate(service: "switch", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(codePrompts(c), 2, "daemon was asked: \(c.prompts)")
        XCTAssertEqual(try pam.state("daemon").failures, 1, "daemon's wrong code counted")
        // Each user's own code: success, two questions.
        let codes = [try currentCode(secret, offsetSteps: 1), try currentCode(other)]
        var asked = 0
        let d = Conversation(answer: nil)
        d.respond = { _ in asked += 1; return codes[min(asked, 2) - 1] }
        XCTAssertEqual(pam.authenticate(service: "switch", user: "nobody", conversation: d), PAM_SUCCESS)
        XCTAssertEqual(asked, 2)
    }

    /// pamtester (one answer on stdin, so a second question would fail the conversation)
    /// through a two-line stack: one acceptance in syslog, no line holds the code; the later
    /// line says it was not asked only under `debug`.
    func testTheLaterLineLogsNoAcceptance() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d and the test binds the syslog socket (run as root)")
        let service = "ov\(getpid())_twice"
        try "auth required \(moduleURL.path) store=\(pam.store.path)\nauth required \(moduleURL.path) store=\(pam.store.path) debug\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        defer { unlink("/etc/pam.d/" + service) }
        let capture = try SyslogCapture(scratch: pam.root)
        awayFromStepBoundary()
        let code = String(decoding: try currentCode(secret), as: UTF8.self)
        let r = try runCommand(capture.wrap(["pamtester", service, "nobody", "authenticate"]), input: code + "\n")
        let lines = capture.stop().filter { $0.contains(service) }
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        let all = lines.joined(separator: "\n")
        XCTAssertEqual(lines.filter { $0.contains("accepted code for user nobody") }.count, 1, all)
        XCTAssertEqual(lines.filter { $0.contains("user nobody: an earlier pam_totp line of this authentication decided (PAM code 0); not asked again") }.count, 1, all)
        XCTAssertFalse(all.contains(code), "the code in syslog: \(all)")
    }

    /// The trial's other replay: two identical lines WITHOUT arguments (common-auth's line once
    /// `nullok` is removed, and the sshd line) asked twice even for a right code — libpam gives
    /// such lines no argv, so nothing told them apart — and pamtester, with one answer, failed
    /// with a conversation error. Also the profile's `nullok` line before a bare line. Each run
    /// in a private mount namespace with the test's store over the default /var/lib/pam-totp
    /// (and no site file), since a line without arguments uses the defaults.
    func testTwoLinesWithoutArgumentsAskOnce() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d and a mount namespace (run as root)")
        let defaultStore = "/var/lib/pam-totp"
        var st = stat()
        if lstat(defaultStore, &st) != 0 { XCTAssertEqual(mkdir(defaultStore, 0o700), 0, "mkdir \(defaultStore)") }
        let service = "ov\(getpid())_bare"
        defer { unlink("/etc/pam.d/" + service) }
        let script = "mount --bind \"$1\" \(defaultStore) && { [ ! -e /etc/security/pam_totp.conf ] || mount --bind /dev/null /etc/security/pam_totp.conf; } && exec pamtester \"$2\" nobody authenticate"
        for (n, lines) in [["auth required \(moduleURL.path)", "auth required \(moduleURL.path)"],
                           ["auth required \(moduleURL.path) nullok", "auth required \(moduleURL.path)"]].enumerated() {
            try (lines.joined(separator: "\n") + "\n").write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
            awayFromStepBoundary()
            let code = String(decoding: try currentCode(secret, offsetSteps: Int64(n)), as: UTF8.self)
            let r = try runCommand(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", pam.store.path, service],
                                   input: code + "\n")
            XCTAssertEqual(r.status, 0, "stack \(lines): " + r.stdout + r.stderr)
            XCTAssertEqual((r.stdout + r.stderr).components(separatedBy: "Verification code:").count - 1, 1, "one prompt: \(r.stdout + r.stderr)")
            XCTAssertEqual(try pam.state("nobody").failures, 0)
        }
    }
}
