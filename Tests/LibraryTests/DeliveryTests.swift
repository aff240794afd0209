import Foundation
import MFADaemon
import MFAImport
import MFAPamStacks
import MFASystem
import TestSupport
import XCTest

/// pam-totpd's delivery runner (issue 19, "Delivery"): real programs run as a throwaway system
/// account, what they saw recorded by themselves, and the examples in docs/examples run against
/// real peers (msmtp to an SMTP server on 127.0.0.1, curl to an HTTP server on 127.0.0.1).
final class DeliveryTests: XCTestCase {
    /// The account the senders run as (useradd -r, its own group, no other), made once.
    nonisolated(unsafe) static var account: (name: String, uid: UInt32, gid: UInt32)? = nil
    nonisolated(unsafe) static var accountError: String? = nil

    var dir: URL!

    override class func setUp() {
        super.setUp()
        for _ in 0..<5 {
            let name = "pamtotpdlv\(getpid() % 100000)x\(UInt16.random(in: 0...999))"
            guard let add = try? runCommand(["useradd", "-r", "-M", "-U", "-s", "/usr/sbin/nologin", name]) else { break }
            if add.status == 9 { continue }  // name in use
            guard add.status == 0, let pw = getpwnam(name) else { accountError = "useradd: \(add.stderr)"; return }
            account = (name, pw.pointee.pw_uid, pw.pointee.pw_gid)
            return
        }
        accountError = "no useradd"
    }

    override class func tearDown() {
        if let account { _ = try? runCommand(["userdel", account.name]) }
        account = nil
        super.tearDown()
    }

    override func setUpWithError() throws {
        guard geteuid() == 0 else { throw XCTSkip("the delivery runner changes uid: run as root") }
        guard Self.account != nil else { return XCTFail("no account for the senders: \(Self.accountError ?? "?")") }
        dir = try makeTemporaryDirectory("delivery")
        // The account must reach the programs and the spool: the directory is root's, 0755.
        XCTAssertEqual(chmod(dir.path, 0o755), 0)
    }

    override func tearDown() {
        if let dir { removeTemporaryDirectory(dir) }
        super.tearDown()
    }

    var uid: UInt32 { Self.account?.uid ?? 65534 }
    var gid: UInt32 { Self.account?.gid ?? 65534 }

