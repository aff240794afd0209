@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
import Foundation
import TestSupport
import XCTest

/// Counter-based factors (RFC 4226): the look-ahead window, the counter moving past a match
/// with the verdict, the record line, and the codes against oathtool.
final class HOTPTests: XCTestCase {
    /// RFC 4226 Appendix D's secret and its codes for counters 0...9.
    let rfcSecret = Array("12345678901234567890".utf8)
    let rfcCodes = ["755224", "287082", "359152", "969429", "338314", "254676", "287922", "162583", "399871", "520489"]

    func code(_ secret: [UInt8], _ counter: UInt64, digits: Int = 6, algorithm: HashAlgorithm = .sha1) -> [UInt8] {
        HOTP.code(key: HMACKey(algorithm: algorithm, key: secret), counter: counter, digits: digits)
    }

    func testAppendixDCodesMatchTheirCountersThroughTheWindow() throws {
        let window = try HOTPWindow(size: 10)
        let key = HMACKey(algorithm: .sha1, key: rfcSecret)
        for (counter, expected) in rfcCodes.enumerated() {
            let m = window.match(answer: Array(expected.utf8), key: key, digits: 6, next: 0, lastUsed: nil)
            XCTAssertEqual(m.step, UInt64(counter), "Appendix D, counter \(counter)")
            XCTAssertFalse(m.replayed)
            // Past the window's end, or below its start, the same code is no match.
            XCTAssertNil(window.match(answer: Array(expected.utf8), key: key, digits: 6, next: UInt64(counter) + 1, lastUsed: nil).step)
        }
    }

    func testTheWindowHasItsSizeAndTheLastUsedCounterIsAReplay() throws {
        let key = HMACKey(algorithm: .sha1, key: rfcSecret)
        let three = try HOTPWindow(size: 3)
        // next = 5: counters 5, 6, 7 match; 8 is past the window; 4 was the last used.
        for c: UInt64 in 5...7 {
            XCTAssertEqual(three.match(answer: code(rfcSecret, c), key: key, digits: 6, next: 5, lastUsed: 4).step, c)
        }
        XCTAssertNil(three.match(answer: code(rfcSecret, 8), key: key, digits: 6, next: 5, lastUsed: 4).step)
        let replay = three.match(answer: code(rfcSecret, 4), key: key, digits: 6, next: 5, lastUsed: 4)
        XCTAssertNil(replay.step)
        XCTAssertTrue(replay.replayed)
        // Not digits, the wrong length: never a match.
        for bad in ["", "75522", "7552240", "abcdef", "755 24"] {
            XCTAssertNil(try HOTPWindow(size: 10).match(answer: Array(bad.utf8), key: key, digits: 6, next: 0, lastUsed: nil).step, bad)
        }
        XCTAssertThrowsError(try HOTPWindow(size: 0))
        XCTAssertThrowsError(try HOTPWindow(size: 101))
        // The counter's end is never passed (no trap, no wrap to 0).
        let top = three.match(answer: code(rfcSecret, UInt64.max), key: key, digits: 6, next: UInt64.max - 1, lastUsed: nil)
        XCTAssertEqual(top.step, UInt64.max)
    }

    /// oathtool as the independent implementation, at random counters, every algorithm and
    /// 6/7/8 digits. oathtool's HOTP mode is SHA-1 only; its TOTP mode with a 1 s step and the
    /// clock at N (`-N @N`) is HOTP at counter N for SHA-256 and SHA-512 too (RFC 6238, T0 = 0).
    func testOathtoolAgreesAtRandomCountersForEveryAlgorithmAndDigitCount() throws {
        var rng = SystemRandomNumberGenerator()
        for algorithm in [HashAlgorithm.sha1, .sha256, .sha512] {
            for digits in 6...8 {
                let secret = (0..<20).map { _ in UInt8.random(in: 0...255, using: &rng) }
                let hex = secret.map { String(format: "%02x", $0) }.joined()
                let counter = UInt64.random(in: 0...4_000_000_000, using: &rng)
                let ours = String(decoding: code(secret, counter, digits: digits, algorithm: algorithm), as: UTF8.self)
                let theirs: CommandResult
                if algorithm == .sha1 {
                    theirs = try runCommand(["oathtool", "--hotp", "-c", String(counter), "-d", String(digits), hex])
                } else {
                    theirs = try runCommand(["oathtool", "--totp=\(algorithm == .sha256 ? "sha256" : "sha512")", "-s", "1s",
                                             "-N", "@\(counter)", "-d", String(digits), hex])
                }
                XCTAssertEqual(theirs.status, 0, theirs.stderr)
                XCTAssertEqual(ours, theirs.stdout.trimmingCharacters(in: .whitespacesAndNewlines),
                               "\(algorithm.name) \(digits) digits, counter \(counter)")
                // And the verifier accepts that code at that counter.
                let window = try HOTPWindow()
                XCTAssertEqual(window.match(answer: Array(ours.utf8), key: HMACKey(algorithm: algorithm, key: secret), digits: digits,
                                            next: counter, lastUsed: nil).step, counter)
            }
        }
    }

