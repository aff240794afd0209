import Foundation

/// The result of running a command.
public struct CommandResult {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs `arguments[0]` (looked up in PATH) with the rest as arguments, feeding `input` on
/// stdin, and waits for it. Never throws for a non-zero exit: callers assert on `status`.
@discardableResult
public func runCommand(_ arguments: [String], input: String = "", environment: [String: String]? = nil) throws -> CommandResult {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = accountTools.contains(arguments.first ?? "") ? ["flock", accountLock] + arguments : arguments
    if let environment { p.environment = environment }
    // Files rather than pipes: no reader threads, no deadlock on large outputs.
    let dir = try makeTemporaryDirectory("run")
    defer { removeTemporaryDirectory(dir) }
    let inURL = dir.appendingPathComponent("in"), outURL = dir.appendingPathComponent("out"),
        errURL = dir.appendingPathComponent("err")
    try Data(input.utf8).write(to: inURL)
    FileManager.default.createFile(atPath: outURL.path, contents: nil)
    FileManager.default.createFile(atPath: errURL.path, contents: nil)
    let inHandle = try FileHandle(forReadingFrom: inURL)
    let outHandle = try FileHandle(forWritingTo: outURL), errHandle = try FileHandle(forWritingTo: errURL)
    defer { try? inHandle.close(); try? outHandle.close(); try? errHandle.close() }
    p.standardInput = inHandle
    p.standardOutput = outHandle
    p.standardError = errHandle
    try p.run()
    p.waitUntilExit()
    let out = try Data(contentsOf: outURL), err = try Data(contentsOf: errURL)
    return CommandResult(status: p.terminationStatus,
                         stdout: String(decoding: out, as: UTF8.self),
                         stderr: String(decoding: err, as: UTF8.self))
}

/// Account and group changes rewrite /etc/passwd, /etc/shadow and /etc/group under shadow's lock,
/// which another holder makes them wait for and then give up on; test classes run side by side
/// (scripts/run-tests.py), so each such command takes its turn under one lock file first.
private let accountTools: Set<String> = ["useradd", "userdel", "usermod", "groupadd", "groupdel", "groupmod", "chpasswd", "gpasswd"]
private let accountLock = "/tmp/pam_totp_tests.accounts.lock"

/// The package root (Tests/TestSupport/Support.swift is two levels below it).
public let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// A fresh 0700 directory under /tmp, removed by the caller with `removeTemporaryDirectory`.
public func makeTemporaryDirectory(_ prefix: String = "pam_totp_test") throws -> URL {
    var template = Array((NSTemporaryDirectory() + "/" + prefix + ".XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
    return URL(fileURLWithPath: String(cString: made))
}

/// A temporary directory holding an empty store directory `store` (0700): the directory (to
/// remove) and the store's path.
public func makeTemporaryStoreDirectory() throws -> (root: URL, store: String) {
    let root = try makeTemporaryDirectory()
    let store = root.appendingPathComponent("store").path
    guard mkdir(store, 0o700) == 0 else { removeTemporaryDirectory(root); throw POSIXError(.EIO) }
    return (root, store)
}

public func removeTemporaryDirectory(_ url: URL) {
    try? FileManager.default.removeItem(at: url)
}

/// A deterministic generator for test inputs (SplitMix64).
public struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE5_E4B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

public func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}

public var isRoot: Bool { geteuid() == 0 }
