import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
import FleetStore

/// The store interface's test suite (docs/ARCHITECTURE.md, section 7): every rule a caller relies on,
/// through `TOTPStore` alone, with an injected clock (explicit times) — run against each
/// implementation. `FileStoreContractTests` runs it on the file store; a database backend adds
/// a subclass with its own `makeStore`.
class StoreContract<S: TOTPStore> {
    let makeStore: () throws -> S
    let uid: UInt32 = 4242
    let user = Array("carol".utf8)
    let t0: Int64 = 1_700_000_010  // 10 s into a 30 s step
    let secret = Array("12345678901234567890".utf8)
    var rng = SplitMix64(seed: 7)

    init(makeStore: @escaping () throws -> S) { self.makeStore = makeStore }

    var options: ModuleOptions {
        var o = ModuleOptions()
        o.maxFailures = 3
        o.lockoutSeconds = 60
        return o
    }

    func factor(_ label: String, secret: [UInt8]? = nil, at t: Int64? = nil) throws -> Factor {
        try Factor(label: Array(label.utf8), parameters: .default, created: t ?? t0,
                   enrolledStep: UInt64((t ?? t0) / 30), secret: secret ?? self.secret)
    }

    func code(at t: Int64, secret: [UInt8]? = nil) throws -> [UInt8] {
        try TOTP.code(secret: secret ?? self.secret, parameters: .default, at: t)
    }

    func login(_ s: S, _ answer: [UInt8], at t: Int64, options: ModuleOptions? = nil) throws -> AuthOutcome {
        let enrollment = try s.lookup(user: user, accountUID: uid)
        return s.authenticate(answer: answer, at: t, options: options ?? self.options, process: 1, enrollment: enrollment)
    }

    func run() throws {
        try enrolmentAndLogin()
        try failuresLockoutAndUnlock()
        try factorsAndLabels()
        try recoveryCodes()
        try accountBindingAndPurge()
        try forwardPass()
        try oneStepLogin()
        try everyEnrolledUser()
        try enrolmentAtLogin()
    }

    /// Enrolment at first login (`enrollAtLogin`): the checks change nothing; a wrong code saves
    /// nothing; the right one saves the factor with its step used; once the user has a factor,
    /// another adds nothing and the checks say so. On the store's clock (a database's own), so
    /// at the real time here.
    func enrolmentAtLogin() throws {
        let s = try makeStore()
        let now = Int64(time(nil))
        let label = Array("carol@host1".utf8)
        func enrol(_ answer: [UInt8]?, secret: [UInt8]? = nil, label: [UInt8]? = nil) throws -> FirstFactor {
            try s.enrollAtLogin(user: user, accountUID: uid, label: label ?? Array("carol@host1".utf8),
                                secret: answer == nil ? [] : secret ?? self.secret, answer: answer, at: now, options: options)
        }
        XCTAssertEqual(try enrol(nil), .mayEnrol)
        XCTAssertNil(try s.status(user: user), "the checks change nothing")
        XCTAssertEqual(try enrol(try code(at: now + 40 * 30)), .wrongCode)
        XCTAssertNil(try s.status(user: user), "a wrong code saves nothing")
        let right = try code(at: now)
        XCTAssertEqual(try enrol(right), .enrolled)
        let status = try XCTUnwrap(try s.status(user: user))
        XCTAssertEqual(status.record.factors.map(\.label), [label])
        XCTAssertEqual(status.record.uid, uid)
        guard case .wrongCode(replayed: true, _, _) = try login(s, right, at: now) else { return XCTFail("the proving code is used") }
        let other = Array("abcdefghijabcdefghij".utf8)
        XCTAssertEqual(try enrol(try code(at: now, secret: other), secret: other, label: Array("carol@host2".utf8)), .hadFactor)
        XCTAssertEqual(try enrol(nil), .hadFactor)
        XCTAssertEqual(try s.status(user: user)?.record.factors.count, 1, "nothing added")
        XCTAssertTrue(try s.purge(user: user))
    }

