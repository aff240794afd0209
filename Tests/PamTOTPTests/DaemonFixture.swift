import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// pam-totpd as an unprivileged caller (a screen locker, pamtester under setpriv) meets it: run
/// as root in the foreground (`pam-totpd --config CONF --socket SOCK`) on a store of its own.
///
///     ROOT/            0755 (the socket must be reachable by every user)
///       store/         0700 root
///       run/           0755; run/socket is pam-totpd's
///       pam_totp.conf  0644 root: "store = ROOT/store"
///       pam-totpd.log  its stdout and stderr, shown when it does not come up
///
/// `start` waits (10 s at most) for the socket to accept; `cleanup` stops it (SIGTERM, reaped) and removes
/// ROOT. Records are written as root with the file store directly, as PAMFixture.enroll does.
final class DaemonFixture {
    let root: URL
    let store: String
    let socketPath: String
    let config: String
    let log: String
    private(set) var process: Process?

    init() throws {
        root = try makeTemporaryDirectory("pam_totp_daemon")
        store = root.appendingPathComponent("store").path
        socketPath = root.appendingPathComponent("run/socket").path
        config = root.appendingPathComponent("pam_totp.conf").path
        log = root.appendingPathComponent("pam-totpd.log").path
        do {
            guard chmod(root.path, 0o755) == 0, mkdir(store, 0o700) == 0,
                  mkdir(root.appendingPathComponent("run").path, 0o755) == 0,
                  chmod(root.appendingPathComponent("run").path, 0o755) == 0 else { throw POSIXError(.EIO) }
            try "store = \(store)\n".write(toFile: config, atomically: true, encoding: .utf8)
            guard chmod(config, 0o644) == 0 else { throw POSIXError(.EIO) }
        } catch {
            removeTemporaryDirectory(root)
            throw error
        }
    }

    /// Starts pam-totpd and waits until its socket accepts. Throws when the binary is missing or it does
    /// not come up (the test then fails, with the daemon's output in the message).
    func start(launcher: [String] = []) throws {
        guard FileManager.default.isExecutableFile(atPath: daemonURL.path) else {
            throw DaemonError.notBuilt(daemonURL.path)
        }
        FileManager.default.createFile(atPath: log, contents: nil)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        defer { try? out.close() }
        let p = Process()
        // `launcher`: a command to run it under (`ip netns exec NS`), which execs it in place.
        p.executableURL = launcher.isEmpty ? daemonURL : URL(fileURLWithPath: launcher[0])
        p.arguments = Array(launcher.dropFirst()) + (launcher.isEmpty ? [] : [daemonURL.path]) + ["--config", config, "--socket", socketPath]
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = out
        p.standardError = out
        try p.run()
        process = p
        // Up when a connect succeeds: the socket file appears at bind, a moment before listen,
        // and a file a killed daemon left is there all along (connect: ECONNREFUSED).
        let path = socketPath
        func accepts() -> Bool {
            let fd = DaemonTests.connectTo(path)
            if fd >= 0 { close(fd) }
            return fd >= 0
        }
        let up = waitUntil(timeout: 10) { accepts() || !p.isRunning }
        guard up, p.isRunning else {
            stopProcess(p)
            throw DaemonError.didNotStart(p.isRunning ? "no socket after 10 s" : "exited with \(p.terminationStatus)",
                                          output: (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
        }
    }

    /// The daemon's output so far, for failure messages.
    var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// Enrols `user` (bound to `uid`) with one default TOTP factor (SHA-1, 6 digits, 30 s).
    func enroll(_ user: String, uid: uid_t, secret: [UInt8]) throws {
        let s = try Store(path: Array(store.utf8))
        try s.write(user: Array(user.utf8), record: UserRecord(uid: UInt32(uid), factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: secret),
        ]))
    }

    /// `user`'s state (.state.USER) as the store reads it.
    func state(_ user: String) throws -> UserState {
        try Store(path: Array(store.utf8)).readState(user: Array(user.utf8))
    }

    func cleanup() {
        if let process { stopProcess(process) }
        process = nil
        removeTemporaryDirectory(root)
    }

    enum DaemonError: Error, CustomStringConvertible {
        case notBuilt(String)
        case didNotStart(String, output: String)
        var description: String {
            switch self {
            case .notBuilt(let path): return "pam-totpd is not built: \(path) (swift build --product pam-totpd, or set PAM_TOTPD)"
            case .didNotStart(let why, let output): return "pam-totpd did not start: \(why); its output:\n\(output)"
            }
        }
    }
}

func randomTOTPSecret() -> [UInt8] { (0..<20).map { _ in UInt8.random(in: 0...255) } }

/// The default factor's code for the current step, as typed.
func codeNow(_ secret: [UInt8]) throws -> String { String(decoding: try currentCode(secret), as: UTF8.self) }

/// A 6-digit code that none of the default factor's codes within 6 steps of now equals (so no
/// window setting can accept it by chance).
func codeOutsideWindow(_ secret: [UInt8]) throws -> String {
    let window = Set(try (-6...6).map { String(decoding: try currentCode(secret, offsetSteps: Int64($0)), as: UTF8.self) })
    while true {
        let candidate = String(format: "%06u", UInt32.random(in: 0..<1_000_000))
        if !window.contains(candidate) { return candidate }
    }
}
