import Foundation
import MFACore
import TestSupport
import XCTest

/// End to end through a real OpenSSH sshd on 127.0.0.1: a private sshd (own host key, own
/// config, high port) whose PAM stack is pam_unix + the shipped module, a throw-away local
/// user, and a scripted `ssh` client driven by `expect` that answers `Password:` and
/// `Verification code:` (keyboard-interactive), with codes from oathtool.
///
/// OpenSSH 9.2 (Debian 12) has no `PAMServiceName`; it names its PAM service after its program
/// name, so sshd runs through a symlink `sshd_pamtotp_<pid>` -> /usr/sbin/sshd and the stack is
/// /etc/pam.d/sshd_pamtotp_<pid>. That this stack is the one used is shown by every test: the
/// `Verification code:` prompt appears (Debian's /etc/pam.d/sshd has no TOTP line), and the
/// random secret exists only in this stack's private `store=`, so no other stack could accept
/// the code that (1) logs in with.
///
/// Needs root (a user, /etc/pam.d, /run/sshd, sshd's privilege separation); every other
/// requirement (sshd, ssh, expect, oathtool) fails rather than skips when missing.
final class SSHDTests: XCTestCase {
    let remoteCommand = "echo pam-totp-ok-$((6*7))"
    let remoteOutput = "pam-totp-ok-42"

    var dir: URL?
    var service = ""
    var user = ""
    var password = ""
    var secret: [UInt8] = []
    var secretB32 = ""
    var port: UInt16 = 0
    var sshdPID: pid_t?
    var logURL: URL?
    var script: URL?