    /// `users()` (totp-enroll status --all): every enrolled name, in byte order, and nothing else.
    func everyEnrolledUser() throws {
        let s = try makeStore()
        XCTAssertEqual(try s.users(), [])
        let names = ["zoe", "Bob", "al.ice", "alice"]
        for (i, name) in names.enumerated() {
            try s.enroll(user: Array(name.utf8), accountUID: uid + UInt32(i), factor: try factor("phone"),
                         importedCodes: nil, using: &rng)
        }
        XCTAssertEqual(try s.users().map { String(decoding: $0, as: UTF8.self) }, ["Bob", "al.ice", "alice", "zoe"])
        for name in names { XCTAssertTrue(try s.purge(user: Array(name.utf8))) }
        XCTAssertEqual(try s.users(), [])
    }

    /// `login` (what pam-totpd calls): lookup and verdict in one step, same outcomes.
    func oneStepLogin() throws {
        let s = try makeStore()
        func account(_ uid: UInt32?) -> () throws(MFAError) -> Account? {
            { () throws(MFAError) -> Account? in uid.map { Account(name: self.user, uid: $0) } }
        }
        XCTAssertEqual(s.login(user: user, account: account(uid), answer: try code(at: t0), at: t0, options: options, process: 1), .unenrolled)
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        let t1 = t0 + 30
        XCTAssertEqual(s.login(user: user, account: account(uid), answer: try code(at: t1), at: t1, options: options, process: 1),
                       .success(factor: Array("phone".utf8), step: UInt64(t1 / 30), digits: 6))
        guard case .wrongCode(replayed: true, 1, nil) = s.login(user: user, account: account(uid), answer: try code(at: t1), at: t1,
                                                                 options: options, process: 1) else { return XCTFail("replay") }
        // Another account's uid, or no such account: not enrolled, and nothing counted.
        XCTAssertEqual(s.login(user: user, account: account(uid + 1), answer: Array("000000".utf8), at: t1, options: options, process: 1), .unenrolled)
        XCTAssertEqual(s.login(user: user, account: account(nil), answer: Array("000000".utf8), at: t1, options: options, process: 1), .unenrolled)
        XCTAssertEqual(try s.status(user: user)?.state.failures, 1)
        XCTAssertTrue(try s.purge(user: user))
    }

    /// Enrol, log in, replay, the enrolment's own step is used.
    func enrolmentAndLogin() throws {
        let s = try makeStore()
        guard case .unenrolled = try s.lookup(user: user, accountUID: uid) else { return XCTFail("unenrolled at first") }
        XCTAssertEqual(try login(s, try code(at: t0), at: t0), .unenrolled)
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        guard case .enrolled = try s.lookup(user: user, accountUID: uid) else { return XCTFail("enrolled") }
        // The code that proved the enrolment is used.
        guard case .wrongCode(replayed: true, _, _) = try login(s, try code(at: t0), at: t0) else { return XCTFail("enrolment step replayed") }
        let t1 = t0 + 30
        XCTAssertEqual(try login(s, try code(at: t1), at: t1), .success(factor: Array("phone".utf8), step: UInt64(t1 / 30), digits: 6))
        guard case .wrongCode(replayed: true, let failures, nil) = try login(s, try code(at: t1), at: t1) else { return XCTFail("replay") }
        XCTAssertEqual(failures, 1)
        let status = try XCTUnwrap(try s.status(user: user))
        XCTAssertEqual(status.state.failures, 1)
        XCTAssertEqual(status.record.factors.map(\.label), [Array("phone".utf8)])
        XCTAssertTrue(try s.purge(user: user))
    }

    func failuresLockoutAndUnlock() throws {
        let s = try makeStore()
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        for i in 1...2 {
            guard case .wrongCode(false, let f, nil) = try login(s, Array("000000".utf8), at: t0 + 30) else { return XCTFail("wrong \(i)") }
            XCTAssertEqual(f, UInt32(i))
        }
        guard case .wrongCode(false, 3, let until?) = try login(s, Array("000000".utf8), at: t0 + 30) else { return XCTFail("third starts a lockout") }
        XCTAssertEqual(until, t0 + 90)
        // Locked: even the right code is refused, and nothing is counted.
        guard case .lockedOut(until: t0 + 90, permanent: false) = try login(s, try code(at: t0 + 60), at: t0 + 60) else { return XCTFail("locked") }
        XCTAssertEqual(try s.status(user: user)?.state.failures, 3)
        let cleared = try s.unlock(user: user, at: t0 + 61)
        XCTAssertEqual(cleared.failures, 3)
        XCTAssertFalse(cleared.rebuilt)
        XCTAssertEqual(try login(s, try code(at: t0 + 61), at: t0 + 61), .success(factor: Array("phone".utf8), step: UInt64((t0 + 61) / 30), digits: 6))
        XCTAssertEqual(try s.status(user: user)?.state.failures, 0)
        XCTAssertTrue(try s.purge(user: user))
    }

