import Foundation
import MFAPolicy
import MFAWire
import TestSupport
import XCTest

/// One daemon per socket (docs/ARCHITECTURE.md, section 5.2, `SocketClaim`): a second
/// pam-totpd on a socket a live one serves exits non-zero with one line naming the path and the
/// live daemon's pid, and the first keeps answering; a socket left by a SIGKILLed daemon is
/// replaced; two started at once leave exactly one serving; a socket systemd passes (and one
/// a listener without the lock serves) is never taken. The second daemon silently unlinked and
/// rebound the socket of the first, which was left running, unreachable (issue 35, item 6).
final class SocketClaimTests: XCTestCase {
    var daemon: DaemonFixture!

    override func setUpWithError() throws {
        try XCTSkipUnless(getuid() == 0, "pam-totpd runs as root")
        daemon = try DaemonFixture()
    }
    override func tearDown() { daemon?.cleanup() }

    /// One lookup for root at `path` (unenrolled in a fresh store); nil if nothing answered.
    func lookup(_ path: String) throws -> DaemonReply? {
        var o = ModuleOptions()
        o.store = Array(daemon.store.utf8)
        let frame = try XCTUnwrap(DaemonRequest(operation: .lookup, service: Array("claim-test".utf8), user: Array("root".utf8),
                                                options: o, answer: []).encoded())
        let fd = DaemonTests.connectTo(path)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard DaemonTests.send(fd, frame), let bytes = DaemonTests.readAll(fd, timeout: 5_000) else { return nil }
        return try? DaemonReply.decode(bytes)
    }

    /// A second daemon run to its end (10 s at most: `timeout` kills one that stays, exit 124).
    func runSecond(socket: String? = nil) throws -> CommandResult {
        try runCommand(["timeout", "10", daemonURL.path, "--config", daemon.config, "--socket", socket ?? daemon.socketPath])
    }

    /// The socket file's inode (0 if none): the same inode is the same bound socket.
    func inode(_ path: String) -> UInt64 {
        var st = stat()
        return lstat(path, &st) == 0 ? UInt64(st.st_ino) : 0
    }

    func assertOneLineNamingIt(_ r: CommandResult, pid: Int32?, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNotEqual(r.status, 0, "the second daemon exits non-zero", file: file, line: line)
        XCTAssertNotEqual(r.status, 124, "the second daemon exits by itself (it was still running after 10 s)", file: file, line: line)
        let lines = r.stderr.split(separator: "\n")
        XCTAssertEqual(lines.count, 1, "one line on stderr: \(r.stderr)", file: file, line: line)
        XCTAssertTrue(r.stderr.contains(daemon.socketPath), "names the socket: \(r.stderr)", file: file, line: line)
        if let pid { XCTAssertTrue(r.stderr.contains("pid \(pid)"), "names the live daemon's pid \(pid): \(r.stderr)", file: file, line: line) }
        XCTAssertEqual(r.stdout, "", file: file, line: line)
    }

    /// Daemon A serves; B on the same socket exits 1 with one line naming the socket and A's
    /// pid; A still answers, on the same socket file, and B left nothing behind.
    func testASecondDaemonOnALiveSocketExitsAndNamesTheFirst() throws {
        try daemon.start()
        let a = try XCTUnwrap(daemon.process)
        let path = daemon.socketPath
        // The socket file appears at bind, a moment before listen.
        XCTAssertTrue(waitUntil(timeout: 10) { (try? self.lookup(path)) == .outcome(.unenrolled) }, "A serves: \(daemon.output)")
        let before = inode(daemon.socketPath)
        let r = try runSecond()
        assertOneLineNamingIt(r, pid: a.processIdentifier)
        XCTAssertTrue(r.stderr.contains("already served"), r.stderr)
        XCTAssertTrue(a.isRunning, "A still runs: \(daemon.output)")
        XCTAssertEqual(inode(daemon.socketPath), before, "the socket file is still A's")
        XCTAssertEqual(try lookup(daemon.socketPath), .outcome(.unenrolled), "A still answers: \(daemon.output)")
        // Once more: a refused start changes nothing for the next one.
        assertOneLineNamingIt(try runSecond(), pid: a.processIdentifier)
        XCTAssertEqual(try lookup(daemon.socketPath), .outcome(.unenrolled), "A still answers: \(daemon.output)")
    }

    /// A killed with SIGKILL leaves its socket file (nobody accepting: ECONNREFUSED) and its
    /// lock file; C replaces the stale socket and serves. A restart after SIGTERM likewise.
    func testAKilledDaemonsStaleSocketIsReplaced() throws {
        try daemon.start()
        let a = try XCTUnwrap(daemon.process)
        kill(a.processIdentifier, SIGKILL)
        a.waitUntilExit()
        XCTAssertTrue(FileManager.default.fileExists(atPath: daemon.socketPath), "SIGKILL leaves the socket file")
        XCTAssertEqual(DaemonTests.connectTo(daemon.socketPath), -1, "nobody accepts on it")
        XCTAssertEqual(errno, ECONNREFUSED)
        try daemon.start()  // C
        let c = try XCTUnwrap(daemon.process)
        let path = daemon.socketPath
        XCTAssertTrue(waitUntil(timeout: 10) { (try? self.lookup(path)) == .outcome(.unenrolled) }, "C serves: \(daemon.output)")
        XCTAssertTrue(c.isRunning)
        XCTAssertFalse(daemon.output.contains("already served"), daemon.output)
        // A restart: SIGTERM, then a new daemon at once.
        kill(c.processIdentifier, SIGTERM)
        c.waitUntilExit()
        try daemon.start()
        XCTAssertTrue(waitUntil(timeout: 10) { (try? self.lookup(path)) == .outcome(.unenrolled) }, "the restarted daemon serves: \(daemon.output)")
        // And C's successor is protected like A was.
        assertOneLineNamingIt(try runSecond(), pid: daemon.process?.processIdentifier)
    }

