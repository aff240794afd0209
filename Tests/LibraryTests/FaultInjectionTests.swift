import CLibc
import Foundation
import TestSupport
import XCTest
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// System calls that pass through to libc, record a trace of every call (with the store file
/// it touches), and make the call at one position of that trace fail with a chosen errno.
enum FaultySyscalls: SystemCalls {
    nonisolated(unsafe) static var trace: [String] = []
    /// CLOCK_MONOTONIC nanoseconds at each call of `trace`.
    nonisolated(unsafe) static var times: [UInt64] = []
    nonisolated(unsafe) static var failAt: Int? = nil
    nonisolated(unsafe) static var failErrno: Int32 = 0
    nonisolated(unsafe) static var names: [Int32: String] = [:]

    static func reset(failAt position: Int? = nil, errno: Int32 = 0) {
        trace = []
        times = []
        failAt = position
        failErrno = errno
    }

    /// Records the call; true if this one must fail (errno set).
    static func fault(_ call: String) -> Bool {
        let position = trace.count
        trace.append(call)
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        times.append(UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec))
        guard position == failAt else { return false }
        clibc_set_errno(failErrno)
        return true
    }

    static func name(_ fd: Int32) -> String { names[fd] ?? "fd" }

    static func open(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: UInt32) -> Int32 {
        let n = URL(fileURLWithPath: String(cString: path)).lastPathComponent
        if fault("open(store dir \(n.isEmpty ? "/" : "."))") { return -1 }
        let fd = clibc_open(path, flags, mode)
        if fd >= 0 { names[fd] = "store dir" }
        return fd
    }
    static func openat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: UInt32) -> Int32 {
        let n = String(cString: path)
        if fault("openat(\(n))") { return -1 }
        let fd = clibc_openat(dir, path, flags, mode)
        if fd >= 0 { names[fd] = n }
        return fd
    }
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        fault("read(\(name(fd)))") ? -1 : clibc_read(fd, buffer, count)
    }
    static func write(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
        fault("write(\(name(fd)))") ? -1 : clibc_write(fd, buffer, count)
    }
    static func pwrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ offset: Int64) -> Int {
        fault("pwrite(\(name(fd)))") ? -1 : clibc_pwrite(fd, buffer, count, offset)
    }
    static func fsync(_ fd: Int32) -> Int32 { fault("fsync(\(name(fd)))") ? -1 : clibc_fsync(fd) }
    static func fdatasync(_ fd: Int32) -> Int32 { fault("fdatasync(\(name(fd)))") ? -1 : clibc_fdatasync(fd) }
    static func renameat(_ fromDir: Int32, _ from: UnsafePointer<CChar>, _ toDir: Int32, _ to: UnsafePointer<CChar>) -> Int32 {
        fault("rename(\(String(cString: from)) → \(String(cString: to)))") ? -1 : clibc_renameat(fromDir, from, toDir, to)
    }
    static func unlinkat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32) -> Int32 {
        clibc_unlinkat(dir, path, flags)
    }
    static func flock(_ fd: Int32, _ operation: Int32) -> Int32 { fault("flock(\(name(fd)))") ? -1 : clibc_flock(fd, operation) }
    /// close(2) releases the descriptor even when it reports an error, so the real close
    /// always happens.
    static func close(_ fd: Int32) -> Int32 {
        let failing = fault("close(\(name(fd)))")
        let e = failing ? failErrno : 0
        names[fd] = nil
        let r = clibc_close(fd)
        if failing { clibc_set_errno(e); return -1 }
        return r
    }
    static func fstat(_ fd: Int32, _ status: UnsafeMutablePointer<stat>) -> Int32 { clibc_fstat(fd, status) }
    static func fstatat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ status: UnsafeMutablePointer<stat>, _ flags: Int32) -> Int32 {
        clibc_fstatat(dir, path, status, flags)
    }
    static func fchmod(_ fd: Int32, _ mode: UInt32) -> Int32 { clibc_fchmod(fd, mode) }
}

/// Every system call the store makes, failed in turn with EINTR, EIO, ENOSPC, EDQUOT and
/// EFBIG (docs/ARCHITECTURE.md, section 7): each attempt is a denial or a recorded success (never an
/// unrecorded success, never a trap), the record and the state are the old or the new version,
/// and the next operation without faults works. The call-site × error table is printed.
final class FaultInjectionTests: XCTestCase {
    typealias FaultyStore = FileStore<FaultySyscalls>
    static let errors: [(String, Int32)] = [("EINTR", EINTR), ("EIO", EIO), ("ENOSPC", ENOSPC), ("EDQUOT", EDQUOT), ("EFBIG", EFBIG)]

    let user = Array("alice".utf8)
    let secret = Array("12345678901234567890".utf8)
    let t0: Int64 = 1_800_000_010
    var dir: URL!

    override func setUpWithError() throws {
        dir = try makeTemporaryDirectory("faults")
        XCTAssertEqual(chmod(dir.path, 0o700), 0)
    }

    override func tearDown() {
        FaultySyscalls.reset()
        removeTemporaryDirectory(dir)
    }