    /// The refusal `body` threw, by name (the same on every store: issue 37), or nil.
    func refusal(_ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) -> Refusal? {
        do {
            try body()
            XCTFail("not refused", file: file, line: line)
        } catch let MFAError.refused(r, _) {
            return r
        } catch {
            XCTFail("refused without a name: \(error)", file: file, line: line)
        }
        return nil
    }

    func factorsAndLabels() throws {
        let s = try makeStore()
        let other = Array("abcdefghijabcdefghij".utf8)
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        XCTAssertEqual(refusal { try s.enroll(user: user, accountUID: uid, factor: try factor("phone", secret: other), importedCodes: nil, using: &rng) },
                       .labelTaken, "unique label")
        XCTAssertEqual(refusal { try s.enroll(user: user, accountUID: uid, factor: try factor("tablet"), importedCodes: nil, using: &rng) },
                       .secretTaken, "unique secret")
        XCTAssertEqual(refusal { try s.checkEnrollable(user: user, accountUID: uid, label: Array("phone".utf8), secret: nil) }, .labelTaken)
        XCTAssertNoThrow(try s.checkEnrollable(user: user, accountUID: uid, label: Array("tablet".utf8), secret: other))
        try s.enroll(user: user, accountUID: uid, factor: try factor("tablet", secret: other), importedCodes: nil, using: &rng)
        // Either factor logs in.
        XCTAssertEqual(try login(s, try code(at: t0 + 30, secret: other), at: t0 + 30),
                       .success(factor: Array("tablet".utf8), step: UInt64((t0 + 30) / 30), digits: 6))
        XCTAssertEqual(try s.removeFactor(user: user, accountUID: uid, label: Array("phone".utf8), mayRemoveLast: false), 1)
        XCTAssertEqual(refusal { _ = try s.removeFactor(user: user, accountUID: uid, label: Array("tablet".utf8), mayRemoveLast: false) },
                       .lastFactor, "a user never removes their own last factor")
        XCTAssertEqual(refusal { _ = try s.removeFactor(user: user, accountUID: uid, label: Array("nope".utf8), mayRemoveLast: true) }, .noSuchFactor)
        XCTAssertEqual(try s.removeFactor(user: user, accountUID: uid, label: Array("tablet".utf8), mayRemoveLast: true), 0)
        XCTAssertNil(try s.status(user: user), "the last factor's removal removes the user")
        XCTAssertFalse(try s.purge(user: user))
    }

    func recoveryCodes() throws {
        let s = try makeStore()
        let (codes, set) = RecoverySet.generate(count: 10, iterations: 1_000, using: &rng)
        XCTAssertEqual(refusal { _ = try s.replaceRecovery(user: user, accountUID: uid, set: set) }, .noFactorYet)
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        XCTAssertFalse(try s.replaceRecovery(user: user, accountUID: uid, set: set))
        XCTAssertEqual(try login(s, codes[3], at: t0 + 30), .recoveryCode(remaining: 9))
        guard case .wrongCode = try login(s, codes[3], at: t0 + 30) else { return XCTFail("a recovery code works once") }
        // A re-import of the same codes does not revive the used one.
        let leftOut = try s.enroll(user: user, accountUID: uid, factor: try factor("tablet", secret: Array("zyxwvutsrqzyxwvutsrq".utf8)),
                                   importedCodes: codes, using: &rng)
        XCTAssertEqual(leftOut, 1)
        guard case .wrongCode = try login(s, codes[3], at: t0 + 30) else { return XCTFail("the used code stays used") }
        XCTAssertTrue(try s.purge(user: user))
    }

