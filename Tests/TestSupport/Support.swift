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
    // Files rather than pipes: no reader threads, no deadlock on large outputs.
    let dir = try makeTemporaryDirectory("run")
    defer { removeTemporaryDirectory(dir) }
    let inURL = dir.appendingPathComponent("in"), outURL = dir.appendingPathComponent("out"),
        errURL = dir.appendingPathComponent("err")
    try Data(input.utf8).write(to: inURL)
    let inFD = open(inURL.path, O_RDONLY | O_CLOEXEC)
    let outFD = open(outURL.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    let errFD = open(errURL.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    defer { for fd in [inFD, outFD, errFD] where fd >= 0 { close(fd) } }
    guard inFD >= 0, outFD >= 0, errFD >= 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
    let command = accountTools.contains(arguments.first ?? "") ? ["flock", "-w", "120", accountLock] + arguments : arguments
    // Reaped here, not by Foundation's Process (SpawnedProcess says why).
    let p = SpawnedProcess()
    try p.run(["/usr/bin/env"] + command, stdin: inFD, stdout: outFD, stderr: errFD, environment: environment)
    p.waitUntilExit()
    let out = try Data(contentsOf: outURL), err = try Data(contentsOf: errURL)
    return CommandResult(status: p.terminationStatus,
                         stdout: String(decoding: out, as: UTF8.self),
                         stderr: String(decoding: err, as: UTF8.self))
}

/// Account and group changes rewrite /etc/passwd, /etc/shadow and /etc/group under shadow's lock,
/// which another holder makes them wait for and then give up on; test classes run side by side
/// (scripts/run-tests.py), so each such command takes its turn under one lock file first.
private let accountTools: Set<String> = ["useradd", "userdel", "usermod", "groupadd", "groupdel", "groupmod", "chpasswd", "gpasswd", "passwd"]
private let accountLock = "/run/pam_totp_tests.accounts.lock"

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

/// A child process started with posix_spawn and reaped with waitpid by its owner alone: the
/// members of Foundation's Process a test uses, without its shared exit monitor (which, with
/// test classes running side by side, once missed a child's exit: the child stayed a zombie and
/// waitUntilExit never returned).
public final class SpawnedProcess {
    public private(set) var processIdentifier: pid_t = 0
    private var status: Int32?

    public init() {}

    /// Starts `arguments` (argv[0] a path) with standard input, output and error on `fd`.
    public func run(_ arguments: [String], stdio fd: Int32) throws {
        try run(arguments, stdin: fd, stdout: fd, stderr: fd)
    }

    /// Starts `arguments` (argv[0] a path) on these descriptors, with `environment` (else this
    /// process's); every other descriptor is closed in the child.
    public func run(_ arguments: [String], stdin: Int32, stdout: Int32, stderr: Int32, environment: [String: String]? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (source, target) in [(stdin, Int32(0)), (stdout, 1), (stderr, 2)] { posix_spawn_file_actions_adddup2(&actions, source, target) }
        let open = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap { Int32($0) }
        for other in open where other > 2 && fcntl(other, F_GETFD) >= 0 { posix_spawn_file_actions_addclose(&actions, other) }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var envp: [UnsafeMutablePointer<CChar>?] = (environment ?? ProcessInfo.processInfo.environment)
            .map { strdup($0.key + "=" + $0.value) } + [nil]
        defer { for p in envp { free(p) } }
        // As Foundation's Process: the child starts with no signal blocked and every signal's
        // default action (an ignored SIGINT, as a background shell leaves it, would make Ctrl-C
        // on a terminal do nothing).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let rc = posix_spawn(&processIdentifier, arguments[0], &actions, &attributes, &argv, &envp)
        guard rc == 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(rc)) }
    }

    public var isRunning: Bool {
        guard status == nil, processIdentifier > 0 else { return false }
        var s: Int32 = 0
        let r = waitpid(processIdentifier, &s, WNOHANG)
        if r == processIdentifier { status = s; return false }
        if r < 0 && errno == ECHILD { status = Self.lost; return false }
        return true
    }

    public func waitUntilExit() {
        guard status == nil, processIdentifier > 0 else { return }
        var s: Int32 = 0
        var r: pid_t
        repeat { r = waitpid(processIdentifier, &s, 0) } while r < 0 && errno == EINTR
        status = r == processIdentifier ? s : Self.lost
    }

    /// What a child reaped by someone else reads as: ended by SIGKILL (never a success).
    private static let lost: Int32 = SIGKILL

    public func terminate() { if isRunning { kill(processIdentifier, SIGTERM) } }

    /// The exit status, or the signal that ended it (as Foundation's Process says); -1 while running.
    public var terminationStatus: Int32 {
        guard let s = status else { return -1 }
        return (s & 0x7f) == 0 ? (s >> 8) & 0xff : s & 0x7f
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice: test classes run
/// side by side, so a port made from the pid could be another's).
public func freeTCPPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    guard bound == 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
    let named = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    guard named == 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// A shell function, `copy_tree SRC DST` (cp -a), for copying a system directory that other test
/// classes change at the same time: a file removed between cp's listing and its copy is no
/// error; any other failure is.
public let copyTreeShell = """
    copy_tree() { [ -d "$1" ] || return 1; cp -a "$1" "$2" 2>"$2.cp-errors" || ! grep -v 'No such file or directory' "$2.cp-errors" >&2; rm -f "$2.cp-errors"; }

    """
