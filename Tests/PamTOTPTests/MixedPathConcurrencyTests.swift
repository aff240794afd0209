import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// One code, sixteen logins at once: half through pam-totpd as the user (a screen locker), half
/// in-process as root (sshd). The same store and locks serve both, so exactly one succeeds per
/// round, and failures are counted exactly across both paths (docs/ARCHITECTURE.md, section 4.1).
/// Eight is pam-totpd's per-user queue (`Limits.maxQueuedPerUser`): a ninth request of the
/// same user at once may be answered "busy" without its code being looked at, and so without a
/// failure counted (DaemonTests covers that refusal).
final class MixedPathConcurrencyTests: XCTestCase {
    var root: URL!
    var store: String { root.appendingPathComponent("store").path }
    var socketPath: String { root.appendingPathComponent("run/socket").path }
    var user = ""
    var uid: uid_t = 0
    var gid: gid_t = 0
    var daemon: Process?
    var services: [String] = []
    let secret = Array("mixedpathsecret12345".utf8)

    override func setUpWithError() throws {
        root = try makeTemporaryDirectory("pam_totp_mixed")
        XCTAssertEqual(chmod(root.path, 0o755), 0)
        XCTAssertEqual(mkdir(store, 0o700), 0)
        XCTAssertEqual(mkdir(root.appendingPathComponent("run").path, 0o755), 0)
        user = "totpmix\(getpid() % 100000)"
        XCTAssertEqual(try runCommand(["useradd", "-M", "-s", "/bin/sh", user]).status, 0)
        let pw = try XCTUnwrap(getpwnam(user))
        uid = pw.pointee.pw_uid
        gid = pw.pointee.pw_gid
        // No lockout, a high limit: every failure is counted and none turns into a lockout.
        let limits = "max_failures=100 lockout=0"
        let config = root.appendingPathComponent("pam_totp.conf").path
        try "store = \(store)\nmax_failures = 100\nlockout = 0\n".write(toFile: config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(config, 0o644), 0)
        let tag = "pam_totp_mixed_\(getpid())"
        for (name, line) in [(tag + "_root", "auth required \(moduleURL.path) store=\(store) \(limits)"),
                             (tag + "_user", "auth required \(moduleURL.path) socket=\(socketPath) \(limits)")] {
            try (line + "\n").write(toFile: "/etc/pam.d/" + name, atomically: true, encoding: .utf8)
            services.append(name)
        }
        let p = Process()
        p.executableURL = daemonURL
        p.arguments = ["--config", config, "--socket", socketPath]
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        daemon = p
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: socketPath) && Date() < deadline { usleep(50_000) }
        XCTAssertTrue(FileManager.default.fileExists(atPath: socketPath), "pam-totpd did not create its socket")
    }

    override func tearDown() {
        if let daemon, daemon.isRunning { daemon.terminate(); daemon.waitUntilExit() }
        for s in services { unlink("/etc/pam.d/" + s) }
        _ = try? runCommand(["userdel", user])
        removeTemporaryDirectory(root)
    }

    /// Starts every login at once; returns the exit statuses, root's first.
    func loginsAtOnce(_ answer: String, each: Int = 8) throws -> (root: [Int32], user: [Int32]) {
        var processes: [(Process, Bool)] = []
        for i in 0..<(2 * each) {
            let asUser = i % 2 == 1
            let p = Process()
            p.executableURL = URL(fileURLWithPath: asUser ? "/usr/bin/setpriv" : "/usr/bin/pamtester")
            p.arguments = asUser
                ? ["--reuid", "\(uid)", "--regid", "\(gid)", "--clear-groups", "pamtester", services[1], user, "authenticate"]
                : [services[0], user, "authenticate"]
            let input = Pipe()
            p.standardInput = input
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            input.fileHandleForWriting.write(Data((answer + "\n").utf8))
            try input.fileHandleForWriting.close()
            processes.append((p, asUser))
        }
        var rootStatuses: [Int32] = [], userStatuses: [Int32] = []
        for (p, asUser) in processes {
            p.waitUntilExit()
            if asUser { userStatuses.append(p.terminationStatus) } else { rootStatuses.append(p.terminationStatus) }
        }
        return (rootStatuses, userStatuses)
    }

    func state() throws -> UserState { try Store(path: Array(store.utf8)).readState(user: Array(user.utf8)) }

    func testOneCodeSixteenLoginsOverBothPaths() throws {
        let now = Int64(time(nil))
        try Store(path: Array(store.utf8)).write(user: Array(user.utf8), record: UserRecord(uid: uid, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: now - 3600,
                       enrolledStep: UInt64((now - 3600) / 30), secret: secret),
        ]))
        awayFromStepBoundary(margin: 10)
        let step = UInt64(time(nil)) / 30
        var successesByPath = [0, 0]
        // Three rounds, each with the code of a later step inside the window (a step is
        // accepted only above the last used one).
        for round in 1...3 {
            let code = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: Int64(step + UInt64(round)) * 30), as: UTF8.self)
            let (rootStatuses, userStatuses) = try loginsAtOnce(code)
            let successes = (rootStatuses + userStatuses).filter { $0 == 0 }.count
            XCTAssertEqual(successes, 1, "round \(round): root \(rootStatuses), user \(userStatuses)")
            if rootStatuses.contains(0) { successesByPath[0] += 1 }
            if userStatuses.contains(0) { successesByPath[1] += 1 }
            XCTAssertEqual(try state().lastStep(forLabel: Array("phone".utf8)), step + UInt64(round))
        }
        // Sixteen wrong codes at once: sixteen failures, counted across both paths.
        let before = try state().failures
        let wrong = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: Int64(step) * 30 + 86_400 * 7), as: UTF8.self)
        let (rootStatuses, userStatuses) = try loginsAtOnce(wrong)
        XCTAssertFalse((rootStatuses + userStatuses).contains(0))
        XCTAssertEqual(try state().failures, before + 16, "every failure counted once, whichever path")
        print("mixed paths: successes in process \(successesByPath[0]), through pam-totpd \(successesByPath[1]) of 3 rounds")
    }
}
