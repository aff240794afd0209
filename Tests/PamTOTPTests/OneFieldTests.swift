import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// One-field stacks (issue 39: VPN gateways and RADIUS send the password followed by the code in
/// one field). With `forward_pass` alone the code was checked before the password: 10 tries with
/// any password plus `000000` locked the user out, and a wrong password with the right code spent
/// the code. With `code_after_password` the first line only splits the answer; the
/// `after_password` line checks the code after pam_unix passed. Through the real libpam and
/// pam_unix, with a throwaway account's real password.
final class OneFieldTests: XCTestCase {
    var pam: PAMFixture!
    var account: ThrowawayAccount!
    let secret = randomTOTPSecret()

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: a throwaway account for pam_unix, the store")
        pam = try PAMFixture()
        account = try ThrowawayAccount(prefix: "tonef")
    }

    override func tearDown() {
        account?.delete()
        pam?.cleanup()
        (account, pam) = (nil, nil)
    }

    var user: String { account.name }

    /// The shipped one-field stack (pam.d/radiusd, pam.d/openvpn), in a test's pam.d.
    func oneField(_ extra: String = "", after: Bool = true) throws {
        var lines = [
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass code_after_password STORE max_failures=10 lockout=300 \(extra)",
            "auth requisite pam_unix.so use_first_pass",
        ]
        if after { lines.append("auth required MODULE forward_pass after_password STORE max_failures=10 lockout=300 \(extra)") }
        try pam.service("vpn", lines)
    }

    /// The old order: the code checked before the password (forward_pass alone).
    func codeFirst() throws {
        try pam.service("vpn", [
            "auth required MODULE forward_pass STORE max_failures=10 lockout=300",
            "auth required pam_unix.so use_first_pass",
        ])
    }

    func login(_ answer: String) -> Int32 {
        pam.authenticate(service: "vpn", user: user, conversation: Conversation(answer: Array(answer.utf8)))
    }

    func code(offset: Int64 = 0, _ parameters: OTPParameters = .default) throws -> String {
        String(decoding: try currentCode(secret, parameters, offsetSteps: offset), as: UTF8.self)
    }

    /// The lockout replay: before (the code first) 10 strangers' tries lock the user out and the
    /// right password with a fresh code is refused; after, nothing is counted and it logs in.
    func testAStrangerLocksNobodyOutAndSpendsNoCode() throws {
        try pam.enroll(user, secret: secret)
        awayFromStepBoundary(margin: 4)

        // Before: forward_pass alone (still what a stack without code_after_password does).
        try codeFirst()
        for _ in 0..<10 { XCTAssertEqual(login("guess-\(UInt32.random(in: 0...9999))x" + "000000"), PAM_AUTH_ERR) }
        XCTAssertEqual(try pam.state(user).failures, 10, "the code first: a stranger's tries count")
        XCTAssertNotNil(try pam.state(user).lockedUntil, "the code first: a stranger locks the user out")
        XCTAssertNotEqual(login(account.password + (try code())), PAM_SUCCESS, "locked out: the right password and code are refused")

        // After: the lockout cleared (totp-enroll unlock), code_after_password.
        _ = try Store(path: Array(pam.store.path.utf8)).unlock(user: Array(user.utf8), at: Int64(time(nil)))
        XCTAssertEqual(try pam.state(user).failures, 0)
        try oneField()
        for _ in 0..<10 { XCTAssertEqual(login("guess-\(UInt32.random(in: 0...9999))x" + "000000"), PAM_AUTH_ERR) }
        var state = try pam.state(user)
        XCTAssertEqual(state.failures, 0, "a stranger's tries counted")
        XCTAssertLessThanOrEqual(state.lockedUntil ?? 0, Int64(time(nil)), "a stranger locked the user out")
        // A wrong password with the right code: denied, and the code is not spent.
        let right = try code()
        XCTAssertEqual(login("not-" + account.password + right), PAM_AUTH_ERR)
        state = try pam.state(user)
        XCTAssertTrue(state.lastSteps.isEmpty, "a wrong password spent the code")
        XCTAssertEqual(login(account.password + right), PAM_SUCCESS, "the right password and that same code")
        XCTAssertEqual(try pam.state(user).lastSteps.count, 1)
    }

    /// The user's own wrong codes still count (after the right password), and lock them out at max_failures.
    func testTheUsersOwnWrongCodesCountAndAReplayIsRefused() throws {
        try pam.enroll(user, secret: secret)
        try oneField()
        awayFromStepBoundary(margin: 4)
        XCTAssertEqual(login(account.password + (try codeOutsideWindow(secret))), PAM_AUTH_ERR)
        XCTAssertEqual(try pam.state(user).failures, 1, "the right password with a wrong code is a failure")
        let right = try code()
        XCTAssertEqual(login(account.password + right), PAM_SUCCESS)
        XCTAssertEqual(try pam.state(user).failures, 0)
        XCTAssertEqual(login(account.password + right), PAM_AUTH_ERR, "a replayed code")
        XCTAssertEqual(try pam.state(user).failures, 1, "a replay after the right password counts")
        // The password alone (its last 6 characters taken for the code): pam_unix refuses it, nothing counted.
        XCTAssertEqual(login(account.password), PAM_AUTH_ERR)
        XCTAssertEqual(try pam.state(user).failures, 1, "the password alone was counted")
    }

    /// The code's length is the user's factor's: an 8-digit token or app.
    func testAnEightDigitFactor() throws {
        let p = try OTPParameters(algorithm: .sha1, digits: 8, period: 30)
        try pam.enroll(user, secret: secret, parameters: p)
        try oneField()
        awayFromStepBoundary(margin: 4)
        XCTAssertEqual(login(account.password + (try code(p))), PAM_SUCCESS)
        XCTAssertEqual(login(account.password + (try code(p)).suffix(6)), PAM_AUTH_ERR, "a 6-digit tail of an 8-digit code")
    }

    /// Un-enrolled users: under nullok the password alone; without nullok denied after the
    /// password (and a wrong password is denied by pam_unix first, counting nothing).
    func testUnenrolledUsers() throws {
        try oneField("nullok")
        XCTAssertEqual(login(account.password), PAM_SUCCESS, "nullok: the password alone")
        XCTAssertEqual(login("not-" + account.password), PAM_AUTH_ERR)
        try oneField()
        XCTAssertEqual(login(account.password + "123456"), PAM_AUTH_ERR, "no factor, no nullok: denied")
        XCTAssertEqual(login(account.password), PAM_AUTH_ERR)
    }

    /// A pam_totp line between the two cannot tell whether the password was checked: it denies
    /// (review: it returned PAM_IGNORE, so a strict line after a jump over the after_password line
    /// asked nothing). A line after the after_password line is bound by its verdict.
    func testLinesAroundTheSplit() throws {
        try pam.enroll(user, secret: secret)
        try pam.service("between", [
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass code_after_password STORE",
            "auth required MODULE STORE nullok",
            "auth requisite pam_unix.so use_first_pass",
            "auth required MODULE forward_pass after_password STORE",
        ])
        awayFromStepBoundary(margin: 4)
        let between = Conversation(answer: Array((account.password + (try code())).utf8))
        XCTAssertEqual(pam.authenticate(service: "between", user: user, conversation: between), PAM_AUTH_ERR)
        XCTAssertEqual(between.prompts.count, 1)
        // The review's stack: pam_unix jumps over the after_password line to a strict "safety net".
        try pam.service("net", [
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass code_after_password STORE",
            "auth [success=1 default=die] pam_unix.so use_first_pass",
            "auth required MODULE forward_pass after_password STORE",
            "auth required pam_permit.so",
            "auth required MODULE STORE",
        ])
        let net = Conversation(answer: Array((account.password + (try codeOutsideWindow(secret))).utf8))
        XCTAssertEqual(pam.authenticate(service: "net", user: user, conversation: net), PAM_AUTH_ERR, "the password alone passed")
        // After the after_password line: bound by its verdict, asked nothing.
        try pam.service("after", [
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass code_after_password STORE",
            "auth requisite pam_unix.so use_first_pass",
            "auth required MODULE forward_pass after_password STORE",
            "auth required MODULE STORE",
        ])
        // (The "between" stack's after_password line spent this step's code: the next step's.)
        let ok = Conversation(answer: Array((account.password + (try code(offset: 1))).utf8))
        XCTAssertEqual(pam.authenticate(service: "after", user: user, conversation: ok), PAM_SUCCESS)
        XCTAssertEqual(ok.prompts.count, 1, "asked more than once: \(ok.prompts)")
        let wrong = Conversation(answer: Array((account.password + (try codeOutsideWindow(secret))).utf8))
        XCTAssertEqual(pam.authenticate(service: "after", user: user, conversation: wrong), PAM_AUTH_ERR)
        XCTAssertEqual(wrong.prompts.count, 1)
        XCTAssertEqual(try pam.state(user).failures, 1, "one wrong code, counted once")
    }

    /// Review: an empty answer left no code to check, and the after_password line let the stack
    /// through on the password module alone (an account without a password under pam_unix's
    /// nullok; a password module that reads no password). An answer over 1,024 bytes is empty too.
    func testAnEmptyAnswerIsCheckedLikeAnyOther() throws {
        try pam.enroll(user, secret: secret)
        try pam.service("permit", [
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass code_after_password STORE",
            "auth requisite pam_permit.so",
            "auth required MODULE forward_pass after_password STORE",
        ])
        for answer in ["", String(repeating: "x", count: 1_100)] {
            let c = Conversation(answer: Array(answer.utf8))
            XCTAssertEqual(pam.authenticate(service: "permit", user: user, conversation: c), PAM_AUTH_ERR,
                           "an answer of \(answer.count) bytes passed without a code")
        }
        XCTAssertEqual(try pam.state(user).failures, 2, "after the password module, each is a wrong code")
        // pam_unix with nullok, an account without a password.
        XCTAssertEqual(try runCommand(["passwd", "-d", user]).status, 0)
        try pam.service("nullok", [
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass code_after_password STORE",
            "auth requisite pam_unix.so use_first_pass nullok",
            "auth required MODULE forward_pass after_password STORE",
        ])
        XCTAssertEqual(pam.authenticate(service: "nullok", user: user, conversation: Conversation(answer: [])), PAM_AUTH_ERR)
        awayFromStepBoundary(margin: 4)
        XCTAssertEqual(pam.authenticate(service: "nullok", user: user, conversation: Conversation(answer: Array(try code().utf8))), PAM_SUCCESS,
                       "no password and the code")
    }
}
