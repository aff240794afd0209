import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// One code per PAM transaction (a new admin's trial): with the pam-auth-update profile enabled
/// and the README's per-service line added, su asked for a code twice, and the same code typed
/// twice failed as a replay. A later pam_totp line of the same pam_authenticate reuses an
/// accepted code's verdict for the same user, store and service; nothing else is reused: not a
/// failure, not PAM_IGNORE, not another user's or store's verdict, not across pam_authenticate
/// calls on one handle (pam_setcred or not), not across handles.
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

    func testAWrongCodeIsNotReused() throws {
        try pam.service("twice", ["auth required MODULE STORE", "auth required MODULE STORE"])
        let c = conversation(Array("000000".utf8))
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(codePrompts(c), 2, "the second line asks again after a failure: \(c.prompts)")
        // optional first line that failed, required second: the second still needs its own code.
        try pam.service("optional", ["auth optional MODULE STORE", "auth required MODULE STORE"])
        var asked = 0
        let d = Conversation(answer: nil)
        awayFromStepBoundary()
        let good = try currentCode(secret)
        d.respond = { prompts in asked += 1; return asked == 1 ? Array("000000".utf8) : good }
        XCTAssertEqual(pam.authenticate(service: "optional", user: "nobody", conversation: d), PAM_SUCCESS)
        XCTAssertEqual(asked, 2)
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
    /// pam_setcred (a screen locker that skips it): within the 30 s a verdict is kept, the
    /// second call reused the first one's code unasked, whoever was at the keyboard. Every line
    /// notes itself in the handle; a line that finds itself noted knows a new pass began.
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
    }

    /// A new handle (a new login) asks again, even within the 30 s.
    func testANewHandleAsksAgain() throws {
        try pam.service("twice", ["auth required MODULE STORE", "auth required MODULE STORE"])
        awayFromStepBoundary()
        let code = try currentCode(secret)
        let c = conversation(code)
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: c), PAM_SUCCESS)
        let d = conversation(code)
        XCTAssertEqual(pam.authenticate(service: "twice", user: "nobody", conversation: d), PAM_AUTH_ERR, "asked, a replay")
        XCTAssertEqual(codePrompts(c), 1)
        XCTAssertEqual(codePrompts(d), 2, "both lines of the new handle asked: \(d.prompts)")
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
    /// through a two-line stack: one syslog line says the second line reused the verdict, and
    /// no line holds the code.
    func testTheReuseIsLoggedWithoutTheCode() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d and the test binds the syslog socket (run as root)")
        let service = "ov\(getpid())_twice"
        try "auth required \(moduleURL.path) store=\(pam.store.path)\nauth required \(moduleURL.path) store=\(pam.store.path)\n"
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
        XCTAssertEqual(lines.filter { $0.contains("user nobody: a code was accepted earlier in this PAM transaction; not asked again") }.count, 1, all)
        XCTAssertFalse(all.contains(code), "the code in syslog: \(all)")
    }
}