    // MARK: set-up and tear-down

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "a real sshd needs root (a user, /etc/pam.d, /run/sshd); make check runs as root")
        do { try setUpDaemon() } catch { cleanup(); throw error }
    }

    override func tearDown() {
        cleanup()
        super.tearDown()
    }

    private func setUpDaemon() throws {
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        for tool in ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"] {
            guard FileManager.default.isExecutableFile(atPath: tool) else { throw failure("\(tool) missing (openssh-server)") }
        }
        let dir = try makeTemporaryDirectory("pam_totp_sshd")
        self.dir = dir

        // The test user, with a random password (alphanumeric: typed through a tty by expect).
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        user = "totpssh" + String(getpid() % 100_000) + String((0..<3).map { _ in letters.randomElement()! })
        let alphabet = Array("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        password = String((0..<20).map { _ in alphabet.randomElement()! })
        try check(runCommand(["useradd", "-m", "-s", "/bin/sh", user]), "useradd")
        try check(runCommand(["chpasswd"], input: "\(user):\(password)\n"), "chpasswd")

        // Its record: one factor, a random 20-byte SHA-1 secret, in a root-owned 0700 store.
        let store = dir.appendingPathComponent("store")
        guard mkdir(store.path, 0o700) == 0 else { throw failure("mkdir \(store.path): errno \(errno)") }
        secret = (0..<20).map { _ in UInt8.random(in: 0...255) }
        secretB32 = Base32.encodeString(secret)
        try Store(path: Array(store.path.utf8)).write(user: Array(user.utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: secret),
        ]))

        // The PAM service, named after the symlink sshd runs through.
        service = "sshd_pamtotp_\(getpid())"
        try """
            auth required pam_unix.so
            auth required \(moduleURL.path) store=\(store.path)
            account required pam_unix.so
            session required pam_permit.so

            """.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        let link = dir.appendingPathComponent(service)
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "/usr/sbin/sshd")

        // Host key, privilege separation directory, client script.
        let hostKey = dir.appendingPathComponent("hostkey")
        try check(runCommand(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey.path]), "ssh-keygen")
        if !FileManager.default.fileExists(atPath: "/run/sshd") {
            try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o755])
        }
        let script = dir.appendingPathComponent("client.exp")
        try Self.clientScript.write(to: script, atomically: true, encoding: .utf8)
        self.script = script

        // sshd on a free high port; a lost race for the port is retried (bounded).
        let logURL = dir.appendingPathComponent("sshd.log")
        self.logURL = logURL
        for attempt in 1...3 {
            port = try freePort()
            let config = dir.appendingPathComponent("sshd_config")
            try """
                ListenAddress 127.0.0.1
                Port \(port)
                HostKey \(hostKey.path)
                PidFile \(dir.appendingPathComponent("sshd.pid").path)
                UsePAM yes
                KbdInteractiveAuthentication yes
                PasswordAuthentication no
                PubkeyAuthentication no
                AuthenticationMethods keyboard-interactive
                PermitRootLogin no
                StrictModes no
                LogLevel VERBOSE

                """.write(to: config, atomically: true, encoding: .utf8)
            let test = try runCommand([link.path, "-t", "-f", config.path])
            try check(test, "sshd -t")
            if try startDaemon(link: link, config: config, log: logURL) { return }
            if attempt == 3 || !log().contains("Address already in use") { break }
        }
        throw failure("sshd did not start listening on 127.0.0.1:\(port)\n--- sshd log ---\n\(log())")
    }

    /// Starts sshd in the foreground (-D), logging to `log` (-e); true once it listens.
    ///
    /// posix_spawn, not Foundation's Process: Process watches a child through a socket the
    /// child inherits and, when that socket closes, blocks its one monitor thread in
    /// waitpid(child). sshd closes every inherited descriptor at start-up, so the monitor would
    /// wait for sshd forever and no later Process (runCommand: oathtool, expect) would ever
    /// be seen to exit.
    private func startDaemon(link: URL, config: URL, log logURL: URL) throws -> Bool {
        let pid = try spawn(link.path, ["-D", "-e", "-f", config.path], output: logURL)
        sshdPID = pid
        let listening = "Server listening on 127.0.0.1 port \(port)"
        for _ in 0..<100 {  // 10 s at most
            if log().contains(listening) { return true }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { sshdPID = nil; return false }
            usleep(100_000)
        }
        stopDaemon()
        return false
    }

    /// `path` (absolute; also argv[0], which names sshd's PAM service) with stdin /dev/null and
    /// stdout and stderr appended to `output`.
    private func spawn(_ path: String, _ arguments: [String], output: URL) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output.path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Default signal handling and an empty mask, whatever the test runner set.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), defaults = sigset_t()
        sigemptyset(&none)
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
        guard rc == 0 else { throw failure("posix_spawn \(path): error \(rc)") }
        return pid
    }

    /// SIGTERM, up to 5 s, then SIGKILL; always reaps.
    private func stopDaemon() {
        guard let pid = sshdPID else { return }
        sshdPID = nil
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { return }
        kill(pid, SIGTERM)
        for _ in 0..<50 {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(100_000)
        }
        kill(pid, SIGKILL)
        for _ in 0..<50 {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(100_000)
        }
    }

    /// Idempotent, and safe after a partial set-up.
    private func cleanup() {
        stopDaemon()
        if !service.isEmpty { unlink("/etc/pam.d/" + service); service = "" }
        if !user.isEmpty {
            // -f only as a fallback: a session process that outlived its connection.
            if (try? runCommand(["userdel", "-r", user]))?.status != 0 { _ = try? runCommand(["userdel", "-r", "-f", user]) }
            user = ""
        }
        if let dir { removeTemporaryDirectory(dir); self.dir = nil }  // the symlink, store, key, log
    }

    // MARK: helpers

    struct Failure: Error, CustomStringConvertible { let description: String }
    private func failure(_ text: String) -> Failure { Failure(description: text) }

    private func check(_ r: CommandResult, _ what: String) throws {
        guard r.status == 0 else { throw failure("\(what) exited \(r.status): \(r.stdout)\(r.stderr)") }
    }

    private func log() -> String {
        guard let logURL, let data = try? Data(contentsOf: logURL) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    private func logTail(_ lines: Int = 30) -> String {
        "\n--- sshd log (tail) ---\n" + log().split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    /// A port in 20000–39999 that 127.0.0.1 can bind now (sshd may still lose a race: retried).
    private func freePort() throws -> UInt16 {
        for _ in 0..<20 {
            let candidate = UInt16.random(in: 20000..<40000)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = candidate.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if bound == 0 { return candidate }
        }
        throw failure("no free port in 20000–39999 after 20 tries")
    }

    private func oathtoolCode() throws -> String {
        let r = try runCommand(["oathtool", "--totp", "-b", secretB32])
        try check(r, "oathtool")
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A 6-digit code that matches no step within ±6 of now (the module accepts ±5).
    private func wrongCode() throws -> String {
        let window = try Set((-6...6).map { String(decoding: try currentCode(secret, offsetSteps: Int64($0)), as: UTF8.self) })
        return ["000000", "111111", "222222", "333333", "444444", "555555", "123456"].first { !window.contains($0) }!
    }

    struct Login {
        var status: Int32
        var output: String
        var ranCommand: Bool
        var askedForCode: Bool
    }

    /// One ssh login answering the password and `code`. The secrets go through the
    /// environment, not the argument list.
    private func login(code: String, password: String? = nil) throws -> Login {
        guard let script else { throw failure("no client script") }
        var environment = ProcessInfo.processInfo.environment
        environment["PAMTOTP_PASSWORD"] = password ?? self.password
        environment["PAMTOTP_CODE"] = code
        let r = try runCommand(["expect", "-f", script.path, String(port), user, remoteCommand], environment: environment)
        let output = r.stdout + r.stderr
        return Login(status: r.status, output: output,
                     ranCommand: output.contains(remoteOutput),
                     askedForCode: output.contains("EXPECT-PROMPTS:PV"))
    }

    /// The client: answers each prompt once per sighting, at most 6 rounds, 20 s per wait;
    /// prints the prompts it answered (P = Password, V = Verification code) and exits with ssh's
    /// status (90+ for its own timeouts).
    static let clientScript = #"""
        set timeout 20
        log_user 1
        lassign $argv port user command
        spawn ssh -F /dev/null -p $port -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
            -o LogLevel=ERROR -o PreferredAuthentications=keyboard-interactive \
            -o NumberOfPasswordPrompts=1 -o ConnectTimeout=5 $user@127.0.0.1 $command
        set seen ""
        set open 1
        for {set round 0} {$round < 6 && $open} {incr round} {
            expect {
                -ex "Password:" { send -- "$env(PAMTOTP_PASSWORD)\r"; append seen P }
                -ex "Verification code:" { send -- "$env(PAMTOTP_CODE)\r"; append seen V }
                eof { set open 0 }
                timeout { puts "\nEXPECT-PROMPTS:$seen\nEXPECT-TIMEOUT"; exit 90 }
            }
        }
        if {$open} {
            expect {
                eof {}
                timeout { puts "\nEXPECT-PROMPTS:$seen\nEXPECT-TIMEOUT"; exit 91 }
            }
        }
        set result [wait]
        puts "\nEXPECT-PROMPTS:$seen"
        if {[lindex $result 2] != 0} { exit 92 }
        exit [lindex $result 3]
        """#

    // MARK: tests

    /// (1) Password then a current oathtool code: authenticated, and the remote command ran.
    func testPasswordAndCodeRunTheRemoteCommand() throws {
        awayFromStepBoundary()
        let ok = try login(code: try oathtoolCode())
        XCTAssertTrue(ok.askedForCode, "the Verification code prompt (our PAM service) was not shown:\n\(ok.output)\(logTail())")
        XCTAssertTrue(ok.ranCommand, "login with the right password and code failed:\n\(ok.output)\(logTail())")
        XCTAssertEqual(ok.status, 0, ok.output + logTail())
        XCTAssertTrue(log().contains("Accepted keyboard-interactive/pam for \(user) from 127.0.0.1"), logTail())
    }

    /// (2) The right password with a code outside the window: denied, no command; then the same
    /// password with the current code is accepted (so the denial was the code's).
    func testWrongCodeIsDenied() throws {
        let bad = try login(code: try wrongCode())
        XCTAssertTrue(bad.askedForCode, "the Verification code prompt (our PAM service) was not shown:\n\(bad.output)\(logTail())")
        XCTAssertFalse(bad.ranCommand, "a wrong code logged in:\n\(bad.output)\(logTail())")
        XCTAssertNotEqual(bad.status, 0, bad.output + logTail())
        XCTAssertTrue(log().contains("Failed keyboard-interactive/pam for \(user) from 127.0.0.1"), logTail())

        awayFromStepBoundary()
        let ok = try login(code: try oathtoolCode())
        XCTAssertTrue(ok.ranCommand, "the right password and code, after a wrong code, failed:\n\(ok.output)\(logTail())")
        XCTAssertEqual(ok.status, 0, ok.output + logTail())
    }

    /// (3) Replay: a code that just logged in is used again at once (same step, well inside the
    /// ±5-step window) and must be refused. Needs the module's replay guard.
    func testReplayedCodeIsDenied() throws {
        awayFromStepBoundary(margin: 6)  // both logins in one step (each takes well under 1 s)
        let step = time(nil) / 30
        let code = try oathtoolCode()
        let first = try login(code: code)
        XCTAssertTrue(first.ranCommand, "the first login with the code failed:\n\(first.output)\(logTail())")
        XCTAssertEqual(first.status, 0, first.output + logTail())

        let replay = try login(code: code)
        let sameStep = time(nil) / 30 == step ? "same step" : "next step (still inside the window)"
        XCTAssertTrue(replay.askedForCode, "the Verification code prompt was not shown:\n\(replay.output)\(logTail())")
        XCTAssertFalse(replay.ranCommand, "a replayed code (\(sameStep)) logged in again:\n\(replay.output)\(logTail())")
        XCTAssertNotEqual(replay.status, 0, "replayed code (\(sameStep)) accepted\n" + replay.output + logTail())
        XCTAssertTrue(log().contains("Failed keyboard-interactive/pam for \(user) from 127.0.0.1"), logTail())
    }
}
