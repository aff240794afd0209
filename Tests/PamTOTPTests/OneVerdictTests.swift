import CPAM
import Foundation
import MFACore
import TestSupport
import XCTest

/// One code per PAM transaction (a new admin's trial): with the pam-auth-update profile enabled
/// and the README's per-service line added, su asked for a code twice, and the same code typed
/// twice failed as a replay. A later pam_totp line of the same transaction reuses an accepted
/// code's verdict for the same user and store; nothing else is reused.
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
}
