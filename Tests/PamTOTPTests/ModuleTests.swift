import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The Embedded pam_totp.so driven through the real libpam with pam_start_confdir.
final class ModuleTests: XCTestCase {
    var fixture: PAMFixture!
    let secret = Array("12345678901234567890".utf8)

    override func setUpWithError() throws {
        fixture = try PAMFixture()
        // max_failures=50: these tests fail on purpose many times and are not about lockout.
        try fixture.service("totp", ["auth required MODULE STORE max_failures=50"])
        try fixture.enroll("alice", secret: secret)
    }

    override func tearDown() { fixture.cleanup() }

    func auth(_ user: String, _ answer: [UInt8]?, service: String = "totp") -> (Int32, Conversation) {
        let c = Conversation(answer: answer)
        return (fixture.authenticate(service: service, user: user, conversation: c), c)
    }

    func testCorrectCodeSucceedsAndPromptIsVerificationCode() throws {
        let (rc, conversation) = auth("alice", try currentCode(secret))
        XCTAssertEqual(rc, PAM_SUCCESS)
        XCTAssertEqual(conversation.prompts, ["Verification code: "])
    }

    func testBadAnswersAreAuthErr() throws {
        awayFromStepBoundary()
        let good = try currentCode(secret)
        var wrong = good
        wrong[5] = wrong[5] == 0x39 ? 0x30 : wrong[5] + 1
        let answers: [(String, [UInt8])] = [
            ("wrong", wrong), ("empty", []), ("non-digit", Array("12a456".utf8)), ("letters", Array("abcdef".utf8)),
            ("10 KB", [UInt8](repeating: 0x31, count: 10_240)), ("NUL inside", [0x31, 0x32, 0] + Array(good.suffix(4))),
            ("NUL first", [0] + good), ("code plus digit", good + [0x31]), ("space", [0x20] + good),
            ("high bytes", [0xFF, 0xFE, 0x80, 0x31, 0x32, 0x33]),
        ]
        for (name, answer) in answers {
            XCTAssertEqual(auth("alice", answer).0, PAM_AUTH_ERR, name)
        }
        XCTAssertEqual(auth("alice", good).0, PAM_SUCCESS, "the good code still works afterwards")
    }

