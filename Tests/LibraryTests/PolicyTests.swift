import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// The verification policy with an injected clock and an in-memory state (no files).
final class PolicyTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)
    let t0: Int64 = 1_800_000_010
    var record: UserRecord!
    var options = ModuleOptions()

    override func setUpWithError() throws {
        record = UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
        ])
    }

    func code(at t: Int64) throws -> [UInt8] { try TOTP.code(secret: secret, parameters: .default, at: t) }

    /// Runs the policy once and applies the state it decided; `saved` collects every state the
    /// policy asked to record.
    func decide(_ state: inout UserState, _ answer: [UInt8], at t: Int64, saved: inout [UserState]) throws -> AuthOutcome {
        let d = try Authenticator.decide(record: record, state: state, answer: answer, at: t,
                                         verifier: try TOTPVerifier(adjacentIntervals: options.adjacentIntervals),
                                         options: options)
        if let next = d.state {
            state = next
            saved.append(next)
        }
        return d.outcome
    }

    func testReplayIsDeniedAndLaterStepsStillWork() throws {
        var state = UserState(), saved: [UserState] = []
        let c = try code(at: t0)
        XCTAssertEqual(try decide(&state, c, at: t0, saved: &saved), .success(factor: Array("phone".utf8), step: UInt64(t0 / 30), digits: 6))
        XCTAssertEqual(try decide(&state, c, at: t0 + 5, saved: &saved),
                       .wrongCode(replayed: true, failures: 1, lockedUntil: nil))
        // An older code inside the window is a replay too (its step is below the used one).
        let older = try code(at: t0 - 30)
        if older != c {
            guard case .wrongCode(let replayed, _, _) = try decide(&state, older, at: t0 + 5, saved: &saved) else {
                return XCTFail("older code accepted")
            }
            XCTAssertTrue(replayed)
        }
        XCTAssertEqual(try decide(&state, try code(at: t0 + 30), at: t0 + 31, saved: &saved),
                       .success(factor: Array("phone".utf8), step: UInt64((t0 + 30) / 30), digits: 6))
        XCTAssertEqual(state.failures, 0, "a success resets the count")
    }

    func testLockoutAfterMaxFailuresThenExpires() throws {
        options.maxFailures = 3
        options.lockoutSeconds = 300
        var state = UserState(), saved: [UserState] = []
        let wrong = Array("000000".utf8) == (try code(at: t0)) ? Array("111111".utf8) : Array("000000".utf8)
        for i in 1...2 {
            XCTAssertEqual(try decide(&state, wrong, at: t0, saved: &saved),
                           .wrongCode(replayed: false, failures: UInt32(i), lockedUntil: nil))
        }
        XCTAssertEqual(try decide(&state, wrong, at: t0, saved: &saved),
                       .wrongCode(replayed: false, failures: 3, lockedUntil: t0 + 300))
        // Locked: even the right code is refused, without being checked or counted.
        XCTAssertEqual(try decide(&state, try code(at: t0 + 10), at: t0 + 10, saved: &saved),
                       .lockedOut(until: t0 + 300, permanent: false))
        XCTAssertEqual(state.failures, 3)
        // After the lockout the right code works and clears everything.
        let later = t0 + 301
        XCTAssertEqual(try decide(&state, try code(at: later), at: later, saved: &saved),
                       .success(factor: Array("phone".utf8), step: UInt64(later / 30), digits: 6))
        XCTAssertEqual(state.failures, 0)
        XCTAssertEqual(state.lockedUntil, 0)
        XCTAssertEqual(saved.last, state)
    }

    func testHardCapOf100NeedsAnAdmin() throws {
        options.maxFailures = 10
        options.lockoutSeconds = 1
        var state = UserState(), saved: [UserState] = []
        var t = t0
        let wrong = Array("999999".utf8)
        var counted = 0
        while counted < 100 {
            t += 2  // past every 1 s lockout
            if case .wrongCode = try decide(&state, wrong, at: t, saved: &saved) { counted += 1 }
        }
        XCTAssertEqual(state.failures, 100)
        t += 1_000_000
        XCTAssertEqual(try decide(&state, try code(at: t), at: t, saved: &saved), .lockedOut(until: Int64.max, permanent: true))
        state.failures = 0  // what `totp-enroll unlock` does
        state.lockedUntil = 0
        XCTAssertEqual(try decide(&state, try code(at: t), at: t, saved: &saved), .success(factor: Array("phone".utf8), step: UInt64(t / 30), digits: 6))
    }

    func testRecoveryCodesWorkOnceEach() throws {
        var rng = SplitMix64(seed: 7)
        let (codes, set) = RecoverySet.generate(count: 3, iterations: 1_000, using: &rng)
        XCTAssertEqual(codes.count, 3)
        XCTAssertTrue(codes.allSatisfy { $0.count == 12 && $0.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } })
        record.recovery = set
        var state = UserState(), saved: [UserState] = []
        XCTAssertEqual(try decide(&state, codes[1], at: t0, saved: &saved), .recoveryCode(remaining: 2))
        guard case .wrongCode = try decide(&state, codes[1], at: t0, saved: &saved) else { return XCTFail("reused") }
        // Grouped with dashes or spaces is the same code.
        let grouped = Array(codes[0][0..<4]) + [0x2D] + Array(codes[0][4..<8]) + [0x20] + Array(codes[0][8...])
        XCTAssertEqual(try decide(&state, grouped, at: t0, saved: &saved), .recoveryCode(remaining: 1))
        // A new set starts unused, and the old codes are gone.
        let (newCodes, newSet) = RecoverySet.generate(count: 2, iterations: 1_000, using: &rng)
        record.recovery = newSet
        guard case .wrongCode = try decide(&state, codes[2], at: t0, saved: &saved) else { return XCTFail("old code") }
        XCTAssertEqual(try decide(&state, newCodes[0], at: t0, saved: &saved), .recoveryCode(remaining: 1))
        // The record stores hashes only.
        let text = String(decoding: record.serialized(), as: UTF8.self)
        for c in codes + newCodes { XCTAssertFalse(text.contains(String(decoding: c, as: UTF8.self))) }
        XCTAssertEqual(try UserRecord.parse(record.serialized()), record)
    }

    func testPBKDF2AgainstRFC7914AndPython() throws {
        // RFC 7914 §11, PBKDF2-HMAC-SHA-256, first 32 bytes of each dkLen=64 vector.
        XCTAssertEqual(hex(pbkdf2SHA256(password: Array("passwd".utf8), salt: Array("salt".utf8), iterations: 1)),
                       "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc")
        XCTAssertEqual(hex(pbkdf2SHA256(password: Array("Password".utf8), salt: Array("NaCl".utf8), iterations: 80_000)),
                       "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56")
        let py = try runCommand(["python3", "-c", "import hashlib;print(hashlib.pbkdf2_hmac('sha256', b'123456789012', bytes(range(16)), 1234).hex())"])
        XCTAssertEqual(py.status, 0, py.stderr)
        XCTAssertEqual(hex(pbkdf2SHA256(password: Array("123456789012".utf8), salt: Array(0..<16), iterations: 1234)),
                       py.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    func testRecoveryShapeIsDistinctFromTOTP() {
        XCTAssertNil(RecoverySet.normalize(Array("1234567".utf8)), "6–7 digits are only ever TOTP codes")
        XCTAssertEqual(RecoverySet.normalize(Array("12345678".utf8)), Array("12345678".utf8), "imported scratch codes")
        XCTAssertNil(RecoverySet.normalize(Array("12345a7890".utf8)))
        XCTAssertEqual(RecoverySet.normalize(Array("1234-5678 90".utf8)), Array("1234567890".utf8))
        XCTAssertNil(RecoverySet.normalize([UInt8](repeating: 0x31, count: 33)))
    }
}

final class StateFileTests: XCTestCase {
    var root: URL!
    var store: Store!
    let user = Array("alice".utf8)

    override func setUpWithError() throws {
        root = try makeTemporaryDirectory()
        XCTAssertEqual(chmod(root.path, 0o700), 0)
        store = try Store(path: Array(root.path.utf8))
    }

    override func tearDown() { removeTemporaryDirectory(root) }

    var statePath: String { root.appendingPathComponent(".state.alice").path }

    func write(_ state: UserState) throws {
        try store.withLock(user: user) { () throws(MFAError) in try store.writeStateLocked(user: user, state: state) }
    }

    func testRoundTripAlternatingSlotsFixedSize() throws {
        XCTAssertEqual(try store.readState(user: user), UserState())
        var s = try store.readState(user: user)
        for i in 1...5 {
            s.failures = UInt32(i)
            s.setLastStep(UInt64(1000 + i), forLabel: Array("phone".utf8))
            s.setLastStep(UInt64(2000 + i), forLabel: Array("token".utf8))
            s.markRecoveryUsed(set: 42, index: i)
            try write(s)
            let back = try store.readState(user: user)
            XCTAssertEqual(back.sequence, s.sequence + 1)
            XCTAssertEqual(back.failures, UInt32(i))
            XCTAssertEqual(back.lastStep(forLabel: Array("phone".utf8)), UInt64(1000 + i))
            XCTAssertEqual(back.lastStep(forLabel: Array("token".utf8)), UInt64(2000 + i))
            XCTAssertEqual(back.usedRecovery(set: 42) >> 1, (UInt32(1) << UInt32(i)) - 1)
            XCTAssertEqual(back.usedRecovery(set: 43), 0)
            s = back
            let attrs = try FileManager.default.attributesOfItem(atPath: statePath)
            XCTAssertEqual((attrs[.size] as? NSNumber)?.intValue, UserState.fileSize)
            XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        }
    }

    func testATornSlotFallsBackToTheOtherOne() throws {
        var s = UserState()
        s.failures = 1
        try write(s)
        s = try store.readState(user: user)
        s.failures = 2
        try write(s)
        let newest = try store.readState(user: user)
        XCTAssertEqual(newest.failures, 2)
        // Tear the newest slot (as a crash in the middle of pwrite would).
        let fd = open(statePath, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let offset = off_t(Int(newest.sequence % 2) * UserState.slotSize)
        var junk = [UInt8](repeating: 0x41, count: 100)
        XCTAssertEqual(pwrite(fd, &junk, junk.count, offset + 20), 100)
        close(fd)
        XCTAssertEqual(try store.readState(user: user).failures, 1, "the previous state survives")
        // Both torn: refused, not guessed.
        let fd2 = open(statePath, O_RDWR)
        XCTAssertEqual(pwrite(fd2, &junk, junk.count, off_t(Int((newest.sequence + 1) % 2) * UserState.slotSize + 20)), 100)
        close(fd2)
        XCTAssertThrowsError(try store.readState(user: user))
    }

    func testHostileStateFilesAreRefused() throws {
        try write(UserState())
        XCTAssertEqual(truncate(statePath, 100), 0)
        XCTAssertThrowsError(try store.readState(user: user))
        XCTAssertEqual(unlink(statePath), 0)
        let outside = root.appendingPathComponent("outside")
        XCTAssertTrue(FileManager.default.createFile(atPath: outside.path, contents: Data(count: UserState.fileSize)))
        XCTAssertEqual(symlink(outside.path, statePath), 0)
        XCTAssertThrowsError(try store.readState(user: user)) { error in
            guard case .insecureStore = error as? MFAError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try write(UserState()))
    }
}

final class ConfigFileTests: XCTestCase {
    var root: URL!

    override func setUpWithError() throws { root = try makeTemporaryDirectory() }
    override func tearDown() { removeTemporaryDirectory(root) }

    func config(_ text: String, mode: mode_t = 0o644) throws -> [UInt8] {
        let url = root.appendingPathComponent("pam_totp.conf")
        try text.write(to: url, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(url.path, mode), 0)
        return Array(("config=" + url.path).utf8)
    }

    func load(_ args: [String]) throws -> ModuleOptions { try ModuleOptions.load(args.map { Array($0.utf8) }) }

    func testFileSetsDefaultsAndArgumentsOverride() throws {
        let c = try config("""
            # site defaults
            adjacent_intervals = 2
            max_failures=5
              lockout = 600   # ten minutes
            nullok
            prompt = One-time code:\u{20}
            """)
        let o = try ModuleOptions.load([c])
        XCTAssertEqual(o.adjacentIntervals, 2)
        XCTAssertEqual(o.maxFailures, 5)
        XCTAssertEqual(o.lockoutSeconds, 600)
        XCTAssertTrue(o.nullok)
        XCTAssertEqual(o.prompt, Array("One-time code:".utf8), "trailing spaces are trimmed in the file")
        // The pam.d line overrides what is not policy (the prompt) and may make the policy
        // stricter, never looser: where both set a limit, the stricter value wins.
        let p = try ModuleOptions.load([c, Array("adjacent_intervals=1".utf8), Array("nullok=no".utf8), Array("prompt=Code:".utf8)])
        XCTAssertEqual(p.adjacentIntervals, 1)
        XCTAssertFalse(p.nullok)
        XCTAssertEqual(p.prompt, Array("Code:".utf8))
        let looser = try ModuleOptions.load([c, Array("adjacent_intervals=7".utf8), Array("max_failures=50".utf8),
                                             Array("lockout=60".utf8)])
        XCTAssertEqual(looser.adjacentIntervals, 2, "the file's narrower window stays")
        XCTAssertEqual(looser.maxFailures, 5)
        XCTAssertEqual(looser.lockoutSeconds, 600)
        XCTAssertTrue(looser.nullok, "nullok in the file and not turned off on the line")
    }

    func testErrorsNameFileAndLine() throws {
        for (text, line) in [("debug\nbogus = 1\n", 2), ("\n\n\nmax_failures = 0\n", 4), ("lockout=-1", 1),
                             ("adjacent_intervals = 11", 1), ("config = /etc/x", 1), ("nullok = maybe", 1)] {
            let c = try config(text)
            XCTAssertThrowsError(try ModuleOptions.load([c]), text) { error in
                guard case .invalidOption(let m) = error as? MFAError else { return XCTFail("\(error)") }
                XCTAssertTrue(m.string.contains("pam_totp.conf:\(line):"), m.string)
            }
        }
    }

    func testUnsafeOrMissingFilesAreErrors() throws {
        XCTAssertThrowsError(try ModuleOptions.load([try config("debug\n", mode: 0o666)]))
        XCTAssertThrowsError(try load(["config=" + root.appendingPathComponent("missing").path]))
        let link = root.appendingPathComponent("link")
        XCTAssertEqual(symlink(root.appendingPathComponent("pam_totp.conf").path, link.path), 0)
        XCTAssertThrowsError(try load(["config=" + link.path]))
        XCTAssertThrowsError(try load(["config=" + root.path]), "a directory")
    }
}

/// ModuleOptions.civilDay (the module's "YYYY-MM-DD" without gmtime_r) against Foundation's
/// Gregorian calendar in UTC.
final class CivilDayTests: XCTestCase {
    func testCivilDayMatchesFoundationsCalendar() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var rng = SystemRandomNumberGenerator()
        let fixed: [Int64] = [0, -1, 86_399, 86_400, -86_400, -86_401, 951_782_400 /* 2000-02-29 */, 4_107_542_399,
                              253_402_300_799 /* 9999-12-31T23:59:59 */, -11_676_096_000 /* 1600-01-01 */]
        // From 1600 on: Foundation's calendar is Julian before October 1582, civilDay proleptic Gregorian.
        for t in fixed + (0..<2_000).map({ _ in Int64.random(in: -11_676_096_000...253_402_300_799, using: &rng) }) {
            let c = calendar.dateComponents([.year, .month, .day], from: Date(timeIntervalSince1970: TimeInterval(t)))
            let mine = ModuleOptions.civilDay(t)
            XCTAssertEqual([mine.year, mine.month, mine.day], [Int64(c.year!), Int64(c.month!), Int64(c.day!)], "t = \(t)")
        }
        // The extremes do not trap.
        _ = ModuleOptions.civilDay(Int64.max)
        _ = ModuleOptions.civilDay(Int64.min)
    }
}