    /// A root-owned 0755 script in the test's directory.
    func script(_ name: String, _ text: String) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chmod(path, 0o755), 0)
        return path
    }

    /// An empty file the account may append to.
    func spool(_ name: String = "spool") throws -> String {
        let path = dir.appendingPathComponent(name).path
        try Data().write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chown(path, uid, gid), 0)
        return path
    }

    /// Runs `program` as pam-totpd does; the kind is "email" for an address, else "sms".
    func run(_ program: String, _ destination: String, _ message: String, timeout: Int = 10_000,
             uid: UInt32? = nil, gid: UInt32? = nil, kind: String? = nil) -> DeliveryResult {
        deliver(program: Array(program.utf8), kind: Array((kind ?? (destination.contains("@") ? "email" : "sms")).utf8),
                destination: Array(destination.utf8), message: Array(message.utf8),
                uid: uid ?? self.uid, gid: gid ?? self.gid, timeoutMilliseconds: timeout)
    }

    func read(_ path: String) throws -> String { try String(decoding: Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self) }

    /// Processes of `uid` that are not zombies (/proc/PID/status: Uid, State).
    func liveProcesses(of uid: UInt32) -> [String] {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { $0.allSatisfy(\.isNumber) } ?? []
        return pids.filter { pid in
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
            let lines = status.split(separator: "\n")
            let state = lines.first { $0.hasPrefix("State:") } ?? ""
            let uids = lines.first { $0.hasPrefix("Uid:") }?.split(whereSeparator: { $0 == "\t" || $0 == " " }) ?? []
            return !state.contains("Z") && uids.count > 1 && uids[1] == "\(uid)"
        }
    }

    /// SIGKILL to every process of `uid`, and a wait until none is left.
    func killAll(of uid: UInt32) {
        for _ in 0..<40 {
            let left = liveProcesses(of: uid)
            if left.isEmpty { return }
            for pid in left { if let p = Int32(pid) { kill(p, SIGKILL) } }
            usleep(50_000)
        }
    }

    // MARK: - What the program gets

    /// The spool sender records what it was given, as whom, with what around it.
    static let recordingSender = """
        #!/bin/sh
        spool=SPOOL
        {
            printf 'argc=%s\\n' "$#"
            printf 'cmdline=%s\\n' "$(tr '\\0' ' ' < /proc/$$/cmdline)"
            printf 'uid=%s\\n' "$(id -u)"
            printf 'gid=%s\\n' "$(id -g)"
            printf 'groups=%s\\n' "$(id -G)"
            printf 'cwd=%s\\n' "$(pwd)"
            printf 'umask=%s\\n' "$(umask)"
            grep -E '^(SigBlk|SigIgn|CapEff|CapPrm):' /proc/self/status
            printf 'ids=%s %s\\n' "$$" "$(cut -d ' ' -f 5,6 /proc/$$/stat)"
            echo '--environ'
            tr '\\0' '\\n' < /proc/$$/environ
            echo '--fds'
            ls /proc/self/fd
            echo '--stdin'
            cat
            echo
            echo '--end'
        } >> "$spool"
        """

    func testTheProgramRunsAsTheAccountWithOnlyItsEnvironmentAndInput() throws {
        let spool = try spool()
        let sender = try script("sender", Self.recordingSender.replacingOccurrences(of: "SPOOL", with: spool))
        // What the daemon may have that the program must not inherit: supplementary groups, a
        // descriptor without close-on-exec, an ignored and a blocked signal.
        let groupsBefore = currentGroups()
        var extra: [gid_t] = [0, 4, 27]
        XCTAssertEqual(setgroups(extra.count, &extra), 0)
        defer { var g = groupsBefore; _ = setgroups(g.count, &g) }
        let hostname = open("/etc/hostname", O_RDONLY)
        XCTAssertGreaterThanOrEqual(hostname, 0)
        let leaked = fcntl(hostname, F_DUPFD, 100)
        close(hostname)
        XCTAssertGreaterThanOrEqual(leaked, 100)
        XCTAssertEqual(fcntl(leaked, F_GETFD) & FD_CLOEXEC, 0)
        defer { close(leaked) }
        let previousPipe = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previousPipe) }
        var block = sigset_t(), previousMask = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, SIGUSR1)
        pthread_sigmask(SIG_BLOCK, &block, &previousMask)
        defer { pthread_sigmask(SIG_SETMASK, &previousMask, nil) }

        let message = "Your sign-in code for host is 492817.\nIt expires in 5 minutes. $HOME `id` \"quoted\""
        let result = run(sender, "+15105551234", message)
        XCTAssertEqual(result.outcome, .sent, result.summary.string + " " + result.output.string)
        XCTAssertEqual(result.output.string, "", "the sender wrote everything to the spool")

        let record = try read(spool)
        let lines = record.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        func value(_ key: String) -> String? { lines.first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) } }
        func field(_ key: String) -> String? {
            lines.first { $0.hasPrefix(key + ":") }.map { $0.dropFirst(key.count + 1).trimmingCharacters(in: .whitespaces) }
        }
        XCTAssertEqual(value("argc"), "0", "no argument: the destination is in the environment (issue 36)")
        XCTAssertEqual(value("cmdline"), "/bin/sh \(sender) ", "the command line holds the program only")
        XCTAssertEqual(value("uid"), "\(uid)")
        XCTAssertEqual(value("gid"), "\(gid)")
        XCTAssertEqual(value("groups"), "\(gid)", "no supplementary group of the daemon's")
        XCTAssertEqual(value("cwd"), "/")
        XCTAssertEqual(value("umask"), "0022")
        XCTAssertEqual(field("SigIgn"), "0000000000000000", "no signal ignored")
        XCTAssertEqual(field("SigBlk"), "0000000000000000", "no signal blocked")
        XCTAssertEqual(field("CapEff"), "0000000000000000")
        XCTAssertEqual(field("CapPrm"), "0000000000000000")
        // Its own session and process group (a time-out kills them all).
        let ids = (value("ids") ?? "").split(separator: " ")  // pid, process group, session
        XCTAssertEqual(ids.count, 3)
        if ids.count == 3 {
            XCTAssertEqual(ids[1], ids[0], "process group leader")
            XCTAssertEqual(ids[2], ids[0], "session leader")
        }

        func section(_ start: String, _ end: String) -> [String] {
            guard let s = lines.firstIndex(of: start), let e = lines[s...].firstIndex(of: end) else { return ["missing \(start)"] }
            return Array(lines[(s + 1)..<e])
        }
        XCTAssertEqual(section("--environ", "--fds"), ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "PAM_TOTP_KIND=sms",
                                                       "PAM_TOTP_DESTINATION=+15105551234"])
        // 0, 1, 2, and the directory ls reads: nothing of the test process's (fd 100 above).
        XCTAssertEqual(section("--fds", "--stdin").sorted(), ["0", "1", "2", "3"])
        // The message exactly, then end of file (cat returned).
        guard let s = record.range(of: "--stdin\n"), let e = record.range(of: "\n--end\n") else { return XCTFail(record) }
        XCTAssertEqual(String(record[s.upperBound..<e.lowerBound]), message)
        XCTAssertFalse(result.summary.string.contains("492817"))
    }

    func currentGroups() -> [gid_t] {
        let n = getgroups(0, nil)
        var groups = [gid_t](repeating: 0, count: Int(max(n, 0)))
        _ = getgroups(n, &groups)
        return groups
    }

    // MARK: - Exit status and output

    func testANonZeroExitIsAFailureWithItsOutputEscaped() throws {
        let sender = try script("fails", """
            #!/bin/sh
            printf 'gateway said:\\tno\\n\\033[31mred\\\\ \\001\\n' >&2
            printf 'caf\\303\\251 \\377'
            exit 3
            """)
        let result = run(sender, "alice@example.com", "code 123456\n")
        XCTAssertEqual(result.outcome, .failed(exitStatus: 3))
        XCTAssertFalse(result.isSent)
        XCTAssertEqual(result.summary.string, "exited with status 3")
        XCTAssertEqual(result.output.string, #"gateway said:\tno\n\x1b[31mred\\ \x01\ncafé \xff"#)
        XCTAssertFalse(result.output.bytes.contains { $0 < 0x20 || $0 == 0x7F }, "no control byte in a log line")
    }

    func testOutputOverTheCapIsTruncatedWithAMarker() throws {
        let long = try script("long", """
            #!/bin/sh
            head -c 100000 /dev/zero | tr '\\0' 'a'
            """)
        let a = run(long, "+15105551234", "x")
        XCTAssertEqual(a.outcome, .sent, "the whole output was read: the program did not block on a full pipe")
        XCTAssertEqual(a.output.string, String(repeating: "a", count: 2000) + " [truncated]")

        // Escapes count toward the cap and are never cut in two: 1,999 bytes, then "\n" does not fit.
        let escapes = try script("escapes", """
            #!/bin/sh
            head -c 1999 /dev/zero | tr '\\0' 'b'
            printf '\\n'
            """)
        let b = run(escapes, "+15105551234", "x")
        XCTAssertEqual(b.output.string, String(repeating: "b", count: 1999) + " [truncated]")

        let exact = try script("exact", """
            #!/bin/sh
            head -c 2000 /dev/zero | tr '\\0' 'c'
            """)
        XCTAssertEqual(run(exact, "+15105551234", "x").output.string, String(repeating: "c", count: 2000), "2,000 bytes fit")
    }

    func testASignalIsReportedAsKilled() throws {
        let sender = try script("killed", "#!/bin/sh\nkill -TERM $$\nsleep 5\n")
        XCTAssertEqual(run(sender, "+15105551234", "x").outcome, .killed(signal: SIGTERM))
    }

    // MARK: - The time limit

    func testAProgramPastTheDeadlineIsKilledWithItsProcessGroupAndReaped() throws {
        let spool = try spool()
        let sender = try script("sleeper", """
            #!/bin/sh
            echo "leader $$" >> \(spool)
            sleep 60 &
            echo "child $!" >> \(spool)
            echo 'still working'
            sleep 60
            """)
        let start = Date()
        let result = run(sender, "+15105551234", "x", timeout: 1000)
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(result.outcome, .timedOut)
        XCTAssertEqual(result.summary.string, "timed out: killed with its process group")
        XCTAssertEqual(result.output.string, #"still working\n"#, "what it printed before the deadline is kept")
        XCTAssertGreaterThanOrEqual(elapsed, 0.9)
        XCTAssertLessThan(elapsed, 2.0, "the deadline holds, although the child still holds the output pipe")

        let record = try read(spool)
        let pids = record.split(separator: "\n").compactMap { Int32($0.split(separator: " ").last ?? "") }
        XCTAssertEqual(pids.count, 2, record)
        // The program was reaped (no zombie: kill(pid, 0) finds nothing) ...
        if let leader = pids.first {
            XCTAssertEqual(kill(leader, 0), -1)
            XCTAssertEqual(errno, ESRCH, "the program was reaped")
        }
        // ... and nothing of the account runs any more, the background sleep included.
        var left: [String] = []
        for _ in 0..<40 {
            left = liveProcesses(of: uid)
            if left.isEmpty { break }
            usleep(50_000)
        }
        XCTAssertEqual(left, [], "processes of the delivery account left running")
    }

    func testAProgramThatExitsInTimeEndsTheRunEvenIfItsChildHoldsTheOutput() throws {
        // An MTA's background delivery: the program exits 0 and leaves a child with the pipe.
        let sender = try script("detaches", "#!/bin/sh\necho queued\nsleep 3 &\nexit 0\n")
        let start = Date()
        let result = run(sender, "alice@example.com", "x", timeout: 5000)
        XCTAssertEqual(result.outcome, .sent)
        XCTAssertEqual(result.output.string, #"queued\n"#)
        XCTAssertLessThan(Date().timeIntervalSince(start), 2.0, "not waiting for the child's end of file")
        killAll(of: uid)
    }

    // MARK: - Input

    func testAProgramThatClosesItsInputEarlyDoesNotSignalTheCaller() throws {
        // SIGPIPE at its default: a write to a closed pipe would end this test process.
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        let sender = try script("closes", "#!/bin/sh\nexec 0<&-\nsleep 0.2\necho closed\n")
        let big = String(repeating: "m", count: 4 << 20)  // more than any socket buffer holds
        let result = run(sender, "+15105551234", big)
        XCTAssertEqual(result.outcome, .sent)
        XCTAssertEqual(result.output.string, #"closed\n"#)
    }

    func testAProgramThatIgnoresItsInputAndExitsIsSent() throws {
        let sender = try script("ignores", "#!/bin/sh\nexit 0\n")
        XCTAssertEqual(run(sender, "+15105551234", "code 123456").outcome, .sent)
        XCTAssertEqual(run(sender, "+15105551234", "").outcome, .sent, "an empty message: end of file at once")
    }

    // MARK: - What is refused, and what cannot start

    func testWhatCannotStartIsSaidClearly() throws {
        let missing = run("/nonexistent/sender", "+15105551234", "x")
        XCTAssertEqual(missing.outcome, .couldNotStart(.system(step: "stat", errno: Errno(ENOENT))))
        XCTAssertEqual(missing.summary.string, "could not start: stat: No such file or directory (errno 2)")

        // The account may not execute it: execve fails in the child, reported back over the pipe.
        let rootOnly = try script("root-only", "#!/bin/sh\nexit 0\n")
        XCTAssertEqual(chmod(rootOnly, 0o700), 0)
        XCTAssertEqual(run(rootOnly, "+15105551234", "x").outcome, .couldNotStart(.system(step: "execve", errno: Errno(EACCES))))
        // An interpreter that does not exist: execve's ENOENT.
        let badInterpreter = try script("bad-interpreter", "#!/nonexistent/sh\nexit 0\n")
        XCTAssertEqual(run(badInterpreter, "+15105551234", "x").outcome, .couldNotStart(.system(step: "execve", errno: Errno(ENOENT))))
        // Not a regular file.
        XCTAssertEqual(run(dir.path, "+15105551234", "x").outcome, .couldNotStart(.insecureProgram("is not a regular file")))
    }

    func testWhatIsRefusedBeforeAnythingRuns() throws {
        let spool = try spool()
        let sender = try script("sender", "#!/bin/sh\necho ran >> \(spool)\n")
        XCTAssertEqual(run("sender", "+15105551234", "x").outcome, .couldNotStart(.programNotAbsolute))
        XCTAssertEqual(run("bin/sh", "+15105551234", "x").outcome, .couldNotStart(.programNotAbsolute))
        XCTAssertEqual(run(sender, "+15105551234", "x", uid: 0).outcome, .couldNotStart(.invalidIdentity))
        XCTAssertEqual(run(sender, "+15105551234", "x", gid: 0).outcome, .couldNotStart(.invalidIdentity))
        XCTAssertEqual(run(sender, "+15105551234", "x", uid: UInt32.max).outcome, .couldNotStart(.invalidIdentity))
        XCTAssertEqual(run(sender, "+15105551234", "x", gid: UInt32.max).outcome, .couldNotStart(.invalidIdentity))
        for destination in ["", "-oQ/tmp", "a b@example.com", "alice@example.com\nBcc: x@y", "+1\t5", String(repeating: "1", count: 321)] {
            XCTAssertEqual(run(sender, destination, "x").outcome, .couldNotStart(.invalidDestination), destination)
        }
        XCTAssertEqual(run(sender, "+15105551234", "x", timeout: 0).outcome, .couldNotStart(.invalidTimeout))
        for kind in ["", "SMS", "sms x", "a=b", String(repeating: "s", count: 17)] {
            XCTAssertEqual(run(sender, "+15105551234", "x", kind: kind).outcome, .couldNotStart(.invalidKind), kind)
        }
        // Whoever may change the program would read every code: root's, written by root only.
        XCTAssertEqual(chmod(sender, 0o775), 0)
        XCTAssertEqual(run(sender, "+15105551234", "x").outcome, .couldNotStart(.insecureProgram("is writable by its group or by others")))
        XCTAssertEqual(chmod(sender, 0o755), 0)
        XCTAssertEqual(chown(sender, uid, 0), 0)
        XCTAssertEqual(run(sender, "+15105551234", "x").outcome, .couldNotStart(.insecureProgram("is not owned by root")))
        XCTAssertEqual(try read(spool), "", "nothing ran")
        XCTAssertEqual(checkSenderProgram(Array(sender.utf8)), .insecureProgram("is not owned by root"), "the same check for a configuration")
        XCTAssertEqual(chown(sender, 0, 0), 0)
        XCTAssertNil(checkSenderProgram(Array(sender.utf8)))
        XCTAssertEqual(checkSenderProgram(Array("bin/sh".utf8)), .programNotAbsolute)
        XCTAssertEqual(run(sender, "+15105551234", "x").outcome, .sent)
        XCTAssertEqual(try read(spool), "ran\n", "the same program runs once it is root's")
    }

    /// Many at once from many threads (pam-totpd's workers): each gets its own input and output,
    /// none sees another's descriptors (each would hold the others' pipes open otherwise).
    func testConcurrentDeliveriesKeepTheirOwnInputAndOutput() throws {
        let sender = try script("echo", "#!/bin/sh\nprintf '%s:' \"$PAM_TOTP_DESTINATION\"\ncat\nls /proc/self/fd | tr '\\n' ' '\n")
        let count = 16
        nonisolated(unsafe) let results = UnsafeMutableBufferPointer<DeliveryResult?>.allocate(capacity: count)
        results.initialize(repeating: nil)
        defer { results.deallocate() }
        let (uid, gid) = (self.uid, self.gid)
        DispatchQueue.concurrentPerform(iterations: count) { i in
            results[i] = deliver(program: Array(sender.utf8), kind: Array("sms".utf8), destination: Array("+1510555\(1000 + i)".utf8),
                                 message: Array("message \(i)".utf8), uid: uid, gid: gid, timeoutMilliseconds: 10_000)
        }
        for i in 0..<count {
            XCTAssertEqual(results[i]?.outcome, .sent)
            XCTAssertEqual(results[i]?.output.string, "+1510555\(1000 + i):message \(i)0 1 2 3 ")
        }
    }

    // MARK: - The examples in docs/examples, against real peers

    func example(_ name: String) throws -> String {
        try String(contentsOf: packageRoot.appendingPathComponent("docs/examples/\(name)"), encoding: .utf8)
    }

    /// The example with one of its settings lines replaced (`NAME=...` at the start of a line).
    func configured(_ name: String, _ settings: [String: String]) throws -> String {
        var lines = try example(name).components(separatedBy: "\n")
        for (key, value) in settings {
            guard let i = lines.firstIndex(where: { $0.hasPrefix(key + "=") }) else {
                XCTFail("\(name) has no \(key)= setting")
                continue
            }
            lines[i] = "\(key)=\(value)"
        }
        return try script(name, lines.joined(separator: "\n"))
    }

    func testTheExamplesAreShellScriptsThatCheckTheirDestination() throws {
        for name in ["email-sendmail", "sms-gammu", "sms-http-curl"] {
            let text = try example(name)
            XCTAssertTrue(text.hasPrefix("#!/bin/sh\n# pam-totpd sender: "), name)
            XCTAssertTrue(text.contains("\nset -eu\n"), name)
            XCTAssertTrue(text.contains("PAM_TOTP_DESTINATION"), name)
            XCTAssertFalse(text.contains("$1"), "\(name): pam-totpd gives no argument")
            let path = packageRoot.appendingPathComponent("docs/examples/\(name)").path
            XCTAssertEqual(try runCommand(["sh", "-n", path]).status, 0, name)
            XCTAssertNotEqual(access(path, X_OK), -1, "\(name) is executable")
            let copy = try script(name, text)
            let bad = name.hasPrefix("sms") ? "-15105551234" : "-oQ@x"
            // deliver() refuses a leading "-" itself; run the script directly with other bad input.
            for destination in [bad, name.hasPrefix("sms") ? "+0123456789" : "alice,bob@example.com",
                                name.hasPrefix("sms") ? "+1234" : "alice", ""] {
                let r = try runCommand(["setpriv", "--reuid", "\(uid)", "--regid", "\(gid)", "--clear-groups",
                                        "env", "-i", "PAM_TOTP_DESTINATION=\(destination)", copy],
                                       input: "Subject\nbody 123456\n")
                XCTAssertEqual(r.status, 65, "\(name) \(destination): \(r.stderr)")
            }
            // An argument is a caller that is not pam-totpd (or an old contract): refused.
            let r = try runCommand(["setpriv", "--reuid", "\(uid)", "--regid", "\(gid)", "--clear-groups",
                                    "env", "-i", "PAM_TOTP_DESTINATION=+15105551234", copy, "+15105551234"], input: "x\n")
            XCTAssertEqual(r.status, 64, "\(name): \(r.stderr)")
        }
    }

    // MARK: - No destination on a command line (issue 36)

    /// The command lines of every live process of the delivery account (/proc/PID/cmdline,
    /// NULs as spaces), by pid.
    func commandLines(of uid: UInt32) -> [String: String] {
        var lines: [String: String] = [:]
        for pid in liveProcesses(of: uid) {
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { continue }
            lines[pid] = String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
        }
        return lines
    }

    /// While a slow sender runs (a gateway that takes seconds, through a child process), every
    /// local user can read its command line and its child's: neither holds the destination.
    /// Its environment does, which only its own uid and root may read. Before issue 36 the
    /// sender ran as `PROGRAM DESTINATION`: the number was in /proc/PID/cmdline.
    func testWhileASlowSenderRunsNoCommandLineHoldsTheDestination() throws {
        let spool = try spool()
        let sender = try script("slow", """
            #!/bin/sh
            echo "$$" >> \(spool)
            sleep 3
            cat > /dev/null
            """)
        for (kind, destination) in [("sms", "+15105551234"), ("email", "alice@example.com")] {
            XCTAssertEqual(truncate(spool, 0), 0)
            nonisolated(unsafe) var result: DeliveryResult?
            let done = DispatchSemaphore(value: 0)
            let (uid, gid) = (self.uid, self.gid)
            Thread.detachNewThread {
                result = deliver(program: Array(sender.utf8), kind: Array(kind.utf8), destination: Array(destination.utf8),
                                 message: Array("code 492817".utf8), uid: uid, gid: gid, timeoutMilliseconds: 10_000)
                done.signal()
            }
            // The sender and its sleep, seen while they run.
            var seen: [String: String] = [:]
            for _ in 0..<40 {
                seen.merge(commandLines(of: uid)) { a, _ in a }
                if seen.values.contains(where: { $0.hasPrefix("sleep") }) { break }
                usleep(50_000)
            }
            let leader = try read(spool).split(separator: "\n").first.map(String.init) ?? "?"
            let environ = FileManager.default.contents(atPath: "/proc/\(leader)/environ").map { String(decoding: $0, as: UTF8.self) } ?? ""
            // Another local user (not root, not the delivery account) may not read it.
            let other = try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "cat", "/proc/\(leader)/environ"])
            let otherCmdline = try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "cat", "/proc/\(leader)/cmdline"])
            XCTAssertEqual(done.wait(timeout: .now() + 15), .success)
            XCTAssertEqual(result?.outcome, .sent)
            XCTAssertTrue(seen.values.contains { $0.contains("/slow") }, "the sender was seen running: \(seen)")
            XCTAssertTrue(seen.values.contains { $0.hasPrefix("sleep 3") }, "its child was seen running: \(seen)")
            let digits = String(destination.dropFirst())
            for (pid, line) in seen {
                XCTAssertFalse(line.contains(destination) || (kind == "sms" && line.contains(digits)),
                               "\(kind): pid \(pid)'s command line holds the destination: \(line)")
            }
            XCTAssertEqual(otherCmdline.status, 0, "a command line is every local user's to read")
            XCTAssertFalse(otherCmdline.stdout.contains(destination))
            XCTAssertTrue(environ.contains("PAM_TOTP_DESTINATION=\(destination)\0"), "root reads it in the environment: \(environ)")
            XCTAssertTrue(environ.contains("PAM_TOTP_KIND=\(kind)\0"), environ)
            XCTAssertNotEqual(other.status, 0, "another user read the sender's environment: \(other.stdout)")
            XCTAssertFalse(other.stdout.contains(destination))
        }
    }

    /// Runs `example` (a configured copy) under strace as pam-totpd would: the argv of every
    /// program it executed (execve, its whole process tree), one line each.
    func executedCommandLines(_ example: String, _ destination: String, _ message: String) throws -> (DeliveryResult, String) {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else {
            throw XCTSkip("strace is not installed (make test-deps)")
        }
        let log = try spool("strace-\(UUID().uuidString)")
        let traced = try script("traced-\(UUID().uuidString)",
                                "#!/bin/sh\nexec /usr/bin/strace -f -qq -e trace=execve -e signal=none -s 4096 -o \(log) \(example)\n")
        let result = run(traced, destination, message)
        return (result, try read(log))
    }

    /// Every program an example runs, with its arguments: none holds the destination (strace
    /// sees each execve, however short-lived; /proc only what runs when it looks).
    func assertNoCommandLineHolds(_ destination: String, _ trace: String, _ name: String, file: StaticString = #filePath, line: UInt = #line) {
        let execs = trace.split(separator: "\n").filter { $0.contains("execve(") }
        XCTAssertGreaterThan(execs.count, 1, "\(name): strace saw the programs: \(trace)", file: file, line: line)
        for exec in execs {
            XCTAssertFalse(exec.contains(destination) || (destination.hasPrefix("+") && exec.contains(destination.dropFirst())),
                           "\(name) ran a program with the destination on its command line: \(exec)", file: file, line: line)
            XCTAssertFalse(exec.contains("492817"), "\(name) ran a program with the code on its command line: \(exec)", file: file, line: line)
        }
    }

    func testEmailThroughMsmtpToAnSMTPServer() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/msmtp") else { throw XCTSkip("msmtp is not installed (make test-deps)") }
        guard (try? runCommand(["/usr/bin/python3", "-c", "import aiosmtpd"]))?.status == 0 else {
            throw XCTSkip("python3-aiosmtpd is not installed (make test-deps)")
        }
        let mailDir = dir.appendingPathComponent("mail").path
        XCTAssertEqual(mkdir(mailDir, 0o700), 0)
        let server = try script("smtp-server.py", """
            import asyncio, os, socket, sys
            from aiosmtpd.smtp import SMTP
            out = sys.argv[1]
            class Handler:
                count = 0
                async def handle_DATA(self, server, session, envelope):
                    Handler.count += 1
                    path = os.path.join(out, "%d" % Handler.count)
                    with open(path + ".part", "wb") as f:
                        f.write(("X-Envelope-To: %s\\r\\n" % ",".join(envelope.rcpt_tos)).encode())
                        f.write(envelope.original_content)
                    os.rename(path + ".part", path + ".eml")
                    return "250 OK"
            async def main():
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                sock.listen()
                await asyncio.get_running_loop().create_server(lambda: SMTP(Handler()), sock=sock)
                print(sock.getsockname()[1], flush=True)
                await asyncio.Event().wait()
            asyncio.run(main())
            """)
        let (process, port) = try startServer(["/usr/bin/python3", server, mailDir])
        var serverRunning = true
        defer { if serverRunning { process.terminate(); process.waitUntilExit() } }

        // msmtp as sendmail: the example's SENDMAIL setting names a wrapper that adds the test's
        // configuration (msmtp-mta would replace this machine's /usr/sbin/sendmail).
        let conf = dir.appendingPathComponent("msmtprc").path
        try Data("""
            account default
            host 127.0.0.1
            port \(port)
            from pam-totp@test.invalid
            auth off
            tls off
            syslog off

            """.utf8).write(to: URL(fileURLWithPath: conf))
        XCTAssertEqual(chmod(conf, 0o644), 0)
        let wrapper = try script("sendmail", "#!/bin/sh\nexec /usr/bin/msmtp -C \(conf) \"$@\"\n")
        let sender = try configured("email-sendmail", ["SENDMAIL": wrapper, "FROM": "'Sign-in codes <pam-totp@test.invalid>'"])

        // As pam-totpd sends it (Sources/pam-totpd/Sending.swift): "Subject: ", a blank line, the text.
        let (result, trace) = try executedCommandLines(sender, "alice@example.com",
                         "Subject: Your sign-in code for testhost\n\nYour sign-in code for testhost is 492817. It expires in 5 minutes.\n")
        XCTAssertEqual(result.outcome, .sent, result.summary.string + ": " + result.output.string)
        assertNoCommandLineHolds("alice@example.com", trace, "email-sendmail")
        XCTAssertTrue(trace.contains("\"-t\", \"-i\""), "sendmail -t: the recipient from the To: header: \(trace)")
        let mailPath = mailDir + "/1.eml"
        XCTAssertTrue(waitFor { FileManager.default.fileExists(atPath: mailPath) }, "no mail arrived")
        let mail = try read(mailPath).replacingOccurrences(of: "\r\n", with: "\n")
        XCTAssertTrue(mail.hasPrefix("X-Envelope-To: alice@example.com\n"), mail)
        XCTAssertTrue(mail.contains("\nTo: alice@example.com\n"), mail)
        XCTAssertTrue(mail.contains("\nFrom: Sign-in codes <pam-totp@test.invalid>\n"), mail)
        XCTAssertTrue(mail.contains("\nSubject: Your sign-in code for testhost\n"), mail)
        XCTAssertTrue(mail.contains("\nContent-Type: text/plain; charset=UTF-8\n"), mail)
        XCTAssertTrue(mail.contains("\nMIME-Version: 1.0\n"), mail)
        let body = mail.components(separatedBy: "\n\n").dropFirst().joined(separator: "\n\n")
        XCTAssertEqual(body, "Your sign-in code for testhost is 492817. It expires in 5 minutes.\n")
        XCTAssertFalse(result.output.string.contains("492817"))

        // A subject that is not ASCII goes as an encoded word; a bare first line is the subject too.
        XCTAssertEqual(run(sender, "bob@example.com", "Code für testhost\nCode 123456").outcome, .sent)
        let second = mailDir + "/2.eml"
        XCTAssertTrue(waitFor { FileManager.default.fileExists(atPath: second) })
        let encoded = "=?UTF-8?B?" + Data("Code für testhost".utf8).base64EncodedString() + "?="
        XCTAssertTrue(try read(second).contains("Subject: \(encoded)\r\n"))

        // The server refusing: not sent, and msmtp's own words in the output.
        process.terminate()
        process.waitUntilExit()
        serverRunning = false
        let refused = run(sender, "alice@example.com", "Subject\nCode 123456")
        guard case .failed = refused.outcome else { return XCTFail("\(refused.outcome)") }
        XCTAssertTrue(refused.output.string.contains("msmtp"), refused.output.string)
    }

    func testSMSThroughCurlToAnHTTPGateway() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else { throw XCTSkip("curl is not installed") }
        let requests = dir.appendingPathComponent("requests").path
        let server = try script("http-server.py", """
            import http.server, sys
            out = sys.argv[1]
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    body = self.rfile.read(int(self.headers["Content-Length"]))
                    with open(out, "ab") as f:
                        f.write(("%s %s\\n" % (self.path, self.headers.get("Authorization"))).encode() + body + b"\\n")
                    status = 200 if b"to=%2B1" in body else 400
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"accepted\\n" if status == 200 else b"bad number\\n")
                def log_message(self, *args):
                    pass
            server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
            print(server.server_address[1], flush=True)
            server.serve_forever()
            """)
        let (process, port) = try startServer(["/usr/bin/python3", server, requests])
        defer { process.terminate(); process.waitUntilExit() }
        // Readable by the delivery account only.
        let credentials = dir.appendingPathComponent("credentials").path
        try Data("url = \"http://127.0.0.1:\(port)/send\"\nuser = \"acct:s3cret\"\n".utf8).write(to: URL(fileURLWithPath: credentials))
        XCTAssertEqual(chown(credentials, 0, gid), 0)
        XCTAssertEqual(chmod(credentials, 0o640), 0)
        let sender = try configured("sms-http-curl", ["CREDENTIALS": credentials, "PROTOCOLS": "'=http'"])

        let (result, trace) = try executedCommandLines(sender, "+15105551234",
                                                       "492817 is your sign-in code for testhost. It expires in 5 minutes.\n")
        XCTAssertEqual(result.outcome, .sent, result.summary.string + ": " + result.output.string)
        XCTAssertEqual(result.output.string, #"accepted\n"#)
        assertNoCommandLineHolds("+15105551234", trace, "sms-http-curl")
        // Quotes and backslashes in the text reach the gateway as they were.
        XCTAssertEqual(run(sender, "+15105551234", #"492817 is "your" code\here"#).outcome, .sent)
        let auth = "Basic " + Data("acct:s3cret".utf8).base64EncodedString()
        XCTAssertEqual(try read(requests),
                       "/send \(auth)\nto=%2B15105551234&text=492817+is+your+sign-in+code+for+testhost.+It+expires+in+5+minutes.\n"
                       + "/send \(auth)\nto=%2B15105551234&text=492817+is+%22your%22+code%5Chere\n")

        // The shipped setting allows HTTPS only: the same gateway over http is refused by curl.
        let shipped = try configured("sms-http-curl", ["CREDENTIALS": credentials])
        let https = run(shipped, "+15105551234", "code 123456")
        XCTAssertEqual(https.outcome, .failed(exitStatus: 1), https.output.string)
        XCTAssertTrue(https.output.string.contains("Protocol"), https.output.string)
    }

    func testSMSForGammuSmsdIsQueuedInItsOutboxWithTheNumberOnNoCommandLine() throws {
        // gammu-smsd needs a modem (OutOfBandPeerTests runs the real one on its dummy phone);
        // what the example must get right is the queued file: gammu-smsd's files service takes
        // the number from its name and the text from its content (UTF-16 with a byte order mark).
        let outbox = dir.appendingPathComponent("outbox").path
        XCTAssertEqual(mkdir(outbox, 0o2770), 0)
        XCTAssertEqual(chown(outbox, 0, gid), 0)
        XCTAssertEqual(chmod(outbox, 0o2770), 0)
        let sender = try configured("sms-gammu", ["OUTBOX": outbox])
        let (result, trace) = try executedCommandLines(sender, "+15105551234", "492817 is your sign-in code für testhost.\n")
        XCTAssertEqual(result.outcome, .sent, result.output.string)
        assertNoCommandLineHolds("+15105551234", trace, "sms-gammu")
        let files = try FileManager.default.contentsOfDirectory(atPath: outbox)
        XCTAssertEqual(files.count, 1, "one file, no temporary one left: \(files)")
        let name = try XCTUnwrap(files.first)
        // OUT<priority><date>_<time>_<serial>_<number>_<note>.txt
        let fields = name.split(separator: "_")
        XCTAssertTrue(name.hasPrefix("OUTA") && name.hasSuffix(".txt") && fields.count == 5, name)
        if fields.count == 5 { XCTAssertEqual(fields[3], "+15105551234", name) }
        let data = try XCTUnwrap(FileManager.default.contents(atPath: outbox + "/" + name))
        XCTAssertEqual(Array(data.prefix(2)), [0xFE, 0xFF])
        XCTAssertEqual(String(data: data.dropFirst(2), encoding: .utf16BigEndian), "492817 is your sign-in code für testhost.")
        var st = stat()
        XCTAssertEqual(stat(outbox + "/" + name, &st), 0)
        XCTAssertEqual(st.st_uid, uid)
        XCTAssertEqual(st.st_mode & 0o7777, 0o640, "not for other users: its name and text hold the number and the code")
        // A second message at once: another name, both kept.
        XCTAssertEqual(run(sender, "+15105551234", "code 123456").outcome, .sent)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outbox).count, 2)
        // An outbox it cannot write to: not sent, said why.
        XCTAssertEqual(chmod(outbox, 0o2750), 0)
        let refused = run(sender, "+15105551234", "code 123456")
        XCTAssertEqual(refused.outcome, .failed(exitStatus: 78), refused.output.string)
    }

    /// Starts a server that prints its port on its first line.
    func startServer(_ arguments: [String]) throws -> (Process, Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        var line = Data()
        while true {
            let byte = out.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line += byte
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            process.terminate()
            throw XCTSkip("the test server did not start")
        }
        return (process, port)
    }

    func waitFor(_ condition: () -> Bool) -> Bool {
        for _ in 0..<100 {
            if condition() { return true }
            usleep(50_000)
        }
        return false
    }
}
