import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Fleet mode end to end (docs/ARCHITECTURE.md, section 8): two pam-totpd, each with its own host login
/// role (pam_totp_host), on one throwaway PostgreSQL; requests over their sockets as the module
/// sends them, and pamtester as root through a backend = postgresql stack. A code used on A is
/// refused on B, concurrent logins with one code give one success, failures count across
/// hosts; a stopped or SIGKILLed server means denials, no replay and no lost count after.
final class FleetDaemonTests: XCTestCase {
    var cluster: PostgresCluster!
    var hosts: [DaemonFixture] = []
    var services: [String] = []
    let db = "fleet"
    let secret = Array("fleetdaemonsecret123".utf8)

    override func setUpWithError() throws {
        cluster = try startFleetCluster(database: db)
        // Wide limits so that every failure is counted and a round may use any step of the window.
        try sql("UPDATE pam_totp.settings SET max_window = 10, max_failures = 100, min_lockout = 0")
        for name in ["a", "b"] {
            hosts.append(try startFleetHost(cluster, database: db, role: "pamtotp_fleet_host_\(name)", settings: "adjacent_intervals = 10\n"))
        }
        // root (uid 0) is the account: requests come from root, and NSS knows it on every host.
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var rng = SystemRandomNumberGenerator()
        try owner.enroll(user: Array("root".utf8), accountUID: 0,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret),
                         importedCodes: nil, using: &rng)
    }

    override func tearDown() {
        for h in hosts { h.cleanup() }
        hosts = []
        for s in services { unlink("/etc/pam.d/" + s) }
        cluster?.stop()
        cluster = nil
    }

    @discardableResult
    func sql(_ q: String) throws -> String { try cluster.psql(q, database: db) }

    func failures() throws -> Int { Int(try sql("SELECT failures FROM pam_totp.users WHERE name = 'root'")) ?? -1 }

    /// One request as root to host `i`, as pam_totp.so sends it.
    func ask(_ i: Int, _ op: DaemonOperation = .authenticate, answer: String, codeAfterPassword: Bool = false) throws -> (reply: DaemonReply, seconds: Double) {
        var o = ModuleOptions()
        o.codeAfterPassword = codeAfterPassword
        o.backend = .postgresql
        o.adjacentIntervals = 10
        o.maxFailures = 100
        o.lockoutSeconds = 0
        let frame = try XCTUnwrap(DaemonRequest(operation: op, service: Array("fleet-test".utf8), user: Array("root".utf8),
                                                options: o, answer: Array(answer.utf8)).encoded())
        let started = Date()
        let fd = DaemonTests.connectTo(hosts[i].socketPath)
        XCTAssertGreaterThanOrEqual(fd, 0, "connect to host \(i)")
        defer { close(fd) }
        XCTAssertTrue(DaemonTests.send(fd, frame))
        let bytes = try XCTUnwrap(DaemonTests.readAll(fd), "no reply from host \(i)")
        return (try DaemonReply.decode(bytes), Date().timeIntervalSince(started))
    }

    func code(offset: Int64) throws -> String {
        String(decoding: try currentCode(secret, offsetSteps: offset), as: UTF8.self)
    }

    func isSuccess(_ r: DaemonReply) -> Bool { if case .outcome(.success) = r { return true }; return false }

    /// db_idle_timeout (issue 38, item 4): a host closes its idle database connections (here
    /// after 2 s; pam-totpd's loop looks at least every 10 s), without socket activation too,
    /// and connects again on demand. Before, it kept them for ever: 1,000 hosts held 1,000 to
    /// 4,000 server connections.
    func testIdleDatabaseConnectionsAreClosed() throws {
        hosts.append(try startFleetHost(cluster, database: db, role: "pamtotp_fleet_host_idle", settings: "db_idle_timeout = 2\n"))
        let i = hosts.count - 1
        func backends() -> String? {
            try? sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'pamtotp_fleet_host_idle'")
        }
        XCTAssertTrue(waitUntil(timeout: 20) { backends() == "0" }, "the start's connection closed once idle: \(hosts[i].output)")
        guard case .enrolled = try ask(i, .lookup, answer: "").reply else { return XCTFail("a look-up after: \(hosts[i].output)") }
        XCTAssertEqual(backends(), "1", "connected again on demand")
        XCTAssertTrue(waitUntil(timeout: 20) { backends() == "0" }, "closed again once idle")
    }

    func testCodeUsedOnAIsRefusedOnBAndFailuresCountAcrossHosts() throws {
        let c = try code(offset: 1)
        XCTAssertTrue(isSuccess(try ask(0, answer: c).reply), "host A accepts a fresh code")
        guard case .outcome(.wrongCode(replayed: true, _, _)) = try ask(1, answer: c).reply else {
            return XCTFail("host B must refuse the code host A accepted")
        }
        XCTAssertEqual(try failures(), 1)
        // Wrong codes alternately on A and B: every one counted.
        for i in 0..<10 {
            guard case .outcome(.wrongCode(false, let f, nil)) = try ask(i % 2, answer: try codeOutsideWindow(secret)).reply else {
                return XCTFail("wrong code \(i)")
            }
            XCTAssertEqual(f, UInt32(2 + i))
        }
        XCTAssertEqual(try failures(), 11)
        // Both hosts' daemons logged as their own host role (never the CONNINFO itself).
        XCTAssertEqual(try sql("SELECT count(DISTINCT usename) FROM pg_stat_activity WHERE usename LIKE 'pamtotp_fleet_host_%'"), "2")
    }

    /// 20 concurrent logins with one code spread over both hosts, 10 rounds (each round the code
    /// of a later step of the window): exactly one success per round.
    func testTwentyConcurrentLoginsOverTwoHostsOneSuccessPerRound() throws {
        var perRound: [Int] = []
        for round in 1...10 {
            let c = try code(offset: Int64(round - 5))  // steps now-4 ... now+5, increasing
            let results = Slots(20)
            let group = DispatchGroup()
            for w in 0..<20 {
                group.enter()
                Thread.detachNewThread {
                    let r = try? self.ask(w % 2, answer: c).reply
                    results.set(w, r.map { self.isSuccess($0) ? 1 : 0 } ?? -1)
                    group.leave()
                }
            }
            XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
            let values = results.all
            XCTAssertFalse(values.contains(-1), "a request got no reply in round \(round)")
            perRound.append(values.filter { $0 == 1 }.count)
        }
        XCTAssertEqual(perRound, Array(repeating: 1, count: 10))
        // The 19 others of each round were replays, each counted as a failure; the success
        // of the round reset the count before or after some of them.
        XCTAssertLessThanOrEqual(try failures(), 19)
        print("fleet two hosts: 10 rounds x 20 concurrent logins with one code: successes per round \(perRound)")
    }

    /// Stopped: every request is denied (failed → PAM_AUTHINFO_UNAVAIL) fast; started again: the
    /// daemons reconnect by themselves, the count is intact and the used code stays used.
    func testDatabaseStoppedThenRestartedDeniesThenRecovers() throws {
        let c = try code(offset: 0)
        XCTAssertTrue(isSuccess(try ask(0, answer: c).reply))
        _ = try ask(1, answer: try codeOutsideWindow(secret))
        XCTAssertEqual(try failures(), 1)
        try cluster.stopServer()
        for i in 0..<2 {
            let (reply, seconds) = try ask(i, answer: try code(offset: 1))
            guard case .outcome(.failed(.daemon)) = reply else { return XCTFail("host \(i) while down: \(reply)") }
            XCTAssertLessThan(seconds, 5, "denied within the module's deadline")
        }
        try cluster.start()
        guard case .outcome(.wrongCode(replayed: true, let f, _)) = try ask(1, answer: c).reply else {
            return XCTFail("the code accepted before the outage is still used")
        }
        XCTAssertEqual(f, 2, "the failure before the outage was kept")
        XCTAssertTrue(isSuccess(try ask(0, answer: try code(offset: 1)).reply), "reconnected by itself")
        let log = hosts[0].output + hosts[1].output
        XCTAssertFalse(log.contains("user=pamtotp"), "no CONNINFO in the daemon's output")
    }

    /// SIGKILL of every server process while a verdict is waiting on the user's row lock: the
    /// request is denied, and after restart (crash recovery) nothing of it was recorded: the
    /// code it carried is accepted exactly once, and the count from before is intact.
    func testServerKilledMidTransactionLeavesNoPartialState() throws {
        _ = try ask(0, answer: try codeOutsideWindow(secret))
        XCTAssertEqual(try failures(), 1)
        let c = try code(offset: 2)
        // Hold root's row lock in another session so the verify waits inside its transaction.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        holder.arguments = ["-X", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", "postgres", "-d", db,
                            "-c", "BEGIN; SELECT 1 FROM pam_totp.users WHERE name = 'root' FOR UPDATE; SELECT pg_sleep(20); COMMIT;"]
        holder.standardOutput = FileHandle.nullDevice
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer { if holder.isRunning { holder.terminate() }; holder.waitUntilExit() }
        XCTAssertTrue(waitUntil(timeout: 5) {
            (try? self.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' AND state = 'active' AND pid <> pg_backend_pid()")) == "1"
        })
        let box = ReplyBox()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.set(try? self.ask(1, answer: c).reply)
            done.signal()
        }
        XCTAssertTrue(waitUntil(timeout: 5) {
            (try? self.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")) == "1"
        }, "the verdict waits on the row lock")
        // SIGKILL the postmaster and every backend of this cluster (by pid, from /proc).
        let postmaster = try XCTUnwrap(cluster.postmasterPID)
        let children = (try FileManager.default.contentsOfDirectory(atPath: "/proc")).compactMap { pid_t($0) }.filter { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return false }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 2 && pid_t(fields[1]) == postmaster
        }
        kill(postmaster, SIGKILL)
        for pid in children { kill(pid, SIGKILL) }
        cluster.markStopped()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        let reply = box.get()
        switch reply {
        case .outcome(.failed)?, .outcome(.notRecorded)?: break
        default: XCTFail("denied while the server died: \(String(describing: reply))")
        }
        // The old postmaster.pid stays after a SIGKILL; pg_ctl starts anyway once the pid is gone.
        XCTAssertTrue(waitUntil(timeout: 10) { kill(postmaster, 0) != 0 })
        try cluster.start()
        XCTAssertEqual(try failures(), 1, "the count from before the crash is intact, nothing partial was added")
        XCTAssertTrue(isSuccess(try ask(0, answer: c).reply), "the code of the killed attempt was never recorded as used")
        guard case .outcome(.wrongCode(replayed: true, _, _)) = try ask(1, answer: c).reply else {
            return XCTFail("and it is used exactly once")
        }
    }

    /// The module as sshd runs it (root), with backend = postgresql: it asks pam-totpd even as
    /// root (its own store path is not even there) and maps an outage to PAM_AUTHINFO_UNAVAIL.
    /// The daemon works on the account's canonical name with the database too (rule 14,
    /// docs/ARCHITECTURE.md): a spelling a directory resolves to root ("ROOT", "root ": LDAP's
    /// caseIgnoreMatch, nslcd `ignorecase`, sssd `case_sensitive = false`) is root's record,
    /// never "unenrolled", which nullok lets through on the password alone. This machine's NSS
    /// (files, systemd) resolves no other spelling, so the directory here is a small NSS
    /// module doing what such a directory does, loaded by glibc into a third pam-totpd through
    /// an nsswitch.conf bind-mounted in a private mount namespace (the system's stays as is).
    func testASpellingNSSResolvesToRootIsRootsRecord() throws {
        let host = try DaemonFixture()
        hosts.append(host)
        let dir = host.root.appendingPathComponent("nss")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: false)
        try """
            #include <nss.h>
            #include <pwd.h>
            #include <string.h>
            #include <strings.h>
            #include <errno.h>
            /* As a case-insensitive directory answers: root in any case, trailing spaces ignored. */
            enum nss_status _nss_pamtotpci_getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len, int *errnop) {
                size_t n = strlen(name);
                while (n > 0 && name[n - 1] == ' ') n--;
                if (n != 4 || strncasecmp(name, "root", 4) != 0) return NSS_STATUS_NOTFOUND;
                static const char text[] = "root\0x\0root\0/root\0/bin/sh";
                if (len < sizeof text) { *errnop = ERANGE; return NSS_STATUS_TRYAGAIN; }
                memcpy(buf, text, sizeof text);
                pw->pw_name = buf; pw->pw_passwd = buf + 5; pw->pw_gecos = buf + 7; pw->pw_dir = buf + 12; pw->pw_shell = buf + 18;
                pw->pw_uid = 0; pw->pw_gid = 0;
                return NSS_STATUS_SUCCESS;
            }

            """.write(to: dir.appendingPathComponent("nss.c"), atomically: true, encoding: .utf8)
        let cc = try runCommand(["cc", "-shared", "-fPIC", "-o", dir.appendingPathComponent("libnss_pamtotpci.so.2").path,
                                 dir.appendingPathComponent("nss.c").path])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        let nsswitch = try String(contentsOfFile: "/etc/nsswitch.conf", encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("passwd:") ? "passwd: files pamtotpci" : String($0) }.joined(separator: "\n")
        try nsswitch.write(to: dir.appendingPathComponent("nsswitch.conf"), atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(dir.appendingPathComponent("nsswitch.conf").path, 0o644), 0)
        let launcher = ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                        "mount --bind \(dir.path)/nsswitch.conf /etc/nsswitch.conf && LD_LIBRARY_PATH=\(dir.path) exec \"$0\" \"$@\""]
        // That directory resolves both spellings to root; the system's NSS resolves neither.
        for spelling in ["ROOT", "root "] {
            XCTAssertEqual(try runCommand(launcher + ["/usr/bin/getent", "passwd", spelling]).stdout, "root:x:0:0:root:/root:/bin/sh\n", spelling)
            XCTAssertNotEqual(try runCommand(["getent", "passwd", spelling]).status, 0, "the system's NSS resolves \(spelling)")
        }
        try sql("DROP ROLE IF EXISTS pamtotp_fleet_host_c; CREATE ROLE pamtotp_fleet_host_c LOGIN; GRANT pam_totp_host TO pamtotp_fleet_host_c")
        try """
            backend = postgresql
            postgresql = \(cluster.conninfo(user: "pamtotp_fleet_host_c", database: db))
            adjacent_intervals = 10
            max_failures = 100
            lockout = 0
            nullok

            """.write(toFile: host.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(host.config, 0o644), 0)
        try host.start(launcher: launcher)
        func askC(_ op: DaemonOperation, _ user: String, _ answer: String) throws -> DaemonReply {
            var o = ModuleOptions()
            o.backend = .postgresql
            o.adjacentIntervals = 10
            o.maxFailures = 100
            o.lockoutSeconds = 0
            o.nullok = true
            let frame = try XCTUnwrap(DaemonRequest(operation: op, service: Array("fleet-test".utf8), user: Array(user.utf8),
                                                    options: o, answer: Array(answer.utf8)).encoded())
            let fd = DaemonTests.connectTo(host.socketPath)
            guard fd >= 0 else { throw ClusterError("connect to host c") }
            defer { close(fd) }
            XCTAssertTrue(DaemonTests.send(fd, frame))
            return try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd), "no reply: \(host.output)"))
        }
        let before = try failures()
        for spelling in ["ROOT", "root "] {
            XCTAssertEqual(try askC(.lookup, spelling, ""), .enrolled(FactorHints()), "\(spelling) is root's record: \(host.output)")
            let r = try askC(.authenticate, spelling, try codeOutsideWindow(secret))
            guard case .outcome(.wrongCode(false, _, _)) = r else { return XCTFail("\(spelling): a wrong code is a wrong code for root, got \(r)") }
        }
        XCTAssertEqual(try failures(), before + 2, "both wrong answers count against root")
        let c = try code(offset: 2)
        XCTAssertTrue(isSuccess(try askC(.authenticate, "root ", c)), "root's code through the spelling 'root '")
        guard case .outcome(.wrongCode(replayed: true, _, _)) = try askC(.authenticate, "ROOT", c) else {
            return XCTFail("the code just used for 'root ' is used for 'ROOT'")
        }
        guard case .outcome(.wrongCode(replayed: true, _, _)) = try ask(0, answer: c).reply else {
            return XCTFail("and for root on host A")
        }
        // A name no directory knows stays unenrolled (nullok's case), as before.
        XCTAssertEqual(try askC(.authenticate, "ROOTX", "000000"), .outcome(.unenrolled))
    }

    func testModuleAsRootGoesThroughTheDaemonInFleetMode() throws {
        let service = "pam_totp_fleet_\(getpid())"
        try "auth required \(moduleURL.path) config=\(hosts[0].config) store=/nonexistent-fleet-store\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        services.append(service)
        let ok = try runCommand(["pamtester", service, "root", "authenticate"], input: try code(offset: 3) + "\n")
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr)
        let replay = try runCommand(["pamtester", service, "root", "authenticate"], input: try code(offset: 3) + "\n")
        XCTAssertNotEqual(replay.status, 0)
        try cluster.stopServer()
        let down = try runCommand(["pamtester", service, "root", "authenticate"], input: try code(offset: 4) + "\n")
        XCTAssertNotEqual(down.status, 0)
        // pam_strerror(PAM_AUTHINFO_UNAVAIL)
        XCTAssertTrue((down.stdout + down.stderr).contains("Authentication service cannot retrieve authentication info"),
                      "PAM_AUTHINFO_UNAVAIL: \(down.stdout) \(down.stderr)")
        try cluster.start()
    }

    /// One-field stacks in fleet mode (issue 39): the look-up tells the code's length (the
    /// database's enrolled() gives each factor's digits), so the code_after_password line hands
    /// the right password on; the after_password line checks the code through the daemon.
    func testAOneFieldStackSplitsAtTheFactorsLength() throws {
        guard case .enrolled(let six) = try ask(0, .lookup, answer: "", codeAfterPassword: true).reply else { return XCTFail("no hints") }
        XCTAssertEqual(six.codeDigits, 6)
        try sql("UPDATE pam_totp.factors SET digits = 8 WHERE user_name = 'root'")
        guard case .enrolled(let eight) = try ask(0, .lookup, answer: "", codeAfterPassword: true).reply else { return XCTFail("no hints") }
        XCTAssertEqual(eight.codeDigits, 8)
        // A module that does not ask (one from before the digits were sent) is not sent them.
        guard case .enrolled(let plain) = try ask(0, .lookup, answer: "").reply else { return XCTFail("no hints") }
        XCTAssertEqual(plain.codeDigits, 6)
        let service = "pam_totp_fleet_one_\(getpid())"
        // pam_exec stands in for the password module: it accepts exactly the password part.
        let checker = hosts[0].root.appendingPathComponent("password-check").path
        try "#!/bin/sh\n[ \"$(cat | tr -d '\\0')\" = \"pass word\" ]\n".write(toFile: checker, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(checker, 0o755), 0)
        try """
            auth [success=ok ignore=ignore cred_insufficient=bad default=die] \(moduleURL.path) forward_pass code_after_password config=\(hosts[0].config)
            auth requisite pam_exec.so expose_authtok quiet \(checker)
            auth required \(moduleURL.path) forward_pass after_password config=\(hosts[0].config)

            """.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        services.append(service)
        let p8 = try OTPParameters(algorithm: .sha1, digits: 8, period: 30)
        let code8 = String(decoding: try currentCode(secret, p8, offsetSteps: 2), as: UTF8.self)
        let stranger = try runCommand(["pamtester", service, "root", "authenticate"], input: "guess" + code8 + "\n")
        XCTAssertNotEqual(stranger.status, 0)
        XCTAssertEqual(try failures(), 0, "a wrong password counted")
        let ok = try runCommand(["pamtester", service, "root", "authenticate"], input: "pass word" + code8 + "\n")
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr + hosts[0].output)
        let replay = try runCommand(["pamtester", service, "root", "authenticate"], input: "pass word" + code8 + "\n")
        XCTAssertNotEqual(replay.status, 0)
        XCTAssertEqual(try failures(), 1, "a replay after the right password counts")
    }
}