    func hotpFactor(counter: UInt64, digits: Int = 6) throws -> Factor {
        try Factor(kind: .hotp, label: Array("fob".utf8),
                   parameters: try OTPParameters(algorithm: .sha1, digits: digits, period: 30), created: 1, counter: counter, secret: rfcSecret)
    }

    /// The policy: a match moves the counter past it (the state's last step), the same code
    /// again is a replay, the record's counter is where the window starts, and a code past the
    /// window is a wrong code.
    func testTheCounterMovesPastEachAcceptedCode() throws {
        let record = UserRecord(uid: 0, id: 1, factors: [try hotpFactor(counter: 2)])
        var options = ModuleOptions()
        options.hotpWindow = 3
        let verifier = try TOTPVerifier()
        var state = UserState()
        func decide(_ counter: UInt64) throws -> Decision {
            try Authenticator.decide(record: record, state: state, answer: code(rfcSecret, counter), at: 1_000_000, verifier: verifier, options: options)
        }
        // Counter 1 is below the record's counter (the enrolment used it): not accepted.
        guard case .wrongCode = try decide(1).outcome else { return XCTFail("counter below the record's accepted") }
        let first = try decide(3)
        guard case .success(let label, let step, 6, nil) = first.outcome else { return XCTFail("\(first.outcome)") }
        XCTAssertEqual(label, Array("fob".utf8))
        XCTAssertEqual(step, 3)
        state = try XCTUnwrap(first.state)
        XCTAssertEqual(state.lastStep(of: record.factors[0]), 3)
        guard case .wrongCode(true, 1, nil) = try decide(3).outcome else { return XCTFail("a used code must be a replay") }
        guard case .wrongCode(false, _, _) = try decide(2).outcome else { return XCTFail("a code below the counter must fail") }
        // The window is now 4, 5, 6: 7 is past it.
        guard case .resyncNeeded = try decide(7).outcome else { return XCTFail("past the window: not accepted, a resync's first code") }
        let later = try decide(6)
        guard case .success(_, 6, _, _) = later.outcome else { return XCTFail("\(later.outcome)") }
        state = try XCTUnwrap(later.state)
        guard case .wrongCode = try decide(5).outcome else { return XCTFail("a skipped counter must not come back") }
    }

    /// A token enrolled under a label that an earlier factor had (a TOTP factor's entry holds a
    /// time step, an earlier token's its counter) starts at its own counter, not at theirs.
    func testATokenEnrolledAgainUnderAnOldLabelStartsAtItsOwnCounter() throws {
        var state = UserState()
        let phone = try Factor(label: Array("fob".utf8), parameters: .default, created: 1, secret: rfcSecret)
        state.setLastStep(59_000_000, of: phone)
        let oldToken = try hotpFactor(counter: 0)
        state.setLastStep(500, of: oldToken)
        var newToken = try hotpFactor(counter: 0)
        newToken.created = 2
        XCTAssertEqual(state.nextCounter(of: oldToken), 501)
        XCTAssertEqual(state.nextCounter(of: newToken), 0)
        let record = UserRecord(uid: 0, id: 1, factors: [newToken])
        let d = try Authenticator.decide(record: record, state: state, answer: code(rfcSecret, 1), at: 1_000_000,
                                         verifier: try TOTPVerifier(), options: ModuleOptions())
        guard case .success(_, 1, _, _) = d.outcome else { return XCTFail("\(d.outcome)") }
        XCTAssertEqual(try XCTUnwrap(d.state).lastSteps.count, 1, "the old entries are pruned with the verdict")
    }