    func code(at t: Int64) throws -> [UInt8] { try TOTP.code(secret: secret, parameters: .default, at: t) }

    func fileBytes(_ name: String) -> Data? { FileManager.default.contents(atPath: dir.appendingPathComponent(name).path) }

    /// Restores the store directory to exactly `files` (name → bytes), removing anything else.
    func restore(_ files: [String: Data]) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: dir.path) where files[name] == nil {
            try FileManager.default.removeItem(at: dir.appendingPathComponent(name))
        }
        for (name, bytes) in files {
            let path = dir.appendingPathComponent(name).path
            unlink(path)
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: bytes, attributes: [.posixPermissions: 0o600]))
        }
    }

    func snapshot() throws -> [String: Data] {
        var out: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: dir.path) { out[name] = fileBytes(name) }
        return out
    }

    func authenticate(_ store: FaultyStore, answer: [UInt8], at t: Int64) -> AuthOutcome {
        let options = ModuleOptions()
        switch Result(catching: { () throws(MFAError) in try store.lookup(user: user, accountUID: 1000) }) {
        case .success(.enrolled(let e)):
            return store.authenticate(answer: answer, at: t, options: options, process: 1, enrolled: e)
        case .success: return .unenrolled
        case .failure(let e): return .failed(e)
        }
    }

    func liveState() throws -> UserState { try Store(path: Array(dir.path.utf8)).readState(user: user) }

    /// Runs `attempt` once per (call site of a fault-free run, error), restoring the store
    /// before each; `check` judges each outcome. Returns the printed table.
    func sweep(_ title: String, prepare: () throws -> Void, attempt: () -> String,
               check: (_ cell: String, _ site: String, _ error: String) throws -> Void) throws -> String {
        try prepare()
        let before = try snapshot()
        FaultySyscalls.reset()
        let clean = attempt()
        let sites = FaultySyscalls.trace
        XCTAssertFalse(sites.isEmpty)
        var rows = ["\(title) (fault-free: \(clean))", "call site".padding(toLength: 40, withPad: " ", startingAt: 0)
                    + Self.errors.map { $0.0.padding(toLength: 12, withPad: " ", startingAt: 0) }.joined()]
        for (i, site) in sites.enumerated() {
            var row = "#\(i) \(site)".padding(toLength: 40, withPad: " ", startingAt: 0)
            for (name, e) in Self.errors {
                try restore(before)
                FaultySyscalls.reset(failAt: i, errno: e)
                let cell = attempt()
                FaultySyscalls.reset()
                try check(cell, site, name)
                row += cell.padding(toLength: 12, withPad: " ", startingAt: 0)
            }
            rows.append(row)
        }
        try restore(before)
        return rows.joined(separator: "\n")
    }

    func testEverySyscallOfALoginFailingInTurn() throws {
        var tables: [String] = []
        for firstLogin in [false, true] {
            final class Box { var state = UserState() }
            let old = Box()
            let table = try sweep(firstLogin ? "login, first (creates the state file)" : "login (state file exists)",
                                  prepare: {
                try restore([:])
                let s = try Store(path: Array(dir.path.utf8))
                try s.write(user: user, record: UserRecord(uid: 1000, id: 7, factors: [
                    try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret)]))
                if !firstLogin {
                    var st = UserState()
                    st.failures = 2
                    try s.withLock(user: user) { () throws(MFAError) in try s.writeStateLocked(user: user, state: st) }
                    old.state = try s.readState(user: user)
                }
            }, attempt: {
                let answer = (try? code(at: t0)) ?? []
                guard let store = try? FaultyStore(path: Array(dir.path.utf8)) else { return "deny(dir)" }
                switch authenticate(store, answer: answer, at: t0) {
                case .success: return "ok"
                case .notRecorded: return "deny(nr)"
                case .failed: return "deny(err)"
                default: return "deny(?)"
                }
            }, check: { cell, site, error in
                let state = try? liveState()
                let step = UInt64(t0 / 30)
                let recorded = state?.lastStep(forLabel: Array("phone".utf8)) == step && state?.failures == 0
                if cell == "ok" {
                    XCTAssertTrue(recorded, "\(site) \(error): success without the step recorded")
                } else {
                    XCTAssertTrue(cell.hasPrefix("deny"), "\(site) \(error): \(cell)")
                    // Old or new: the state the attempt started from, or the one it wrote.
                    if let state { XCTAssertTrue(state == old.state || recorded, "\(site) \(error): a third state \(state), old \(old.state)") }
                    else { XCTAssertTrue(firstLogin, "\(site) \(error): the state file vanished") }
                }
                XCTAssertNotEqual(cell, "deny(?)", "\(site) \(error)")
                XCTAssertEqual(try Store(path: Array(dir.path.utf8)).read(user: user)?.factors.count, 1, "\(site) \(error): record changed")
                // The next login without faults works (the next step's code).
                let next = t0 + 30
                XCTAssertEqual(authenticate(try FaultyStore(path: Array(dir.path.utf8)), answer: try code(at: next), at: next),
                               .success(factor: Array("phone".utf8), step: UInt64(next / 30), digits: 6), "\(site) \(error): next login")
                let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".tmp.") }
                XCTAssertEqual(leftovers, [], "\(site) \(error): temp file left")
            })
            tables.append(table)
        }
        print(tables.joined(separator: "\n\n"))
    }

    /// A wrong 8-digit answer (shaped like a recovery code) was recorded only after the PBKDF2
    /// that a right 8-digit code skipped (~5 ms with the default iterations): a process killed
    /// in between dropped wrong guesses uncounted while right ones were kept. Now every such
    /// answer costs the PBKDF2, and the attempt is durable, as a failure, before it: in the
    /// timed trace of system calls the state file's fdatasync precedes the long gap that is the
    /// PBKDF2, for a right code as for a wrong one, and the verdict is written after it.
    func testACostlyAnswerIsDurableBeforeThePBKDF2() throws {
        let eight = try OTPParameters(algorithm: .sha1, digits: 8, period: 30)
        var rng = SplitMix64(seed: 7)
        let (codes, set) = RecoverySet.generate(count: 4, iterations: 50_000, using: &rng)
        let right = try TOTP.code(secret: secret, parameters: eight, at: t0)
        let wrong = Array((right == Array("00000000".utf8) ? "11111111" : "00000000").utf8)
        for (answer, name, failures) in [(right, "right", UInt32(0)), (wrong, "wrong", 3), (codes[1], "recovery", 0)] {
            try restore([:])
            let s = try Store(path: Array(dir.path.utf8))
            var record = UserRecord(uid: 1000, id: 7, factors: [try Factor(label: Array("key".utf8), parameters: eight, created: 1, secret: secret)])
            record.recovery = set
            try s.write(user: user, record: record)
            var st = UserState()
            st.failures = 2
            try s.withLock(user: user) { () throws(MFAError) in try s.writeStateLocked(user: user, state: st) }
            FaultySyscalls.reset()
            let outcome = authenticate(try FaultyStore(path: Array(dir.path.utf8)), answer: answer, at: t0)
            let trace = FaultySyscalls.trace, times = FaultySyscalls.times
            XCTAssertEqual(trace.count, times.count)
            // The longest gap between two calls is the PBKDF2.
            var gap = 0, longest: UInt64 = 0
            for i in 1..<times.count where times[i] - times[i - 1] > longest { longest = times[i] - times[i - 1]; gap = i }
            XCTAssertGreaterThan(longest, 5_000_000, "\(name): no PBKDF2-long gap in \(trace)")
            let syncs = trace.indices.filter { trace[$0].hasPrefix("fdatasync(") && trace[$0].contains("state") }
            XCTAssertEqual(syncs.count, 2, "\(name): the attempt, then the verdict: \(trace)")
            XCTAssertLessThan(syncs.first ?? Int.max, gap, "\(name): the attempt was not durable before the PBKDF2: \(trace)")
            XCTAssertGreaterThanOrEqual(syncs.last ?? -1, gap, "\(name): \(trace)")
            switch (name, outcome) {
            case ("right", .success), ("wrong", .wrongCode), ("recovery", .recoveryCode): break
            default: XCTFail("\(name): \(outcome)")
            }
            XCTAssertEqual(try liveState().failures, failures, name)
        }
    }

    func testEverySyscallOfAnEnrolmentFailingInTurn() throws {
        var rng = SplitMix64(seed: 3)
        let second = [UInt8](repeating: 0x42, count: 20)
        let table = try sweep("enrol a second factor (one commit: the record)", prepare: {
            let s = try Store(path: Array(dir.path.utf8))
            try s.write(user: user, record: UserRecord(uid: 1000, id: 7, factors: [
                try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret)]))
        }, attempt: {
            guard let store = try? FaultyStore(path: Array(dir.path.utf8)) else { return "fail(dir)" }
            do throws(MFAError) {
                let f = try Factor(label: Array("tablet".utf8), parameters: .default, created: 2, enrolledStep: 99, secret: second)
                try store.enroll(user: user, accountUID: 1000, factor: f, using: &rng)
                return "ok"
            } catch {
                return "fail"
            }
        }, check: { cell, site, error in
            let record = try Store(path: Array(dir.path.utf8)).read(user: user)
            let labels = record?.factors.map { String(decoding: $0.label, as: UTF8.self) } ?? []
            // Reported failure: nothing changed. Reported success: the new record.
            XCTAssertEqual(labels, cell == "ok" ? ["phone", "tablet"] : ["phone"], "\(site) \(error): \(cell)")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".tmp.") }
            XCTAssertEqual(leftovers, [], "\(site) \(error): temp file left")
            // A login without faults works afterwards.
            XCTAssertEqual(authenticate(try FaultyStore(path: Array(dir.path.utf8)), answer: try code(at: t0), at: t0),
                           .success(factor: Array("phone".utf8), step: UInt64(t0 / 30), digits: 6), "\(site) \(error): next login")
        })
        print(table)
    }
}