// Its threads only read the fixtures, which setUp made before any of them started.
extension FleetDaemonTests: @unchecked Sendable {}

final class ReplyBox: @unchecked Sendable {
    private var value: DaemonReply? = nil
    private let lock = NSLock()
    func set(_ v: DaemonReply?) { lock.lock(); value = v; lock.unlock() }
    func get() -> DaemonReply? { lock.lock(); defer { lock.unlock() }; return value }
}

/// A pam-totpd in fleet mode as a host: a login role `role` in pam_totp_host, its own
/// configuration (backend = postgresql, its socket, max_failures 100, no lockout, then
/// `settings`) and socket; started. The caller cleans it up.
func startFleetHost(_ cluster: PostgresCluster, database: String, role: String, settings: String = "") throws -> DaemonFixture {
    _ = try cluster.psql("DROP ROLE IF EXISTS \(role); CREATE ROLE \(role) LOGIN; GRANT pam_totp_host TO \(role)", database: database)
    let host = try DaemonFixture()
    try """
        backend = postgresql
        postgresql = \(cluster.conninfo(user: role, database: database))
        socket = \(host.socketPath)
        max_failures = 100
        lockout = 0
        \(settings)
        """.write(toFile: host.config, atomically: true, encoding: .utf8)
    do {
        guard chmod(host.config, 0o644) == 0 else { throw POSIXError(.EIO) }
        try host.start()
    } catch {
        host.cleanup()
        throw error
    }
    return host
}