    /// Review findings: a counter at its end is used up for good (it was accepted every time);
    /// no factor starts past 2^48.
    func testACounterAtItsEndNeverMatchesAgainAndFactorsStartBelowTwoToThe48() throws {
        let key = HMACKey(algorithm: .sha1, key: rfcSecret)
        let atEnd = try HOTPWindow(size: 10).match(answer: code(rfcSecret, UInt64.max), key: key, digits: 6, next: UInt64.max, lastUsed: UInt64.max)
        XCTAssertNil(atEnd.step)
        XCTAssertTrue(atEnd.replayed)
        var state = UserState()
        let token = try hotpFactor(counter: 0)
        state.setLastStep(UInt64.max, of: token)
        let d = try Authenticator.decide(record: UserRecord(uid: 0, id: 1, factors: [token]), state: state,
                                         answer: code(rfcSecret, UInt64.max), at: 1_000_000, verifier: try TOTPVerifier(), options: ModuleOptions())
        guard case .wrongCode(true, _, _) = d.outcome else { return XCTFail("\(d.outcome)") }
        XCTAssertNoThrow(try hotpFactor(counter: HOTPWindow.maxCounter))
        XCTAssertThrowsError(try hotpFactor(counter: HOTPWindow.maxCounter + 1))
        let far = Array("pam_totp 2\naccount 0 0000000000000001\nhotp fob sha1 6 281474976710657 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n".utf8)
        XCTAssertThrowsError(try UserRecord.parse(far))
    }