    /// Two daemons started at the same moment on a fresh path, three times: exactly one stays
    /// and serves, the other exits non-zero with one line naming the socket.
    func testTwoDaemonsStartedAtOnceLeaveExactlyOne() throws {
        for round in 0..<3 {
            let log = daemon.root.appendingPathComponent("race\(round)").path
            var processes: [(Process, String)] = []
            var outputs: [FileHandle] = []
            defer { for out in outputs { try? out.close() } }
            for i in 0..<2 {
                _ = FileManager.default.createFile(atPath: log + "-\(i)", contents: nil)
                let out = try FileHandle(forWritingTo: URL(fileURLWithPath: log + "-\(i)"))
                outputs.append(out)
                let p = Process()
                p.executableURL = daemonURL
                p.arguments = ["--config", daemon.config, "--socket", daemon.socketPath]
                p.standardInput = FileHandle.nullDevice
                p.standardOutput = out
                p.standardError = out
                processes.append((p, log + "-\(i)"))
            }
            for (p, _) in processes { try p.run() }
            defer { for (p, _) in processes where p.isRunning { stopProcess(p) } }
            XCTAssertTrue(waitUntil(timeout: 10) { processes.contains { !$0.0.isRunning } }, "round \(round): one of the two exits")
            usleep(300_000)
            let running = processes.filter { $0.0.isRunning }
            let exited = processes.filter { !$0.0.isRunning }
            XCTAssertEqual(running.count, 1, "round \(round): exactly one daemon stays")
            XCTAssertEqual(exited.count, 1, "round \(round)")
            for (p, file) in exited {
                let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
                XCTAssertNotEqual(p.terminationStatus, 0, "round \(round): \(text)")
                XCTAssertEqual(text.split(separator: "\n").count, 1, "round \(round): one line: \(text)")
                XCTAssertTrue(text.contains(daemon.socketPath) && text.contains("already served"), "round \(round): \(text)")
                if let winner = running.first?.0 {
                    XCTAssertTrue(text.contains("pid \(winner.processIdentifier)"), "round \(round): names the winner: \(text)")
                }
            }
            let path = daemon.socketPath
            XCTAssertTrue(waitUntil(timeout: 10) { (try? self.lookup(path)) == .outcome(.unenrolled) }, "round \(round): the one left serves")
            for (p, _) in running { stopProcess(p) }
        }
    }

    /// systemd's socket (LISTEN_FDS): the activated daemon serves it and takes no lock, and a
    /// daemon started by hand on that path exits naming it (a listener that holds no lock is
    /// found by its connect) instead of unlinking systemd's socket.
    func testASocketSystemdServesIsNotTaken() throws {
        let path = daemon.socketPath
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(listener, 0)
        defer { close(listener) }
        var address = DaemonTests.unixAddress(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(bound, 0)
        XCTAssertEqual(listen(listener, 16), 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, listener, 3)
        let script = "LISTEN_PID=$$ LISTEN_FDS=1 exec '\(daemonURL.path)' --config '\(daemon.config)' --socket '\(path)'"
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sh"), strdup("-c"), strdup(script), nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        XCTAssertEqual(posix_spawn(&pid, "/bin/sh", &actions, nil, argv, environ), 0)
        defer { kill(pid, SIGTERM); var status: Int32 = 0; waitpid(pid, &status, 0) }
        XCTAssertEqual(try lookup(path), .outcome(.unenrolled), "the activated daemon answers")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".lock"), "an activated daemon takes no lock")
        let before = inode(path)
        // The listening socket was made by this test process: its pid is what SO_PEERCRED names.
        assertOneLineNamingIt(try runSecond(), pid: getpid())
        XCTAssertEqual(inode(path), before, "systemd's socket file is untouched")
        XCTAssertEqual(try lookup(path), .outcome(.unenrolled), "the activated daemon still answers")
    }

    /// Anything but a socket at the path, or a lock file someone else could write, is refused.
    func testWhatIsInTheWayIsRefused() throws {
        _ = FileManager.default.createFile(atPath: daemon.socketPath, contents: Data("x".utf8))
        var r = try runSecond()
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("is not a socket"), r.stderr)
        XCTAssertEqual(try String(contentsOfFile: daemon.socketPath, encoding: .utf8), "x", "left alone")
        XCTAssertEqual(unlink(daemon.socketPath), 0)
        XCTAssertEqual(chmod(daemon.socketPath + ".lock", 0o666), 0)
        r = try runSecond()
        XCTAssertNotEqual(r.status, 0)
        XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains(".lock"), r.stderr)
    }
}