    func testUnenrolledIsDeniedWithTheSamePrompt() throws {
        let before = try FileManager.default.contentsOfDirectory(atPath: fixture.store.path).sorted()
        let (rc, conversation) = auth("bob", try currentCode(secret))
        XCTAssertEqual(rc, PAM_AUTH_ERR)
        XCTAssertEqual(conversation.prompts, ["Verification code: "], "no account enumeration: same prompt")
        for name in (0..<20).map({ "guess\($0)" }) { XCTAssertEqual(auth(name, Array("123456".utf8)).0, PAM_AUTH_ERR) }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fixture.store.path).sorted(), before,
                       "guessing user names creates no files in the store")
    }

    func testNullokGivesIgnoreForUnenrolledOnly() throws {
        // ignore=ignore lets pam_permit decide when we return PAM_IGNORE; anything else from us
        // (default=die) ends the stack with our code.
        try fixture.service("nullok", ["auth [success=ok ignore=ignore default=die] MODULE STORE nullok",
                                       "auth required pam_permit.so"])
        let (rc, conversation) = auth("bob", nil, service: "nullok")
        XCTAssertEqual(rc, PAM_SUCCESS, "PAM_IGNORE from pam_totp, success from pam_permit")
        XCTAssertEqual(conversation.prompts, [], "an unenrolled user under nullok is not asked")
        // Without the permit line the stack has no success at all: denied.
        try fixture.service("nullok-alone", ["auth required MODULE STORE nullok"])
        XCTAssertNotEqual(auth("bob", nil, service: "nullok-alone").0, PAM_SUCCESS)
        // nullok does not help an enrolled user with a wrong code.
        XCTAssertEqual(auth("alice", Array("000000".utf8), service: "nullok").0 == PAM_SUCCESS,
                       try currentCode(secret) == Array("000000".utf8))
    }

    func testArgumentsAreValidated() throws {
        for bad in ["bogus", "adjacent_intervals=11", "adjacent_intervals=x", "store=relative", "nullok=maybe",
                    "max_failures=0", "max_failures=101", "lockout=86401", "config=relative", "config=/nonexistent/pam_totp.conf"] {
            try fixture.service("bad", ["auth required MODULE STORE " + bad])
            let (rc, conversation) = auth("alice", try currentCode(secret), service: "bad")
            XCTAssertEqual(rc, PAM_SERVICE_ERR, bad)
            XCTAssertEqual(conversation.prompts, [], "a misconfigured module asks nothing: \(bad)")
        }
    }

    func testAdjacentIntervalsZeroAndTen() throws {
        try fixture.service("n0", ["auth required MODULE STORE adjacent_intervals=0"])
        try fixture.service("n10", ["auth required MODULE STORE adjacent_intervals=10"])
        for u in ["n0user", "n10a", "n10b"] { try fixture.enroll(u, secret: secret) }
        awayFromStepBoundary()
        XCTAssertEqual(auth("n0user", try currentCode(secret), service: "n0").0, PAM_SUCCESS)
        let previous = try currentCode(secret, offsetSteps: -1)
        if previous != (try currentCode(secret)) {
            XCTAssertEqual(auth("n0user", previous, service: "n0").0, PAM_AUTH_ERR)
        }
        XCTAssertEqual(auth("n10a", try currentCode(secret, offsetSteps: -10), service: "n10").0, PAM_SUCCESS)
        XCTAssertEqual(auth("n10b", try currentCode(secret, offsetSteps: 10), service: "n10").0, PAM_SUCCESS)
    }

    func testEveryFactorIsAccepted() throws {
        let other = [UInt8](repeating: 0x42, count: 32)
        let p = try OTPParameters(algorithm: .sha256, digits: 8, period: 60)
        let long = (0..<64).map { UInt8($0 * 7 & 0xFF) }
        let p512 = try OTPParameters(algorithm: .sha512, digits: 7, period: 45)
        let s = try Store(path: Array(fixture.store.path.utf8))
        try s.write(user: Array("carol".utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
            try Factor(label: Array("token".utf8), parameters: p, created: 2, secret: other),
            try Factor(label: Array("long".utf8), parameters: p512, created: 3, secret: long),
        ]))
        // The release-built (Embedded, -Osize) SHA-1, SHA-256 and SHA-512 paths, each through libpam.
        XCTAssertEqual(auth("carol", try currentCode(secret)).0, PAM_SUCCESS)
        XCTAssertEqual(auth("carol", try currentCode(other, p)).0, PAM_SUCCESS)
        XCTAssertEqual(auth("carol", try currentCode(long, p512)).0, PAM_SUCCESS)
    }

    func testStoreProblemsDeny() throws {
        let record = fixture.store.appendingPathComponent("alice")
        try Data("pam_totp 1\nfactor x sha1 6 30 1 !!!!\n".utf8).write(to: record)
        XCTAssertEqual(chmod(record.path, 0o600), 0)
        XCTAssertEqual(auth("alice", try currentCode(secret)).0, PAM_AUTHINFO_UNAVAIL, "corrupt record")
        try fixture.enroll("alice", secret: secret)
        XCTAssertEqual(chmod(record.path, 0o644), 0)
        XCTAssertEqual(auth("alice", try currentCode(secret)).0, PAM_AUTHINFO_UNAVAIL, "record readable by others")
        XCTAssertEqual(chmod(record.path, 0o600), 0)
        XCTAssertEqual(chmod(fixture.store.path, 0o755), 0)
        XCTAssertEqual(auth("alice", try currentCode(secret)).0, PAM_AUTHINFO_UNAVAIL, "store readable by others")
        XCTAssertEqual(chmod(fixture.store.path, 0o700), 0)
        try fixture.service("missing", ["auth required MODULE store=/nonexistent/pam-totp"])
        XCTAssertEqual(auth("alice", try currentCode(secret), service: "missing").0, PAM_AUTHINFO_UNAVAIL)
        XCTAssertEqual(auth("alice", try currentCode(secret)).0, PAM_SUCCESS, "and fine again once fixed")
    }

    func testConversationFailureIsConvErr() throws {
        let c = Conversation(answer: nil)
        c.fail = true
        XCTAssertEqual(fixture.authenticate(service: "totp", user: "alice", conversation: c), PAM_CONV_ERR)
        // No answer at all for the prompt (resp NULL) is not a success either.
        XCTAssertNotEqual(auth("alice", nil).0, PAM_SUCCESS)
    }

    func testUserNamesThatCannotBeRecords() throws {
        for user in ["../alice", ".lock.alice", "a/b", String(repeating: "x", count: 300)] {
            XCTAssertEqual(auth(user, try currentCode(secret)).0, PAM_AUTH_ERR, user)
        }
    }

    /// 200 pam_start/pam_authenticate/pam_end cycles in one process: the module is loaded and
    /// unloaded each time and must neither crash nor leak state between cycles. 100 enrolled
    /// users succeed once each (their state files are written), 100 wrong answers fail.
    func testTwoHundredCyclesInOneProcess() throws {
        for i in 0..<100 { try fixture.enroll("user\(i)", secret: secret) }
        awayFromStepBoundary(margin: 10)
        let good = try currentCode(secret)
        var successes = 0, failures = 0
        for i in 0..<200 {
            let rc = i % 2 == 0 ? auth("user\(i / 2)", good).0 : auth(i % 4 == 1 ? "bob" : "alice", Array("12x456".utf8)).0
            if rc == PAM_SUCCESS { successes += 1 } else if rc == PAM_AUTH_ERR { failures += 1 }
        }
        XCTAssertEqual(successes, 100)
        XCTAssertEqual(failures, 100)
        XCTAssertEqual(try fixture.state("alice").failures, 50, "alice: 50 counted failures")
    }
}