    /// Review finding: unlock rebuilding an unreadable state must not start a token's counter
    /// again at the record's (the codes used since would work again): the token is used up.
    func testUnlockRebuildingTheStateNeverRevivesUsedTokenCodes() throws {
        let root = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(root) }
        let dir = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(dir.path, 0o700), 0)
        let store = try Store(path: Array(dir.path.utf8))
        let user = Array("alice".utf8)
        var rng = SystemRandomNumberGenerator()
        try store.enroll(user: user, accountUID: 1000, factor: try hotpFactor(counter: 0), importedCodes: nil, using: &rng)
        func login(_ c: UInt64) -> AuthOutcome {
            store.login(user: user, account: { () throws(MFAError) -> Account? in Account(name: user, uid: 1000) },
                        answer: code(rfcSecret, c), at: 1_000_000, options: ModuleOptions(), process: 1)
        }
        for c: UInt64 in 0...2 { guard case .success = login(c) else { return XCTFail("counter \(c)") } }
        let state = dir.appendingPathComponent(".state.alice")
        XCTAssertTrue(FileManager.default.createFile(atPath: state.path, contents: Data(repeating: 0xAB, count: UserState.fileSize)))
        XCTAssertEqual(chmod(state.path, 0o600), 0)
        XCTAssertTrue(try store.unlock(user: user, at: 1_000_000).rebuilt)
        for c: UInt64 in [1, 2, 3] {
            guard case .wrongCode = login(c) else { return XCTFail("counter \(c) accepted after the rebuild") }
        }
    }

    func testTheRecordLineKeepsKindCounterAndParameters() throws {
        let totp = try Factor(label: Array("phone".utf8), parameters: .default, created: 7, enrolledStep: 9, secret: rfcSecret)
        let hotp = try Factor(kind: .hotp, label: Array("fob key".utf8),
                              parameters: try OTPParameters(algorithm: .sha256, digits: 8, period: 30), created: 8,
                              counter: HOTPWindow.maxCounter, secret: Array(rfcSecret.reversed()))
        let record = UserRecord(uid: 1000, id: 42, factors: [totp, hotp])
        let text = record.serialized()
        XCTAssertTrue(String(decoding: text, as: UTF8.self).contains("\nhotp fob%20key sha256 8 281474976710656 8 "),
                      String(decoding: text, as: UTF8.self))
        XCTAssertEqual(try UserRecord.parse(text), record)
        // A version-1 record has no hotp lines; a wrong field count is refused.
        let v1 = Array("pam_totp 1\nhotp fob sha1 6 0 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n".utf8)
        XCTAssertThrowsError(try UserRecord.parse(v1))
        let short = Array("pam_totp 2\naccount 0 0000000000000001\nhotp fob sha1 6 1 GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n".utf8)
        XCTAssertThrowsError(try UserRecord.parse(short))
    }

    func testTheKeyURIOfAnHOTPFactorCarriesItsCounter() throws {
        let uri = OTPAuthURI(issuer: Array("Example".utf8), account: Array("alice".utf8), secret: rfcSecret, parameters: .default, counter: 7)
        XCTAssertEqual(uri.string, "otpauth://hotp/Example:alice?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&issuer=Example&counter=7")
        XCTAssertEqual(try OTPAuthURI(parsing: uri.bytes), uri)
        XCTAssertThrowsError(try OTPAuthURI(parsing: Array("otpauth://hotp/a?secret=GEZDGNBVGY3TQOJQ".utf8)), "an HOTP URI needs its counter")
        XCTAssertNil(try OTPAuthURI(parsing: Array("otpauth://totp/a?secret=GEZDGNBVGY3TQOJQ&counter=3".utf8)).counter)
    }

    func testTheWindowOptionIsParsedBoundedAndTheStricterWins() throws {
        XCTAssertEqual(try ModuleOptions.parse([Array("hotp_window=25".utf8)]).hotpWindow, 25)
        XCTAssertEqual(ModuleOptions().hotpWindow, 10)
        for bad in ["hotp_window=0", "hotp_window=101", "hotp_window", "hotp_window=x"] {
            XCTAssertThrowsError(try ModuleOptions.parse([Array(bad.utf8)]), bad)
        }
        XCTAssertEqual(PolicySetting(name: Array("hotp_window".utf8)), .hotpWindow)
        XCTAssertEqual(try ModuleOptions.parse([Array("hotp_resync_window=0".utf8)]).hotpResyncWindow, 0)
        XCTAssertEqual(try ModuleOptions.parse([Array("hotp_resync_window=1000".utf8)]).hotpResyncWindow, 1000)
        XCTAssertEqual(ModuleOptions().hotpResyncWindow, 100)
        for bad in ["hotp_resync_window=1001", "hotp_resync_window", "hotp_resync_window=-1"] {
            XCTAssertThrowsError(try ModuleOptions.parse([Array(bad.utf8)]), bad)
        }
        XCTAssertEqual(PolicySetting(name: Array("hotp_resync_window".utf8)), .hotpResyncWindow)
    }

    // MARK: - Resync (RFC 4226, section 7.4)

    /// The pair search: the lowest c of [next + size, next + resync) whose code is the first
    /// answer, with c + 1's the second; c + 1 is returned. The edges of the reach, and a pair
    /// that is not consecutive, or in the wrong order, is none.
    func testResyncFindsTwoConsecutiveCodesInTheReachOnly() throws {
        let key = HMACKey(algorithm: .sha1, key: rfcSecret)
        let w = try HOTPWindow(size: 10, resync: 100)
        func pair(_ a: UInt64, _ b: UInt64, next: UInt64 = 50, in window: HOTPWindow? = nil) -> UInt64? {
            (window ?? w).resync(answer: code(rfcSecret, b), previous: code(rfcSecret, a), key: key, digits: 6, next: next).pair
        }
        func far(_ c: UInt64, next: UInt64 = 50, in window: HOTPWindow? = nil) -> Bool {
            (window ?? w).resync(answer: code(rfcSecret, c), previous: nil, key: key, digits: 6, next: next).far
        }
        XCTAssertEqual(pair(60, 61), 61, "the first counter past the window")
        XCTAssertEqual(pair(149, 150), 150, "the reach's last counter, and the one after it")
        XCTAssertEqual(pair(100, 101), 101)
        XCTAssertNil(pair(59, 60), "inside the window: a code there logs in alone")
        XCTAssertNil(pair(150, 151), "past the reach")
        XCTAssertNil(pair(100, 102), "not consecutive")
        XCTAssertNil(pair(101, 100), "the wrong order")
        XCTAssertNil(pair(100, 100))
        XCTAssertNil(w.resync(answer: code(rfcSecret, 61), previous: nil, key: key, digits: 6, next: 50).pair, "no previous answer, no pair")
        XCTAssertTrue(far(60))
        XCTAssertTrue(far(149))
        XCTAssertFalse(far(59))
        XCTAssertFalse(far(150))
        // Off (0, or not past the window), and at the counter's end: nothing, no trap.
        XCTAssertNil(pair(60, 61, in: try HOTPWindow(size: 10, resync: 0)))
        XCTAssertFalse(far(60, in: try HOTPWindow(size: 10, resync: 10)))
        XCTAssertNil(pair(0, 1, next: UInt64.max - 50))
        // The reach ends below 2^48 (the fleet's bound): a pair's second code is at most 2^48.
        let top = HOTPWindow.maxCounter
        XCTAssertEqual(pair(top - 1, top, next: top - 20), top)
        XCTAssertFalse(far(top, next: top - 20))
        XCTAssertNil(pair(top, top + 1, next: top - 20))
        XCTAssertFalse(far(0, next: UInt64.max))
        XCTAssertThrowsError(try HOTPWindow(size: 10, resync: 1001))
    }

    /// The policy: one far code is never accepted (it counts as a failure and asks for the next
    /// one); the next code of the same login completes the resync, both are used up; anything
    /// else is a wrong code, and a failure that starts a lockout asks for nothing.
    func testAFarCodeAloneIsRefusedAndTheFollowingCodeResyncs() throws {
        let record = UserRecord(uid: 0, id: 1, factors: [try hotpFactor(counter: 0)])
        var options = ModuleOptions()
        options.maxFailures = 100
        let verifier = try TOTPVerifier()
        var state = UserState()
        func decide(_ counter: UInt64, after previous: UInt64? = nil, options o: ModuleOptions? = nil) throws -> Decision {
            try Authenticator.decide(record: record, state: state, answer: code(rfcSecret, counter), at: 1_000_000,
                                     previous: previous.map { code(rfcSecret, $0) }, verifier: verifier, options: o ?? options)
        }
        // Counters 0...9 are the window; 50 is past it, within the reach of 100.
        let far = try decide(50)
        guard case .resyncNeeded(1) = far.outcome else { return XCTFail("\(far.outcome)") }
        XCTAssertEqual(far.state?.failures, 1, "counted as a failure until the resync is done")
        XCTAssertNil(far.state?.lastStep(of: record.factors[0]), "the counter does not move")
        guard case .resyncNeeded = try decide(99).outcome else { return XCTFail("the reach's last counter") }
        guard case .wrongCode = try decide(100).outcome else { return XCTFail("past the reach: a wrong code") }
        guard case .wrongCode = try decide(52, after: 50).outcome else { return XCTFail("not the following code") }
        guard case .wrongCode = try decide(50, after: 50).outcome else { return XCTFail("the same code twice") }
        guard case .wrongCode = try decide(60, options: { var o = options; o.hotpResyncWindow = 0; return o }()).outcome else {
            return XCTFail("hotp_resync_window=0: no resync")
        }
        guard case .wrongCode = try decide(60, options: { var o = options; o.forwardPass = true; return o }()).outcome else {
            return XCTFail("forward_pass: one question, no resync")
        }
        var locking = options
        locking.maxFailures = 1
        guard case .wrongCode(_, _, .some) = try decide(50, options: locking).outcome else {
            return XCTFail("a far code whose failure starts a lockout asks for nothing")
        }

        state = try XCTUnwrap(far.state)
        let done = try decide(51, after: 50)
        guard case .success(_, 51, 6, nil) = done.outcome else { return XCTFail("\(done.outcome)") }
        state = try XCTUnwrap(done.state)
        XCTAssertEqual(state.failures, 0, "the resync clears the failure its first code counted")
        XCTAssertEqual(state.lastStep(of: record.factors[0]), 51)
        guard case .wrongCode(true, _, _) = try decide(51).outcome else { return XCTFail("both codes are used up") }
        guard case .wrongCode = try decide(51, after: 50).outcome else { return XCTFail("the pair never works twice") }
        guard case .success(_, 52, _, _) = try decide(52).outcome else { return XCTFail("the window starts past the pair") }
    }
}
