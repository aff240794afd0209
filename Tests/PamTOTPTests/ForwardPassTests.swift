import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// forward_pass through the real libpam, in process (as root): one question, the code is the
/// answer's trailing digits, the rest becomes PAM_AUTHTOK for the next module. libpam hides
/// PAM_AUTHTOK from applications, so the next module is pam_exec with expose_authtok, which
/// hands the token to a script that saves it.
final class ForwardPassTests: XCTestCase {
    var fixture: PAMFixture!
    let secret = Array("12345678901234567890".utf8)
    var tokenFile: String { fixture.root.appendingPathComponent("token").path }
    var capture: String { "auth optional pam_exec.so expose_authtok quiet " + fixture.root.appendingPathComponent("capture").path + " " + tokenFile }

    override func setUpWithError() throws {
        fixture = try PAMFixture()
        let script = fixture.root.appendingPathComponent("capture").path
        try "#!/bin/sh\ntr -d '\\000' > \"$1\"\n".write(toFile: script, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(script, 0o755), 0)
        try fixture.service("fp", ["auth requisite MODULE STORE forward_pass", capture])
        try fixture.service("fp-any", ["auth optional MODULE STORE forward_pass", capture])
        try fixture.service("fp-nullok", ["auth required MODULE STORE forward_pass nullok", capture, "auth required pam_permit.so"])
    }
    override func tearDown() { fixture.cleanup() }

    /// One login; the token the next module got (nil: it did not run or got none).
    func login(_ service: String, _ user: String, _ conversation: Conversation) -> (result: Int32, token: String?) {
        unlink(tokenFile)
        let result = fixture.authenticate(service: service, user: user, conversation: conversation)
        return (result, try? String(contentsOfFile: tokenFile, encoding: .utf8))
    }

    func testPasswordAndCodeInOneAnswer() throws {
        try fixture.enroll("alice", secret: secret)
        awayFromStepBoundary()
        let conversation = Conversation(answer: Array("hunter2 99".utf8) + (try currentCode(secret)))
        let (result, token) = login("fp", "alice", conversation)
        XCTAssertEqual(result, PAM_SUCCESS)
        XCTAssertEqual(token, "hunter2 99", "everything before the code is the password for the next module")
        XCTAssertEqual(conversation.prompts, ["Password and verification code: "])
        // The same answer again: the code is used up.
        let again = login("fp-any", "alice", conversation)
        XCTAssertEqual(again.token, "hunter2 99", "a denied answer still hands on its password part")
        XCTAssertEqual(login("fp", "alice", conversation).result, PAM_AUTH_ERR)
        XCTAssertEqual(try fixture.state("alice").failures, 2)
    }

    func testEightDigitFactorTakesEightDigits() throws {
        let eight = try OTPParameters(algorithm: .sha512, digits: 8, period: 30)
        try fixture.enroll("alice", secret: secret, parameters: eight)
        awayFromStepBoundary()
        let code = try currentCode(secret, eight)
        let (result, token) = login("fp", "alice", Conversation(answer: Array("pw123".utf8) + code))
        XCTAssertEqual(result, PAM_SUCCESS)
        XCTAssertEqual(token, "pw123")
    }

    /// An unenrolled user under nullok: asked the same question, the whole answer is the
    /// password, and the module is ignored. Without nullok the same user is denied.
    func testUnenrolledUnderNullokForwardsTheWholeAnswer() throws {
        try fixture.enroll("alice", secret: secret)
        let conversation = Conversation(answer: Array("only-a-password-123456".utf8))
        let (result, token) = login("fp-nullok", "bob", conversation)
        XCTAssertEqual(result, PAM_SUCCESS, "ignored, then pam_permit")
        XCTAssertEqual(token, "only-a-password-123456")
        let enrolled = Conversation(answer: Array("x".utf8))
        _ = login("fp-nullok", "alice", enrolled)
        XCTAssertEqual(conversation.prompts, enrolled.prompts, "the same question for enrolled and unenrolled users")
        XCTAssertEqual(fixture.authenticate(service: "fp", user: "bob", conversation: Conversation(answer: Array("pw123456".utf8))),
                       PAM_AUTH_ERR)
    }

    /// A recovery code cannot be told from a password's digits: forward_pass does not take one.
    func testNoRecoveryCodeThroughForwardPass() throws {
        var rng = SplitMix64(seed: 3)
        let (codes, set) = RecoverySet.generate(count: 10, iterations: 1_000, using: &rng)
        try fixture.enroll("alice", secret: secret, recovery: set)
        let code = String(decoding: codes[0], as: UTF8.self)
        XCTAssertEqual(fixture.authenticate(service: "fp", user: "alice", conversation: Conversation(answer: Array(code.utf8))), PAM_AUTH_ERR)
        try fixture.service("plain", ["auth required MODULE STORE"])
        XCTAssertEqual(fixture.authenticate(service: "plain", user: "alice", conversation: Conversation(answer: Array(code.utf8))), PAM_SUCCESS,
                       "the same code works with a two-prompt stack")
    }

    func testPromptOptionApplies() throws {
        try fixture.service("fp-prompt", ["auth required MODULE STORE forward_pass nullok prompt=Passcode:", "auth required pam_permit.so"])
        let conversation = Conversation(answer: Array("pw".utf8))
        XCTAssertEqual(fixture.authenticate(service: "fp-prompt", user: "bob", conversation: conversation), PAM_SUCCESS)
        XCTAssertEqual(conversation.prompts, ["Passcode:"])
    }
}
