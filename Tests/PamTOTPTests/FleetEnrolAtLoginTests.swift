import CPAM
import FleetStore
import Foundation
import MFACrypto
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Enrolment at first login in fleet mode (`enroll_at_login` with `backend = postgresql`;
/// docs/FLEET.md, "Enrolment at first login"): a real PostgreSQL, two hosts (two pam-totpd, each
/// with its own host role), the built module through the real libpam (pam_start_confdir) as a
/// root-run service. The host makes the secret and shows it through the conversation; the
/// database checks the code on its clock and saves the factor only while the user has none
/// (`enroll_first`); pam-totpd takes the request from root callers only.
final class FleetEnrolAtLoginTests: XCTestCase {
    var cluster: PostgresCluster!
    var hosts: [DaemonFixture] = []
    var fixture: PAMFixture!
    let db = "fleet"
    let roles = ["pamtotp_enrolatlogin_a", "pamtotp_enrolatlogin_b"]

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "enrolment at login is for root-run services")
        cluster = try startFleetCluster(database: db)
        try sql("UPDATE pam_totp.settings SET max_window = 5, max_failures = 100, min_lockout = 0")
        for role in roles { hosts.append(try startFleetHost(cluster, database: db, role: role)) }
        fixture = try PAMFixture()
        for (i, name) in ["host1", "host2"].enumerated() {
            // No store: in fleet mode nothing is read or written on the host.
            try fixture.service(name, ["auth required MODULE config=\(hosts[i].config) store=/nonexistent-fleet-store enroll_at_login=2999-12-31"])
        }
    }

    override func tearDown() {
        for h in hosts { h.cleanup() }
        hosts = []
        fixture?.cleanup()
        cluster?.stop()
        cluster = nil
    }

    @discardableResult
    func sql(_ q: String) throws -> String { try cluster.psql(q, database: db) }

    /// A conversation that scans the QR code drawn in the conversation and answers with the code
    /// at `offset` steps (nil: a wrong code); `uri` receives what was scanned; `meanwhile` runs
    /// once the QR code is on screen, before the answer.
    func scanning(offset: Int64? = 0, uri: Scanned, meanwhile: (() -> Void)? = nil) -> Conversation {
        let c = Conversation(answer: nil)
        let dir = fixture.root
        c.respond = { shown in
            guard let scanned = try? EnrolAtLoginTests.decodeQR(shown, in: dir),
                  let parsed = try? OTPAuthURI(parsing: Array(scanned.utf8)) else { return Array("000000".utf8) }
            uri.value = scanned
            meanwhile?()
            guard let offset else { return Array("99999".utf8) }
            return try? TOTP.code(secret: parsed.secret, parameters: parsed.parameters, at: Int64(time(nil)) + offset * 30)
        }
        return c
    }

    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// On host 1 an un-enrolled user is offered enrolment as on a single host; the right code saves
    /// the factor in the database (write-only, the step used, the audit row naming host 1's role)
    /// and logs in. Host 2 knows it at once: totp-enroll status shows it, the enrolment's code is
    /// used there too, and the next code logs in there.
    func testAFleetHostOffersEnrolmentAndAnotherHostKnowsTheFactor() throws {
        awayFromStepBoundary(margin: 5)
        let uri = Scanned()
        let c = scanning(uri: uri)
        XCTAssertEqual(fixture.authenticate(service: "host1", user: "nobody", conversation: c), PAM_SUCCESS,
                       "\(c.prompts)\n\(hosts[0].output)")
        XCTAssertTrue(c.prompts.first?.contains("no verification-code factor yet") == true, "\(c.prompts)")
        XCTAssertTrue(c.prompts.contains { $0.contains("Key: ") && $0.contains("URI: otpauth://totp/") }, "\(c.prompts)")
        XCTAssertTrue(c.prompts.contains("Verification code from your app: "))
        XCTAssertTrue(c.prompts.last?.hasPrefix("Enrolled.") == true, "\(c.prompts.last ?? "")")
        let parsed = try OTPAuthURI(parsing: Array(uri.value.utf8))
        // In the database, bound to the account, with the proving step used; nothing on the host.
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "1")
        XCTAssertEqual(try sql("SELECT encode(secret, 'hex') FROM pam_totp.factors WHERE user_name = 'nobody'"), hex(parsed.secret))
        XCTAssertEqual(try sql("SELECT uid FROM pam_totp.users WHERE name = 'nobody'"), "65534")
        let step = Int64(try sql("SELECT last_step FROM pam_totp.factors WHERE user_name = 'nobody'")) ?? -1
        XCTAssertLessThanOrEqual(abs(step - Int64(time(nil)) / 30), 1, "the proving step is used")
        let label = try sql("SELECT label FROM pam_totp.factors WHERE user_name = 'nobody'")
        XCTAssertTrue(label.hasPrefix("nobody@"), label)
        XCTAssertEqual(try sql("SELECT role || ' | ' || label || ' | ' || detail FROM pam_totp.audit WHERE event = 'enroll'"),
                       "\(roles[0]) | \(label) | SHA1, 6 digits, 30 s, at login", "one enroll row, naming host 1's role")

        // Host 2: status through its own daemon shows the factor (no secret).
        if FileManager.default.isExecutableFile(atPath: enrollURL.path) {
            let status = try runCommand([enrollURL.path, "status", "--user", "nobody", "--config", hosts[1].config])
            XCTAssertEqual(status.status, 0, status.stderr)
            XCTAssertTrue(status.stdout.contains(label), status.stdout)
            XCTAssertFalse(status.stdout.contains(Base32.encodeString(parsed.secret)), status.stdout)
        } else {
            XCTFail("totp-enroll not built: \(enrollURL.path)")
        }
        // The enrolment's code is used everywhere; an enrolled user is not offered enrolment again.
        let same = try TOTP.code(secret: parsed.secret, parameters: .default, at: Int64(time(nil)))
        let replay = Conversation(answer: same)
        XCTAssertEqual(fixture.authenticate(service: "host2", user: "nobody", conversation: replay), PAM_AUTH_ERR)
        XCTAssertEqual(replay.prompts, ["Verification code: "])
        let next = try TOTP.code(secret: parsed.secret, parameters: .default, at: Int64(time(nil)) + 30)
        let login = Conversation(answer: next)
        XCTAssertEqual(fixture.authenticate(service: "host2", user: "nobody", conversation: login), PAM_SUCCESS, hosts[1].output)
        XCTAssertEqual(login.prompts, ["Verification code: "])
    }

    /// A wrong code, and a code far outside the window: nothing saved, nothing counted, no audit
    /// row; the user is still un-enrolled and offered enrolment at the next login.
    func testAWrongCodeSavesNothing() throws {
        let uri = Scanned()
        for offset in [nil, Int64(40)] {
            let c = scanning(offset: offset, uri: uri)
            XCTAssertEqual(fixture.authenticate(service: "host1", user: "nobody", conversation: c), PAM_AUTH_ERR)
            XCTAssertFalse(uri.value.isEmpty, "the QR code was scanned")
            XCTAssertFalse(c.prompts.contains { $0.hasPrefix("Enrolled.") }, "\(c.prompts)")
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.users"), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE event = 'enroll'"), "0")
        awayFromStepBoundary(margin: 5)
        let again = scanning(uri: uri)
        XCTAssertEqual(fixture.authenticate(service: "host2", user: "nobody", conversation: again), PAM_SUCCESS, hosts[1].output)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "1")
    }

    /// Someone holding only the password opens the enrolment prompt on host 1; meanwhile the user
    /// enrols a factor through host 2 (totp-enroll). The right code for host 1's secret adds
    /// nothing beside it, and the user is told so.
    func testAFactorEnrolledMeanwhileOnAnotherHostWinsAndNothingIsAdded() throws {
        try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: enrollURL.path), "totp-enroll not built")
        awayFromStepBoundary(margin: 8)
        let phone = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        let phoneCode = String(decoding: try TOTP.code(secret: try Base32.decode(Array(phone.utf8)), parameters: .default,
                                                       at: Int64(time(nil))), as: UTF8.self)
        let uri = Scanned()
        var enrolled: CommandResult? = nil
        let c = scanning(uri: uri) {
            enrolled = try? runCommand([enrollURL.path, "enroll", "--user", "nobody", "--name", "phone", "--secret", "-",
                                        "--code", phoneCode, "--quiet", "--config", self.hosts[1].config], input: phone + "\n")
        }
        XCTAssertEqual(fixture.authenticate(service: "host1", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(enrolled?.status, 0, (enrolled?.stdout ?? "") + (enrolled?.stderr ?? ""))
        XCTAssertFalse(uri.value.isEmpty, "the QR code was scanned and a right code typed")
        XCTAssertTrue(c.prompts.contains { $0.contains("enrolled for you meanwhile") && $0.contains("nothing was added") }, "\(c.prompts)")
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors"), "phone", "only the owner's factor")
        XCTAssertEqual(try sql("SELECT string_agg(role, ',') FROM pam_totp.audit WHERE event = 'enroll'"), roles[1])
    }

    /// Two first enrolments of one user at once, from two hosts' roles, in the database: the one
    /// that commits first wins, the other adds nothing (enroll_first waits on the first one's row).
    func testTwoFirstEnrolmentsAtOnceOneWins() throws {
        awayFromStepBoundary(margin: 8)
        let a = Array("aaaaaaaaaaaaaaaaaaaa".utf8), b = Array("bbbbbbbbbbbbbbbbbbbb".utf8)
        let now = Int64(time(nil))
        let codeA = String(decoding: try TOTP.code(secret: a, parameters: .default, at: now), as: UTF8.self)
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        holder.arguments = ["-X", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", roles[0], "-d", db, "-c",
                            "BEGIN; SELECT pam_totp_api.enroll_first('nobody', 65534, 'first', 'sha1', 6, 30, '\\x\(hex(a))', '\(codeA)', 5); "
                            + "SELECT pg_sleep(2); COMMIT;"]
        let out = Pipe()
        holder.standardOutput = out
        holder.standardError = out
        try holder.run()
        defer { if holder.isRunning { holder.terminate() }; holder.waitUntilExit() }
        XCTAssertTrue(waitUntil(timeout: 5) {
            (try? self.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2)%' AND state = 'active' AND pid <> pg_backend_pid()")) == "1"
        })
        // pam-totpd's statement deadline is 1 s; this one waits out the first's 2 s.
        let second = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: roles[1], database: db),
                                                        statementTimeoutMilliseconds: 10_000))
        var o = ModuleOptions()
        o.adjacentIntervals = 5
        let started = Date()
        let result = try second.enrollAtLogin(user: Array("nobody".utf8), accountUID: 65534, label: Array("second".utf8), secret: b,
                                              answer: try TOTP.code(secret: b, parameters: .default, at: Int64(time(nil))),
                                              at: Int64(time(nil)), options: o)
        holder.waitUntilExit()
        XCTAssertEqual(holder.terminationStatus, 0, String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        XCTAssertEqual(result, .hadFactor, "the second waited for the first and added nothing")
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 0.5, "it waited for the first one's commit")
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors"), "first")
        XCTAssertEqual(try sql("SELECT role FROM pam_totp.audit WHERE event = 'enroll'"), roles[0])
        // The checks alone change nothing, and say that the user has a factor now.
        XCTAssertEqual(try second.enrollAtLogin(user: Array("nobody".utf8), accountUID: 65534, label: Array("x".utf8), secret: [],
                                                answer: nil, at: 0, options: o), .hadFactor)
    }

    /// pam-totpd takes enrolment at login from root callers only: a program running as the user
    /// (a screen locker) asking for its own account is refused, both the checks and the factor,
    /// and nothing is saved; the module run by such a caller does not offer it.
    func testACallerWithoutRootIsRefused() throws {
        let account = try ThrowawayAccount(prefix: "totpeal")
        defer { account.delete() }
        let secret = Array("cccccccccccccccccccc".utf8)
        let code = try TOTP.code(secret: secret, parameters: .default, at: Int64(time(nil)))
        for op in [DaemonOperation.mayEnrolAtLogin, .enrolAtLogin] {
            var o = ModuleOptions()
            o.backend = .postgresql
            let frame = try XCTUnwrap(DaemonRequest(operation: op, service: Array("i3lock".utf8), user: Array(account.name.utf8), options: o,
                                                    answer: op == .enrolAtLogin ? code : [], newLabel: Array("mine".utf8),
                                                    newSecret: op == .enrolAtLogin ? secret : []).encoded())
            let script = """
                import socket, sys
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1])
                s.sendall(bytes.fromhex(sys.argv[2]))
                reply = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
                print(reply.hex())
                """
            let r = try runCommand(["setpriv", "--reuid", "\(account.uid)", "--regid", "\(account.gid)", "--clear-groups",
                                    "/usr/bin/python3", "-c", script, hosts[0].socketPath, hex(frame)])
            XCTAssertEqual(r.status, 0, r.stderr)
            let reply = try DaemonReply.decode(hexBytes(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
            guard case .refused = reply else { return XCTFail("op \(op) from uid \(account.uid): \(reply)") }
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.users"), "0")

        // The module in a program running as the user: no offer, the ordinary prompt.
        let service = "pam_totp_fleet_eal_\(getpid())"
        try "auth required \(moduleURL.path) config=\(hosts[0].config) enroll_at_login=2999-12-31\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        defer { unlink("/etc/pam.d/" + service) }
        let locker = try runCommand(["setpriv", "--reuid", "\(account.uid)", "--regid", "\(account.gid)", "--clear-groups",
                                     "pamtester", service, account.name, "authenticate"], input: "123456\n")
        XCTAssertNotEqual(locker.status, 0)
        XCTAssertFalse((locker.stdout + locker.stderr).contains("otpauth://"), locker.stdout + locker.stderr)
        XCTAssertTrue((locker.stdout + locker.stderr).contains("Verification code: "), locker.stdout + locker.stderr)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "0")
    }

    /// The secret leaves the module only in its request to pam-totpd, and no freed block of the
    /// module's process still holds it (ConversationWipeTests' free() scanner, in fleet mode):
    /// after a wrong code and after an enrolment that saved the factor.
    func testTheModuleFreesNoUnwipedSecret() throws {
        let source = fixture.root.appendingPathComponent("enrol_driver.c")
        let driver = fixture.root.appendingPathComponent("enrol_driver").path
        try ConversationWipeTests.enrolDriverSource.write(to: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["cc", "-O1", "-Wall", "-rdynamic", "-o", driver, source.path, "-lpam"])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        let wrong = try runCommand([driver, fixture.confdir.path, "host1", "nobody", "000000"])
        XCTAssertEqual(wrong.stdout, "secret 20 freed-unwiped 0 rc 7\n", "a wrong code: " + wrong.stderr)
        awayFromStepBoundary(margin: 5)
        let right = try runCommand([driver, fixture.confdir.path, "host1", "nobody", "right"])
        XCTAssertEqual(right.stdout, "secret 20 freed-unwiped 0 rc 0\n", "an enrolment: " + right.stderr)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors WHERE user_name = 'nobody'"), "1", "the factor was saved")
    }

    /// Through a real sshd in fleet mode (the shipped password-then-code stack, its module line
    /// pointed at host 1's configuration), over keyboard-interactive, as a user with no factor:
    /// the ssh client prints the QR code, which is scanned; a wrong code saves nothing, the
    /// right one logs in and saves the factor in the database.
    func testThroughARealSSHD() throws {
        let world = try SSHDWorld()
        defer { world.cleanup() }
        let server = try world.server("sshd", moduleArguments: "config=\(hosts[0].config) enroll_at_login=2999-12-31", tag: "fleet-enrol")
        let user = try XCTUnwrap(world.users[.unenrolled])
        let script = fixture.root.appendingPathComponent("driver.py")
        try pamtesterDriver.write(to: script, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["PAMTOTP_PASSWORD"] = user.password
        environment["LC_ALL"] = "C.UTF-8"  // the client prints UTF-8 (the half blocks) only in a UTF-8 locale
        func ssh(_ mode: String) throws -> CommandResult {
            try runCommand(["python3", script.path, mode, "ssh", "-F", "/dev/null", "-p", String(server.port),
                            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                            "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=keyboard-interactive",
                            "-o", "NumberOfPasswordPrompts=1", "-o", "ConnectTimeout=5",
                            user.name + "@127.0.0.1", SSHDServer.remoteCommand], environment: environment)
        }
        let wrong = try ssh("wrong")
        XCTAssertTrue(wrong.stdout.contains("URI otpauth://totp/"), "the QR code shown by ssh scans:\n" + wrong.stdout + "\n" + server.log())
        XCTAssertFalse(wrong.stdout.contains(SSHDServer.remoteOutput), wrong.stdout)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "0", "a wrong code saves nothing")

        awayFromStepBoundary(margin: 8)
        let right = try ssh("right")
        XCTAssertTrue(right.stdout.contains(SSHDServer.remoteOutput), "logged in after enrolling:\n" + right.stdout + "\n" + server.log())
        let scanned = try XCTUnwrap(right.stdout.split(separator: "\n").first { $0.hasPrefix("URI ") }).dropFirst(4)
        let secret = try OTPAuthURI(parsing: Array(scanned.utf8)).secret
        XCTAssertEqual(try sql("SELECT encode(secret, 'hex') FROM pam_totp.factors WHERE user_name = '\(user.name)'"), hex(secret))
        XCTAssertEqual(try sql("SELECT uid FROM pam_totp.users WHERE name = '\(user.name)'"),
                       String(getpwnam(user.name).map { $0.pointee.pw_uid } ?? 0))
    }

    func hexBytes(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = s.startIndex
        while let j = s.index(i, offsetBy: 2, limitedBy: s.endIndex), i < s.endIndex {
            out.append(UInt8(s[i..<j], radix: 16) ?? 0)
            i = j
        }
        return out
    }
}