    func accountBindingAndPurge() throws {
        let s = try makeStore()
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        guard case .otherAccount(recordUID: uid) = try s.lookup(user: user, accountUID: uid + 1) else {
            return XCTFail("a reused name is not enrolled")
        }
        XCTAssertThrowsError(try s.enroll(user: user, accountUID: uid + 1, factor: try factor("tablet", secret: Array("zyxwvutsrqzyxwvutsrq".utf8)),
                                          importedCodes: nil, using: &rng))
        _ = try login(s, Array("000000".utf8), at: t0 + 30)
        XCTAssertTrue(try s.purge(user: user))
        XCTAssertNil(try s.status(user: user))
        // After a purge the name enrols afresh, with no failures carried over.
        try s.enroll(user: user, accountUID: uid + 1, factor: try factor("phone"), importedCodes: nil, using: &rng)
        XCTAssertEqual(try s.status(user: user)?.state.failures, 0)
        XCTAssertTrue(try s.purge(user: user))
    }

    /// forward_pass: each factor takes its own number of trailing digits; no recovery code.
    func forwardPass() throws {
        let s = try makeStore()
        let eight = try OTPParameters(algorithm: .sha256, digits: 8, period: 30)
        let other = Array("abcdefghijabcdefghij".utf8)
        try s.enroll(user: user, accountUID: uid, factor: try factor("phone"), importedCodes: nil, using: &rng)
        try s.enroll(user: user, accountUID: uid,
                     factor: try Factor(label: Array("key".utf8), parameters: eight, created: t0, enrolledStep: UInt64(t0 / 30), secret: other),
                     importedCodes: nil, using: &rng)
        var o = options
        o.forwardPass = true
        let t = t0 + 30
        XCTAssertEqual(try login(s, Array("hunter2".utf8) + (try TOTP.code(secret: other, parameters: eight, at: t)), at: t, options: o),
                       .success(factor: Array("key".utf8), step: UInt64(t / 30), digits: 8))
        let t2 = t0 + 60
        XCTAssertEqual(try login(s, Array("pass 99".utf8) + (try code(at: t2)), at: t2, options: o),
                       .success(factor: Array("phone".utf8), step: UInt64(t2 / 30), digits: 6))
        let (codes, set) = RecoverySet.generate(count: 10, iterations: 1_000, using: &rng)
        _ = try s.replaceRecovery(user: user, accountUID: uid, set: set)
        guard case .wrongCode = try login(s, codes[0], at: t2, options: o) else { return XCTFail("no recovery code with forward_pass") }
        XCTAssertTrue(try s.purge(user: user))
    }
}

final class FileStoreContractTests: XCTestCase {
    func testFileStore() throws {
        let root = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(root) }
        let path = root.appendingPathComponent("store").path
        XCTAssertEqual(mkdir(path, 0o700), 0)
        try StoreContract<Store> { try Store(path: Array(path.utf8)) }.run()
    }
}

/// The same suite on PostgreSQL (fleet mode, docs/ARCHITECTURE.md, section 8): a throwaway cluster,
/// the schema from `init-database`, the store on the owner's connection with the caller's
/// clock (verify_at) so the suite's explicit times apply.
final class PostgresStoreContractTests: XCTestCase {
    func testPostgresStore() throws {
        guard PostgresCluster.available else {
            XCTFail("PostgreSQL 15 not found: make check installs postgresql-15")
            return
        }
        let cluster = try PostgresCluster()
        defer { cluster.stop() }
        try cluster.psql("CREATE DATABASE contract")
        let conninfo = cluster.conninfo(database: "contract")
        _ = try Migrator.migrate(conninfo: conninfo)
        // The suite's own limits (a 60 s lockout) are below the database's default floor (300 s).
        try cluster.psql("UPDATE pam_totp.settings SET min_lockout = 0", database: "contract")
        let pool = ConnectionPool(conninfo: conninfo)
        try StoreContract<PostgresStore> { PostgresStore(pool: pool, callerClock: true) }.run()
        // Nothing is left behind by the suite (each part purges what it made).
        XCTAssertEqual(try cluster.psql("SELECT count(*) FROM pam_totp.users", database: "contract"), "0")
    }
}
