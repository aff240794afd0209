import CPAM
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Log hygiene, out of process: pamtester runs the module with `debug` through a realistic
/// sequence (valid, replayed and wrong codes, recovery codes raw and grouped, a wrong recovery
/// code, an unenrolled user, nullok, a configuration file with an unknown key) while the test
/// listens on the syslog socket. No captured syslog line and no pamtester output may contain
/// a secret (Base32 upper/lower/grouped, hex) or any code the user typed or could have typed.
///
/// Capturing: the module logs via pam_syslog → syslog(3) → the AF_UNIX datagram socket
/// /dev/log. If /dev/log does not exist (no syslog daemon: containers, CI), the test binds its
/// own socket there for the duration of the test and removes it in tearDown. If it exists (a
/// real syslog daemon), the test never touches it: it binds a socket in a temporary directory
/// and runs pamtester in a private mount namespace where that socket is bind-mounted over
/// /dev/log (`unshare --mount`). Needs root, like the other pamtester tests.
final class LogHygieneTests: XCTestCase {
    var root: URL!
    var store: URL!
    var capture: SyslogCapture?
    var services: [String] = []
    /// Letters only (from the pid), so no digit run in a user or service name can look like a code.
    let tag = "lh" + String(String(getpid()).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(String($0))!)) })

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs service files in /etc/pam.d and the test binds the syslog socket (run as root)")
        root = try makeTemporaryDirectory("pam_totp_loghygiene")
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        capture = try SyslogCapture(scratch: root)
    }

    override func tearDown() {
        _ = capture?.stop()  // always: closes the socket and removes /dev/log if it is ours
        capture = nil
        for s in services { unlink("/etc/pam.d/" + s) }
        services = []
        if let root { removeTemporaryDirectory(root) }
    }

    func writeService(_ name: String, _ lines: [String]) throws {
        let full = tag + "_" + name
        services.append(full)
        try (lines.joined(separator: "\n") + "\n").write(toFile: "/etc/pam.d/" + full, atomically: true, encoding: .utf8)
    }

    /// pamtester SERVICE USER authenticate, with `answer` on stdin; inside the private mount
    /// namespace when the capture needs it.
    func pamtester(_ service: String, _ user: String, answer: String) throws -> CommandResult {
        guard let capture else { throw XCTSkip("no capture") }
        return try runCommand(capture.wrap(["pamtester", tag + "_" + service, user, "authenticate"]), input: answer + "\n")
    }

    /// A group look-up that fails without asking for more room (getgrouplist returning -1 with
    /// errno set: the module found no such function, or NSS failed) is denied and logged with
    /// its own errno. It was logged as "errno 34" (too small), a misleading line for an admin.
    /// The failure is made by a preloaded getgrouplist, which the module's import binds to
    /// before libc's.
    func testAFailedGroupLookUpIsLoggedWithItsOwnError() throws {
        guard let capture else { throw XCTSkip("no capture") }
        let source = root.appendingPathComponent("nogroups.c")
        try "#include <errno.h>\n#include <grp.h>\nint getgrouplist(const char *u, gid_t g, gid_t *l, int *n) { errno = ENOSYS; return -1; }\n"
            .write(to: source, atomically: true, encoding: .utf8)
        let preload = root.appendingPathComponent("nogroups.so").path
        let cc = try runCommand(["gcc", "-shared", "-fPIC", "-o", preload, source.path])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        let configFile = root.appendingPathComponent("pam_totp.conf")
        try "[group nogroup]\nnullok = no\n".write(to: configFile, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(configFile.path, 0o644), 0)
        XCTAssertEqual(chown(configFile.path, 0, 0), 0)
        try writeService("groups", ["auth required \(moduleURL.path) config=\(configFile.path) store=\(store.path)"])
        let r = try runCommand(capture.wrap(["env", "LD_PRELOAD=" + preload, "pamtester", tag + "_groups", "nobody", "authenticate"]),
                               input: "000000\n")
        XCTAssertNotEqual(r.status, 0, "a failed group look-up must deny: \(r.stdout) \(r.stderr)")
        let ours = capture.stop().filter { $0.contains(tag) }
        XCTAssertTrue(ours.contains { $0.contains("getgrouplist failed (errno \(ENOSYS))") },
                      "expected the look-up's own errno; captured:\n" + ours.joined(separator: "\n"))
        XCTAssertFalse(ours.contains { $0.contains("errno \(ERANGE)") }, ours.joined(separator: "\n"))
    }

    func testDebugLogAndOutputNeverContainSecretsOrCodes() throws {
        let started = Date()
        let alice = tag + "alice", carol = tag + "carol", dave = tag + "dave"
        var rng = SplitMix64(seed: UInt64(time(nil)))
        let phoneSecret = Secret.generate(for: .sha1, using: &rng)
        let tabletSecret = Secret.generate(for: .sha256, using: &rng)
        let tablet = try OTPParameters(algorithm: .sha256, digits: 8, period: 30)
        let (recoveryCodes, recoverySet) = RecoverySet.generate(count: 3, iterations: 1_000, using: &rng)
        let s = try Store(path: Array(store.path.utf8))
        try s.write(user: Array(alice.utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: phoneSecret),
            try Factor(label: Array("tablet".utf8), parameters: tablet, created: 1_700_000_000, secret: tabletSecret),
        ], recovery: recoverySet))

        let configFile = root.appendingPathComponent("pam_totp.conf")
        try "# pam_totp test configuration\nadjacent_intervals = 3\nfrobnicate = 1\n"
            .write(to: configFile, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(configFile.path, 0o644), 0)
        XCTAssertEqual(chown(configFile.path, 0, 0), 0)

        let module = moduleURL.path
        try writeService("main", ["auth required \(module) store=\(store.path) debug"])
        try writeService("conf", ["auth required \(module) config=\(configFile.path) store=\(store.path) debug"])
        try writeService("nullok", ["auth sufficient \(module) store=\(store.path) debug nullok",
                                    "auth required pam_permit.so"])

        awayFromStepBoundary(margin: 4)
        func code(_ secret: [UInt8], _ p: OTPParameters = .default, _ offset: Int64) throws -> String {
            String(decoding: try currentCode(secret, p, offsetSteps: offset), as: UTF8.self)
        }
        let phoneNow = try code(phoneSecret, .default, 0)
        let phoneNext = try code(phoneSecret, .default, 1)
        let phoneLater = try code(phoneSecret, .default, 2)
        let tabletNow = try code(tabletSecret, tablet, 0)
        // Codes that are wrong for every factor in the whole ±5 window.
        let window = try Set((-6...6).flatMap { o in [try code(phoneSecret, .default, Int64(o)),
                                                     try code(tabletSecret, tablet, Int64(o))] })
        let wrong = (0..<1000).lazy.map { String(format: "%06d", ($0 * 7919 + 104_729) % 1_000_000) }
            .first { c in !window.contains(where: { w in w.hasSuffix(c) }) }!
        let recovery = recoveryCodes.map { String(decoding: $0, as: UTF8.self) }
        let wrongRecovery = "314159265358"
        XCTAssertFalse(recovery.contains(wrongRecovery))
        func dashed(_ c: String, _ size: Int, _ sep: String = "-") -> String {
            stride(from: 0, to: c.count, by: size).map { i -> String in
                let a = c.index(c.startIndex, offsetBy: i), b = c.index(a, offsetBy: min(size, c.count - i))
                return String(c[a..<b])
            }.joined(separator: sep)
        }

        // The run. Failures cost pamtester's 2 s pam_fail_delay each: 5 failures here.
        var outputs: [(String, CommandResult)] = []
        func run(_ what: String, _ service: String, _ user: String, _ answer: String, ok: Bool) throws {
            let r = try pamtester(service, user, answer: answer)
            XCTAssertEqual(r.status == 0, ok, "\(what): status \(r.status)\n\(r.stdout)\(r.stderr)")
            XCTAssertTrue((r.stdout + r.stderr).contains("pamtester"), "\(what): pamtester did not run: \(r.stdout)\(r.stderr)")
            outputs.append((what, r))
        }
        try run("valid phone code", "main", alice, phoneNow, ok: true)
        try run("replayed phone code", "main", alice, phoneNow, ok: false)
        try run("valid tablet code", "main", alice, tabletNow, ok: true)
        try run("wrong code", "main", alice, wrong, ok: false)
        try run("recovery code, dash-grouped", "main", alice, dashed(recovery[0], 4), ok: true)
        try run("recovery code, raw", "main", alice, recovery[1], ok: true)
        try run("wrong recovery code", "main", alice, dashed(wrongRecovery, 4), ok: false)
        try run("unenrolled user", "main", carol, phoneNext, ok: false)
        try run("unenrolled user, nullok", "nullok", dave, phoneLater, ok: true)
        try run("configuration error", "conf", alice, phoneNext, ok: false)

        guard let capture else { return XCTFail("no capture") }
        let lines = capture.stop()
        self.capture = nil
        let elapsed = Date().timeIntervalSince(started)

        // Everything that must never appear.
        var forbidden: [String] = []
        for secret in [phoneSecret, tabletSecret] {
            let b32 = Base32.encodeString(secret)
            let half = String(b32.prefix(b32.count / 2)), tail = String(b32.suffix(b32.count / 2))
            for t in [b32, Base32.encodeString(secret, padding: true), dashed(b32, 4, " "), half, tail, hex(secret)] {
                forbidden += [t.uppercased(), t.lowercased()]
            }
        }
        for c in [phoneNow, phoneNext, phoneLater, tabletNow, String(tabletNow.suffix(6)), wrong] { forbidden.append(c) }
        for c in recovery + [wrongRecovery] {
            forbidden += [c, dashed(c, 4), dashed(c, 4, " "), dashed(c, 3), dashed(c, 6), String(c.prefix(6)), String(c.suffix(6))]
        }
        func leaks(_ text: String) -> [String] {
            // The only digits a line may carry besides codes: a "[pid]" from LOG_PID. Masked.
            let masked = text.replacingOccurrences(of: #"\[[0-9]+\]"#, with: "[pid]", options: .regularExpression)
            return Set(forbidden).filter { masked.contains($0) }.sorted()
        }

        // Not vacuous: lines were captured, and they are the expected events for these users.
        let ours = lines.filter { $0.contains(tag) }
        XCTAssertFalse(ours.isEmpty, "nothing captured from the module; all captured lines: \(lines)")
        let expected = [
            "accepted code for user \(alice) (factor phone)",
            "replayed code for user \(alice) (1 consecutive failures)",
            "accepted code for user \(alice) (factor tablet)",
            "wrong code for user \(alice) (1 consecutive failures)",
            "accepted a recovery code for user \(alice) (2 left)",
            "accepted a recovery code for user \(alice) (1 left)",
            "denied user \(carol): not enrolled",
            "user \(dave) has no factor; nullok",
            "configuration error: \(configFile.path):3: unknown or malformed setting: frobnicate=1",
        ]
        for e in expected {
            XCTAssertTrue(ours.contains { $0.contains(e) }, "missing log line \"\(e)\"; captured:\n" + ours.joined(separator: "\n"))
        }
        XCTAssertEqual(ours.filter { $0.contains("wrong code for user \(alice) (1 consecutive failures)") }.count, 2,
                       "the wrong TOTP code and the wrong recovery code")
        // pam_syslog's prefix: the module file's name without ".so", then (service:auth).
        let moduleName = moduleURL.deletingPathExtension().lastPathComponent
        XCTAssertTrue(ours.allSatisfy { $0.contains(": \(moduleName)(\(tag)_") }, "lines come from pam_syslog with the service name")

        for line in lines {
            XCTAssertEqual(leaks(line), [], "syslog line leaks: \(line)")
        }
        for (what, r) in outputs {
            XCTAssertEqual(leaks(r.stdout), [], "\(what): pamtester stdout leaks: \(r.stdout)")
            XCTAssertEqual(leaks(r.stderr), [], "\(what): pamtester stderr leaks: \(r.stderr)")
        }
        // The detector itself works: a line with a code or secret would have been caught.
        XCTAssertEqual(leaks("x " + phoneNow + " y"), [phoneNow])
        XCTAssertFalse(leaks("k=" + Base32.encodeString(phoneSecret).lowercased()).isEmpty)
        print(ours.joined(separator: "\n"))
        print("LogHygieneTests: \(lines.count) syslog lines captured (\(ours.count) from this test, mode \(capture.modeDescription)) in \(String(format: "%.1f", elapsed)) s")
    }
}

