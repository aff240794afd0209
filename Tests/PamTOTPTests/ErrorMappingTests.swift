import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The error-mapping table (pam_totp(8), RETURN VALUES), one test per row, through the real libpam.
final class ErrorMappingTests: XCTestCase {
    var fixture: PAMFixture!
    let secret = Array("12345678901234567890".utf8)

    override func setUpWithError() throws {
        fixture = try PAMFixture()
        try fixture.service("totp", ["auth required MODULE STORE max_failures=3 lockout=600"])
        try fixture.enroll("alice", secret: secret)
    }

    override func tearDown() { fixture.cleanup() }

    func auth(_ user: String?, _ answer: [UInt8]?, service: String = "totp", fail: Bool = false) -> Int32 {
        let c = Conversation(answer: answer)
        c.fail = fail
        return fixture.authenticate(service: service, user: user, conversation: c)
    }

    func testCodeMatched_Success() throws {
        awayFromStepBoundary()
        XCTAssertEqual(auth("alice", try currentCode(secret)), PAM_SUCCESS)
    }

    func testRecoveryCode_Success() throws {
        var rng = SplitMix64(seed: 3)
        let (codes, set) = RecoverySet.generate(count: 2, iterations: 1_000, using: &rng)
        try fixture.enroll("rita", secret: secret, recovery: set)
        XCTAssertEqual(auth("rita", codes[0]), PAM_SUCCESS)
        XCTAssertEqual(auth("rita", codes[0]), PAM_AUTH_ERR, "each recovery code works once")
        XCTAssertEqual(auth("rita", codes[1]), PAM_SUCCESS)
    }

    func testWrongOrReplayedCode_AuthErr() throws {
        awayFromStepBoundary()
        let good = try currentCode(secret)
        XCTAssertEqual(auth("alice", good), PAM_SUCCESS)
        XCTAssertEqual(auth("alice", good), PAM_AUTH_ERR, "replay")
        XCTAssertEqual(auth("alice", Array("12345".utf8)), PAM_AUTH_ERR, "malformed")
        XCTAssertEqual(try fixture.state("alice").failures, 2)
    }

    func testLockedOut_AuthErrAndNotCounted() throws {
        awayFromStepBoundary()
        for _ in 0..<3 { XCTAssertEqual(auth("alice", Array("0000000".utf8)), PAM_AUTH_ERR) }
        let locked = try fixture.state("alice")
        XCTAssertEqual(locked.failures, 3)
        XCTAssertGreaterThan(locked.lockedUntil, Int64(time(nil)))
        XCTAssertEqual(auth("alice", try currentCode(secret)), PAM_AUTH_ERR, "the right code while locked out")
        XCTAssertEqual(try fixture.state("alice").failures, 3, "attempts while locked are not counted")
    }

    /// 100 consecutive failures lock until an admin runs `totp-enroll unlock` (root only).
    func testHardCap_AuthErrUntilUnlock() throws {
        try XCTSkipUnless(isRoot, "unlock is root-only")
        try fixture.enroll("nobody", secret: secret)  // a passwd user, as totp-enroll requires
        let user = Array("nobody".utf8)
        var s = UserState()
        s.failures = 100
        let store = try Store(path: Array(fixture.store.path.utf8))
        try store.withLock(user: user) { () throws(MFAError) in try store.writeStateLocked(user: user, state: s) }
        awayFromStepBoundary()
        XCTAssertEqual(auth("nobody", try currentCode(secret)), PAM_AUTH_ERR, "the right code at the hard cap")
        let unprivileged = try runCommand(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                           enrollURL.path, "unlock", "--user", "nobody"])
        XCTAssertNotEqual(unprivileged.status, 0)
        XCTAssertEqual(try fixture.state("nobody").failures, 100)
        let r = try runCommand([enrollURL.path, "unlock", "--user", "nobody", "--store", fixture.store.path])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.contains("100 consecutive failures cleared"), r.stdout)
        XCTAssertEqual(auth("nobody", try currentCode(secret)), PAM_SUCCESS)
    }

    /// A state file with no valid slot denies (the replay guard cannot be trusted) until root
    /// runs unlock, which rebuilds it so that no code up to now can be replayed.
    func testCorruptState_AuthinfoUnavailUntilUnlock() throws {
        try XCTSkipUnless(isRoot, "unlock is root-only")
        try fixture.enroll("nobody", secret: secret)
        awayFromStepBoundary()
        let good = try currentCode(secret)
        XCTAssertEqual(auth("nobody", good), PAM_SUCCESS)
        let statePath = fixture.store.appendingPathComponent(".state.nobody").path
        try Data(repeating: 0x41, count: UserState.fileSize).write(to: URL(fileURLWithPath: statePath))
        XCTAssertEqual(chmod(statePath, 0o600), 0)
        XCTAssertEqual(auth("nobody", try currentCode(secret, offsetSteps: 1)), PAM_AUTHINFO_UNAVAIL)
        let r = try runCommand([enrollURL.path, "unlock", "--user", "nobody", "--store", fixture.store.path])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stderr.contains("rebuilt"), r.stderr)
        XCTAssertEqual(auth("nobody", good), PAM_AUTH_ERR, "the code used before the corruption does not replay")
        XCTAssertEqual(auth("nobody", try currentCode(secret, offsetSteps: 1)), PAM_SUCCESS)
    }

    func testUnenrolled_AuthErr_NullokIgnore() throws {
        XCTAssertEqual(auth("bob", Array("123456".utf8)), PAM_AUTH_ERR)
        try fixture.service("nullok", ["auth [success=ok ignore=ignore default=die] MODULE STORE nullok",
                                       "auth required pam_permit.so"])
        XCTAssertEqual(auth("bob", nil, service: "nullok"), PAM_SUCCESS, "PAM_IGNORE, then pam_permit")
    }

    func testBadOption_ServiceErr() throws {
        try fixture.service("bad", ["auth required MODULE STORE lockout=forever"])
        XCTAssertEqual(auth("alice", try currentCode(secret), service: "bad"), PAM_SERVICE_ERR)
    }

    func testStoreProblemAndLockTimeout_AuthinfoUnavail() throws {
        XCTAssertEqual(chmod(fixture.store.path, 0o750), 0)
        XCTAssertEqual(auth("alice", try currentCode(secret)), PAM_AUTHINFO_UNAVAIL)
        XCTAssertEqual(chmod(fixture.store.path, 0o700), 0)
        // Another process holds alice's lock: the module gives up after its 5 s timeout.
        let lockPath = fixture.store.appendingPathComponent(".lock.alice").path
        let fd = open(lockPath, O_RDWR | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        let started = Date()
        XCTAssertEqual(auth("alice", try currentCode(secret)), PAM_AUTHINFO_UNAVAIL)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 4.5, "it waited for the lock first")
        close(fd)
        awayFromStepBoundary()
        XCTAssertEqual(auth("alice", try currentCode(secret)), PAM_SUCCESS)
    }

    func testConversationFailure_ConvErr_NoUser_UserUnknown() throws {
        XCTAssertEqual(auth("alice", nil, fail: true), PAM_CONV_ERR)
        // No user given and the application cannot supply one through the conversation.
        XCTAssertEqual(auth(nil, nil, fail: true), PAM_USER_UNKNOWN)
    }
}

