import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Nobody can starve pam-totpd (docs/ARCHITECTURE.md, section 5.2): one account's stuck store
/// lock delays only that account, a user's subordinate uids count as that user, and the log
/// lines a caller can cause are bounded. Each test replays a review's attack; needs root.
final class DaemonStarvationTests: XCTestCase {
    var daemon: DaemonFixture!
    var capture: SyslogCapture?
    var accounts: [ThrowawayAccount] = []

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "makes accounts, binds the syslog socket and runs pam-totpd as root")
        daemon = try DaemonFixture()
    }

    override func tearDown() {
        daemon?.cleanup()
        _ = capture?.stop()
        capture = nil
        for a in accounts { a.delete() }
        accounts = []
    }

    func account(_ prefix: String) throws -> ThrowawayAccount {
        let a = try ThrowawayAccount(prefix: prefix)
        accounts.append(a)
        return a
    }

    func frame(_ op: DaemonOperation, user: String, answer: String = "") throws -> String {
        var o = ModuleOptions()
        o.store = Array(daemon.store.utf8)
        let bytes = try XCTUnwrap(DaemonRequest(operation: op, service: Array("starve".utf8), user: Array(user.utf8),
                                                options: o, answer: Array(answer.utf8)).encoded())
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// Runs python3 `script` as `account` with `arguments`, in the background.
    func python(_ account: ThrowawayAccount, _ script: String, _ arguments: [String], prefix: [String] = []) throws -> (Process, Pipe) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        p.arguments = ["--reuid", "\(account.uid)", "--regid", "\(account.gid)", "--clear-groups"] + prefix
            + ["/usr/bin/python3", "-c", script] + arguments
        let out = Pipe()
        p.standardOutput = out
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return (p, out)
    }

    /// A stopped su (or sudo, or totp-enroll) of user A held A's store lock; A's 8 allowed
    /// requests then each waited 5 s for it on all 4 workers, and other users' screen unlocks
    /// timed out (3 of 3 failed after 6.6-7.3 s). Each account now has at most one worker at a
    /// time: B is answered at normal latency while A's requests wait.
    func testOneAccountsStuckLockDelaysOnlyThatAccount() throws {
        try daemon.start()
        let a = try account("totpstuck"), b = try account("totpother")
        try daemon.enroll(a.name, uid: a.uid, secret: randomTOTPSecret())
        try daemon.enroll(b.name, uid: b.uid, secret: randomTOTPSecret())
        // A's lock, held as a stopped set-uid process would hold it.
        let store = try Store(path: Array(daemon.store.utf8))
        try store.withLock(user: Array(a.name.utf8)) { () throws(MFAError) in }
        let lockFD = open(daemon.store + "/.lock." + a.name, O_RDWR | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(lockFD, 0)
        defer { close(lockFD) }
        XCTAssertEqual(flock(lockFD, LOCK_EX), 0)
        let flood = """
            import socket, sys, threading
            frame = bytes.fromhex(sys.argv[2])
            def run():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1]); s.sendall(frame); s.settimeout(15)
                try: s.recv(4096)
                except OSError: pass
            threads = [threading.Thread(target=run) for _ in range(8)]
            for t in threads: t.start()
            for t in threads: t.join()
            """
        let (stuck, _) = try python(a, flood, [daemon.socketPath, try frame(.authenticate, user: a.name, answer: "000000")])
        defer { stuck.terminate(); stuck.waitUntilExit() }
        usleep(500_000)
        let timed = """
            import socket, sys, time
            frame = bytes.fromhex(sys.argv[2])
            for _ in range(3):
                t = time.monotonic()
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1]); s.sendall(frame); s.settimeout(10)
                reply = s.recv(4096)
                print("%.3f %d" % (time.monotonic() - t, len(reply)), flush=True)
                s.close()
            """
        let (other, out) = try python(b, timed, [daemon.socketPath, try frame(.lookup, user: b.name)])
        other.waitUntilExit()
        let lines = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
        print("another user's requests while A's lock was stuck (seconds, reply bytes): \(lines)")
        XCTAssertEqual(lines.count, 3, "B got no reply: \(lines)\n\(daemon.output)")
        for line in lines {
            let f = line.split(separator: " ")
            XCTAssertLessThan(Double(f.first ?? "") ?? 99, 1.0, "B waited behind A's stuck lock: \(lines)")
            XCTAssertGreaterThan(Int(f.last ?? "") ?? 0, 0, "B got an empty reply: \(lines)")
        }
    }

    /// Debian's useradd gives each user 65,536 subordinate uids; with newuidmap (uidmap:
    /// rootless containers) one user appeared to pam-totpd as many uids (SO_PEERCRED) and so
    /// got 64 connections per subordinate uid. Each is now charged to the user it belongs to:
    /// 80 connections from two of a user's subordinate uids get that user's 64.
    func testSubordinateUIDsCountAsTheirUser() throws {
        try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: "/usr/bin/newuidmap"),
                          "newuidmap is missing: make check installs uidmap")
        try daemon.start()
        let a = try account("totpsubuid")
        // A range of its own (useradd may have given one already: either is the user's).
        let add = try runCommand(["usermod", "--add-subuids", "420000-420099", "--add-subgids", "420000-420099", a.name])
        XCTAssertEqual(add.status, 0, add.stderr)
        let script = """
            import os, select, socket, sys, time
            r, w = os.pipe()
            kids = []
            for inner in (1, 2):
                pid = os.fork()
                if pid == 0:
                    os.setgid(inner); os.setuid(inner)
                    held = []
                    for _ in range(40):
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1]); held.append(s)
                    time.sleep(1.0)
                    closed = sum(1 for s in held if select.select([s], [], [], 0)[0] and s.recv(1) == b"")
                    os.write(w, b"%d\\n" % closed)
                    time.sleep(1.0)
                    os._exit(0)
                kids.append(pid)
            total = 0
            for _ in kids:
                line = b""
                while not line.endswith(b"\\n"): line += os.read(r, 1)
                total += int(line)
            print(total, flush=True)
            for k in kids: os.waitpid(k, 0)
            """
        let (p, out) = try python(a, script, [daemon.socketPath],
                                  prefix: ["/usr/bin/unshare", "--user", "--map-root-user",
                                           "--map-users=420000,1,100", "--map-groups=420000,1,100"])
        p.waitUntilExit()
        let closed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertEqual(closed, "16", "80 connections from uids 420000 and 420001, both the user's: the 16 beyond 64 are closed")
    }

    /// One user sending malformed frames from 4 processes produced 205,000-250,000 syslog
    /// lines in 10 s. Lines a caller other than root causes are now bounded per uid per minute.
    func testACallersLogLinesAreBounded() throws {
        let root = URL(fileURLWithPath: daemon.root.path)
        capture = try SyslogCapture(scratch: root)
        try daemon.start(launcher: capture?.wrap([]) ?? [])
        let a = try account("totplogs")
        let flood = """
            import os, socket, sys, time
            for _ in range(3): os.fork()
            stop = time.time() + 3
            while time.time() < stop:
                try:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])
                    s.sendall(b"GARBAGE GARBAGE GARBAGE"); s.close()
                except OSError: pass
            """
        let (p, _) = try python(a, flood, [daemon.socketPath])
        p.waitUntilExit()
        usleep(300_000)
        let lines = capture?.stop() ?? []
        let malformed = lines.filter { $0.contains("malformed request") }
        XCTAssertGreaterThan(malformed.count, 0, "the flood was not logged at all: \(lines.suffix(5))")
        XCTAssertLessThanOrEqual(malformed.count, 20 + 20, "one user's 3 s of garbage: \(malformed.count) lines")
        XCTAssertLessThanOrEqual(lines.count, 300 + 1 + 10, "in all: \(lines.count) lines")
    }
}