/// Listens on a syslog socket in a background thread and collects every datagram. The
/// reader must run concurrently: the kernel queues only net.unix.max_dgram_qlen (often 10)
/// datagrams, and syslog(3) blocks when the queue is full.
final class SyslogCapture: @unchecked Sendable {
    enum Mode { case devLog, namespace(String) }
    let mode: Mode
    private let fd: Int32
    private var boundInode: (dev: UInt64, ino: UInt64)?
    private let lock = NSLock()
    private var collected: [String] = []
    private var stopping = false
    private var stopped = false
    private let finished = DispatchSemaphore(value: 0)

    var modeDescription: String {
        switch mode {
        case .devLog: return "/dev/log"
        case .namespace(let path): return "private mount namespace, \(path) bound over /dev/log"
        }
    }

    init(scratch: URL) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CaptureError("socket: errno \(errno)") }
        var st = stat()
        var chosen: Mode
        if lstat("/dev/log", &st) != 0 && errno == ENOENT, Self.bind(fd, "/dev/log") == 0 {
            chosen = .devLog
            if stat("/dev/log", &st) == 0 { boundInode = (UInt64(st.st_dev), UInt64(st.st_ino)) }
        } else {
            // A syslog socket exists (or appeared): leave it alone, use a private namespace.
            let path = scratch.appendingPathComponent("log.sock").path
            guard Self.bind(fd, path) == 0 else {
                let e = errno
                close(fd)
                throw CaptureError("bind \(path): errno \(e)")
            }
            guard (try? runCommand(["unshare", "--version"]))?.status == 0 else {
                close(fd)
                throw CaptureError("/dev/log exists and unshare(1) is missing: cannot capture without touching the system logger")
            }
            chosen = .namespace(path)
        }
        mode = chosen
        var tv = timeval(tv_sec: 0, tv_usec: 50_000)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var size: Int32 = 1 << 20
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        let t = Thread { [self] in self.readLoop() }
        t.start()
    }

    private static func bind(_ fd: Int32, _ path: String) -> Int32 {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { errno = ENAMETOOLONG; return -1 }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
            raw[bytes.count] = 0
        }
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if r == 0 { chmod(path, 0o666) }
        return r
    }

    private func readLoop() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            lock.lock(); let stop = stopping; lock.unlock()
            if stop { break }
            receive(into: &buffer, flags: 0)
        }
        // Drain what is queued, without blocking.
        while receive(into: &buffer, flags: Int32(MSG_DONTWAIT)) {}
        finished.signal()
    }

    /// One datagram into `collected`; false when nothing was queued.
    @discardableResult
    private func receive(into buffer: inout [UInt8], flags: Int32) -> Bool {
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, flags) }
        guard n > 0 else { return false }
        let text = String(decoding: buffer[0..<n], as: UTF8.self)
        lock.lock(); collected.append(text.trimmingCharacters(in: .newlines)); lock.unlock()
        return true
    }

    /// Wraps a command so that its syslog(3) reaches this socket.
    func wrap(_ command: [String]) -> [String] {
        switch mode {
        case .devLog:
            return command
        case .namespace(let path):
            return ["/usr/bin/unshare", "--mount", "--propagation", "private", "sh", "-c",
                    "mount --bind \"$0\" /dev/log && exec \"$@\"", path] + command
        }
    }

    /// Stops the reader, closes the socket, removes /dev/log if it is still this socket, and
    /// returns every line received. Idempotent.
    func stop() -> [String] {
        lock.lock()
        let already = stopped
        stopping = true
        stopped = true
        lock.unlock()
        if !already {
            finished.wait()
            close(fd)
            if case .devLog = mode, let bound = boundInode {
                var st = stat()
                if lstat("/dev/log", &st) == 0, UInt64(st.st_dev) == bound.dev, UInt64(st.st_ino) == bound.ino {
                    unlink("/dev/log")
                }
            }
        }
        lock.lock(); defer { lock.unlock() }
        return collected
    }

    deinit { _ = stop() }
}

struct CaptureError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