/// Policy across processes, out of process with pamtester (each its own process, like sshd's
/// per-connection children), and the clock moved with faketime.
final class CrossProcessPolicyTests: XCTestCase {
    var root: URL!
    var store: URL!
    var service = ""
    let secretB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    var secret: [UInt8] = []

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d")
        root = try makeTemporaryDirectory("pam_totp_policy")
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        service = "pam_totp_policy_\(getpid())"
        secret = try Base32.decode(Array(secretB32.utf8))
    }

    override func tearDown() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        if let root { removeTemporaryDirectory(root) }
    }

    func writeService(_ arguments: String) throws {
        try "auth required \(moduleURL.path) store=\(store.path) \(arguments)\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
    }

    func enroll(_ user: String) throws {
        try Store(path: Array(store.path.utf8)).write(user: Array(user.utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
        ]))
    }

    func state(_ user: String) throws -> UserState {
        try Store(path: Array(store.path.utf8)).readState(user: Array(user.utf8))
    }

    func concurrentPamtesters(_ count: Int, user: String, answer: String, faketime: String? = nil) throws -> [Int32] {
        try startPamtestersAtOnce(count, service: service, user: user, answer: answer, faketime: faketime)
    }

    /// 20 processes submit the same valid code at once: exactly one succeeds (the replay guard
    /// holds across processes). 20 wrong codes at once: exactly 20 failures are counted.
    func testConcurrentSameCodeExactlyOneSuccessAndExactFailureCount() throws {
        try writeService("max_failures=100 lockout=0")
        for round in 0..<5 {
            let user = "conc\(round)"
            try enroll(user)
            let t = 2_000_000_010 + Int64(round) * 3_000  // a fixed time per round, via faketime
            let code = try TOTP.code(secret: secret, parameters: .default, at: t)
            let codes = try concurrentPamtesters(20, user: user, answer: String(decoding: code, as: UTF8.self), faketime: "@\(t)")
            XCTAssertEqual(codes.filter { $0 == 0 }.count, 1, "round \(round): exactly one of 20 succeeds")
            XCTAssertEqual(try state(user).lastStep(forLabel: Array("phone".utf8)), UInt64(t / 30))
        }
        for round in 0..<3 {
            let user = "wrong\(round)"
            try enroll(user)
            let codes = try concurrentPamtesters(20, user: user, answer: "12345")
            XCTAssertEqual(codes.filter { $0 == 0 }.count, 0)
            XCTAssertEqual(try state(user).failures, 20, "round \(round): every failure counted exactly once")
        }
    }

    /// The lockout is in the store: separate processes see it, and it ends when its time is up
    /// (faketime), not when a process restarts.
    func testLockoutAcrossProcessesAndRestart() throws {
        try writeService("max_failures=3 lockout=60")
        try enroll("lock")
        let t: Int64 = 2_100_000_000
        for _ in 0..<3 { XCTAssertNotEqual(try runCommand(["faketime", "@\(t)", "pamtester", service, "lock", "authenticate"], input: "1234567\n").status, 0) }
        // faketime "@T" starts the clock at T and lets it run, so a slow start-up may add a second.
        let lockedUntil = try state("lock").lockedUntil
        XCTAssertTrue((t + 60)...(t + 63) ~= lockedUntil, "locked until \(lockedUntil - t) s after the last failure")
        let code10 = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: t + 10), as: UTF8.self)
        XCTAssertNotEqual(try runCommand(["faketime", "@\(t + 10)", "pamtester", service, "lock", "authenticate"], input: code10 + "\n").status, 0,
                          "a new process still sees the lockout")
        let code70 = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: t + 70), as: UTF8.self)
        let after = try runCommand(["faketime", "@\(t + 70)", "pamtester", service, "lock", "authenticate"], input: code70 + "\n")
        XCTAssertEqual(after.status, 0, after.stderr)
        XCTAssertEqual(try state("lock").failures, 0)
    }

    func testClockBeforeEpochDenies() throws {
        try writeService("")
        try enroll("old")
        let r = try runCommand(["faketime", "@-100", "pamtester", service, "old", "authenticate"], input: "123456\n")
        XCTAssertNotEqual(r.status, 0)
    }
}
