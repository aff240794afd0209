import FleetStore
import Foundation
import MFADaemon
import MFAImport
import MFAPamStacks
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// totp-enroll on a host in fleet mode (docs/FLEET.md, docs/ARCHITECTURE.md, section 8): every
/// operation goes through pam-totpd, the only process that talks to the database. A real
/// PostgreSQL, two real pam-totpd — one with a host role (pam_totp_host), one with an admin
/// role (pam_totp_admin) — and the built totp-enroll, as root with --config and as an
/// unprivileged user through its set-uid copy and the system's PAM stack.
final class FleetEnrollTests: XCTestCase {
    var cluster: PostgresCluster!
    var host: DaemonFixture!
    var admin: DaemonFixture!
    let db = "fleet"
    let phoneB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    let keyB32 = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"

    override func setUpWithError() throws {
        guard FileManager.default.isExecutableFile(atPath: enrollURL.path) else { throw XCTSkip("totp-enroll not built") }
        cluster = try startFleetCluster(database: db)
        try sql("UPDATE pam_totp.settings SET max_window = 3, max_failures = 100, min_lockout = 0")
        try sql("""
            DROP ROLE IF EXISTS pamtotp_enrol_host; CREATE ROLE pamtotp_enrol_host LOGIN; GRANT pam_totp_host TO pamtotp_enrol_host;
            DROP ROLE IF EXISTS pamtotp_enrol_admin; CREATE ROLE pamtotp_enrol_admin LOGIN; GRANT pam_totp_admin TO pamtotp_enrol_admin
            """)
        host = try daemon(role: "pamtotp_enrol_host")
        admin = try daemon(role: "pamtotp_enrol_admin")
    }

    func daemon(role: String) throws -> DaemonFixture {
        let d = try DaemonFixture()
        try """
            backend = postgresql
            postgresql = \(cluster.conninfo(user: role, database: db))
            socket = \(d.socketPath)
            store = \(d.store)
            max_failures = 100
            lockout = 0

            """.write(toFile: d.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(d.config, 0o644), 0)
        try d.start()
        return d
    }

    override func tearDown() {
        host?.cleanup()
        admin?.cleanup()
        cluster?.stop()
        cluster = nil
    }

    @discardableResult
    func sql(_ q: String) throws -> String { try cluster.psql(q, database: db) }

    func enroll(_ args: [String], config: String? = nil, input: String = "") throws -> CommandResult {
        try runCommand([enrollURL.path] + args + ["--config", config ?? host.config], input: input)
    }

    func code(_ b32: String, offset: Int64 = 0) throws -> String {
        String(decoding: try currentCode(try Base32.decode(Array(b32.utf8)), offsetSteps: offset), as: UTF8.self)
    }

    /// One login through the host's daemon, as pam_totp.so sends it.
    func login(_ user: String, _ answer: String) throws -> AuthOutcome? {
        var o = ModuleOptions()
        o.backend = .postgresql
        o.adjacentIntervals = 3
        let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("fleet-enrol".utf8), user: Array(user.utf8),
                                                options: o, answer: Array(answer.utf8)).encoded())
        let fd = DaemonTests.connectTo(host.socketPath)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        XCTAssertTrue(DaemonTests.send(fd, frame))
        guard let bytes = DaemonTests.readAll(fd), case .outcome(let o) = try DaemonReply.decode(bytes) else { return nil }
        return o
    }

    /// Nothing is ever written to the host's own store directory in fleet mode.
    func assertNothingLocal(_ file: StaticString = #filePath, _ line: UInt = #line) {
        for d in [host, admin].compactMap({ $0 }) {
            XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: d.store)) ?? ["?"], [], file: file, line: line)
        }
    }

    /// totp-enroll status in fleet mode showed every factor's drift as 0 (the database learned
    /// none): a device 3 steps ahead, accepted through the host's daemon, is now learned by the
    /// database and shown as on a host, in text and JSON; the jump is in the audit trail.
    func testStatusShowsTheDriftTheDatabaseLearned() throws {
        awayFromStepBoundary(margin: 5)
        let enrolled = try enroll(["enroll", "--user", "root", "--name", "phone", "--secret", "-", "--code", try code(phoneB32), "--quiet"],
                                  input: phoneB32 + "\n")
        XCTAssertEqual(enrolled.status, 0, enrolled.stdout + enrolled.stderr)
        let before = try enroll(["status", "--user", "root"])
        XCTAssertEqual(before.status, 0, before.stderr)
        XCTAssertFalse(before.stdout.contains("steps ("), before.stdout)
        // The device runs 3 steps ahead of the database's clock (the window here is 3).
        guard case .success? = try login("root", try code(phoneB32, offset: 3)) else { return XCTFail("a code 3 steps ahead") }
        let text = try enroll(["status", "--user", "root"])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertTrue(text.stdout.contains("+3 steps (+90 s)"), text.stdout)
        let json = try enroll(["status", "--user", "root", "--json"])
        XCTAssertEqual(json.status, 0, json.stderr)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let factor = try XCTUnwrap(((object["users"] as? [[String: Any]])?.first?["factors"] as? [[String: Any]])?.first)
        XCTAssertEqual(factor["drift_steps"] as? Int, 3, json.stdout)
        XCTAssertEqual(factor["drift_seconds"] as? Int, 90, json.stdout)
        XCTAssertEqual(try sql("SELECT detail FROM pam_totp.audit WHERE event = 'success' ORDER BY id DESC LIMIT 1"),
                       "clock drift jumped from 0 to +3 steps (check the device's clock)")
        // Followed as on a host: the device now 5 ahead is inside ±3 of +3.
        guard case .success? = try login("root", try code(phoneB32, offset: 5)) else { return XCTFail("a code 5 steps ahead after +3") }
        XCTAssertTrue(try enroll(["status", "--user", "root"]).stdout.contains("+3 steps (+90 s)"), "bounded to ±3, the window")
    }

    func testRootManagesEnrolmentsThroughTheDaemon() throws {
        awayFromStepBoundary(margin: 5)
        // enroll: the secret on stdin, the proving code on the command line.
        let enrolled = try enroll(["enroll", "--user", "root", "--name", "phone", "--secret", "-", "--code", try code(phoneB32), "--quiet"],
                                  input: phoneB32 + "\n")
        XCTAssertEqual(enrolled.status, 0, enrolled.stdout + enrolled.stderr)
        XCTAssertTrue(enrolled.stdout.contains("Enrolled factor \"phone\" for root"), enrolled.stdout)
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors WHERE user_name = 'root'"), "phone")
        XCTAssertEqual(try sql("SELECT uid FROM pam_totp.users WHERE name = 'root'"), "0")
        assertNothingLocal()
        // The proving code is used; the next one logs in once, on any host.
        guard case .wrongCode(replayed: true, _, _)? = try login("root", try code(phoneB32)) else { return XCTFail("the enrolment code is used") }
        let next = try code(phoneB32, offset: 1)
        guard case .success? = try login("root", next) else { return XCTFail("the new factor logs in") }
        guard case .wrongCode(replayed: true, _, _)? = try login("root", next) else { return XCTFail("once") }

        // A taken label, or the same secret again: refused by the database, nothing changed.
        let taken = try enroll(["enroll", "--user", "root", "--name", "phone", "--secret", "-", "--code", try code(keyB32), "--quiet"],
                               input: keyB32 + "\n")
        XCTAssertNotEqual(taken.status, 0)
        XCTAssertTrue(taken.stderr.contains("already exists"), taken.stderr)
        let sameSecret = try enroll(["enroll", "--user", "root", "--name", "tablet", "--secret", "-", "--code", try code(phoneB32), "--quiet"],
                                    input: phoneB32 + "\n")
        XCTAssertNotEqual(sameSecret.status, 0)
        XCTAssertTrue(sameSecret.stderr.contains("already enrolled"), sameSecret.stderr)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "1")

        // A second factor (SHA-256, 8 digits), list and status: everything but a secret.
        let eight = try OTPParameters(algorithm: .sha256, digits: 8, period: 30)
        let keyCode = String(decoding: try currentCode(try Base32.decode(Array(keyB32.utf8)), eight), as: UTF8.self)
        let second = try enroll(["enroll", "--user", "root", "--name", "key", "--algorithm", "sha256", "--digits", "8",
                                 "--secret", "-", "--code", keyCode, "--quiet"], input: keyB32 + "\n")
        XCTAssertEqual(second.status, 0, second.stderr)
        let list = try enroll(["list", "--user", "root"])
        XCTAssertEqual(list.status, 0, list.stderr)
        for want in ["phone", "key", "SHA256", "8"] { XCTAssertTrue(list.stdout.contains(want), "\(want): \(list.stdout)") }
        XCTAssertTrue(list.stdout.contains("Recovery codes: none"), list.stdout)
        let status = try enroll(["status", "--user", "root", "--json"])
        XCTAssertEqual(status.status, 0, status.stderr)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        let users = try XCTUnwrap(json["users"] as? [[String: Any]])
        XCTAssertEqual((users.first?["factors"] as? [[String: Any]])?.compactMap { $0["label"] as? String }, ["phone", "key"])
        for out in [list.stdout, status.stdout] {
            XCTAssertFalse(out.contains(phoneB32) || out.contains(keyB32), "no secret in any output")
        }

        // Recovery codes: shown once, stored as hashes in the database, each logs in once.
        let made = try enroll(["recovery-codes", "--user", "root"])
        XCTAssertEqual(made.status, 0, made.stderr)
        let codes = made.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
        XCTAssertEqual(codes.count, 10, made.stdout)
        XCTAssertEqual(try sql("SELECT cardinality(hashes) FROM pam_totp.recovery WHERE user_name = 'root'"), "10")
        XCTAssertEqual(try login("root", codes[4]), .recoveryCode(remaining: 9))
        guard case .wrongCode? = try login("root", codes[4]) else { return XCTFail("a recovery code works once") }
        XCTAssertTrue(try enroll(["list", "--user", "root"]).stdout.contains("Recovery codes: 9 of 10 unused"))

        // remove: one factor; the last one only with root's say-so (it is root here).
        let removed = try enroll(["remove", "key", "--user", "root"])
        XCTAssertEqual(removed.status, 0, removed.stderr)
        XCTAssertTrue(removed.stdout.contains("1 factor left"), removed.stdout)
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors"), "phone")

        // Failures, then unlock: a host role may not (clear error, nothing cleared); the admin
        // daemon may.
        // (The replayed recovery code above was the first failure.)
        for _ in 0..<3 { _ = try login("root", "000000") }
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp.users WHERE name = 'root'"), "4")
        let refused = try enroll(["unlock", "--user", "root"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("pam_totp_admin"), refused.stderr)
        // A refusal is a refusal: nothing was changed, and totp-enroll says so (it said "may or
        // may not have been made", as for a lost reply).
        XCTAssertFalse(refused.stderr.contains("may or may not"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("nothing was changed"), refused.stderr)
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp.users WHERE name = 'root'"), "4")
        let unlocked = try enroll(["unlock", "--user", "root"], config: admin.config)
        XCTAssertEqual(unlocked.status, 0, unlocked.stderr)
        XCTAssertTrue(unlocked.stdout.contains("4 consecutive failures cleared"), unlocked.stdout)
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp.users WHERE name = 'root'"), "0")

        // Everyone's status: the admin role only.
        XCTAssertTrue(try enroll(["status", "--all"]).stderr.contains("pam_totp_admin"))
        let all = try enroll(["status", "--all"], config: admin.config)
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertTrue(all.stdout.contains("root (uid 0): 1 factor"), all.stdout)

        // purge (admin): nothing left in the database; a host role may not.
        XCTAssertNotEqual(try enroll(["purge", "--user", "root"]).status, 0)
        let purged = try enroll(["purge", "--user", "root"], config: admin.config)
        XCTAssertEqual(purged.status, 0, purged.stderr)
        XCTAssertTrue(purged.stdout.contains("removed from the database"), purged.stdout)
        XCTAssertEqual(try sql("SELECT (SELECT count(*) FROM pam_totp.users) + (SELECT count(*) FROM pam_totp.factors)"), "0")
        assertNothingLocal()
    }

    /// A pam_google_authenticator file moves into the database: the secret as a factor, the
    /// scratch codes as recovery codes.
    /// import-pskc through a host's daemon (role pam_totp_host): the token is saved with its
    /// serial and logs in (RFC 4226's counter-0 code); the same token for another user is
    /// refused by the database (a token is one user's) and nothing is saved for them. Before,
    /// the import's check listed every user, which only pam_totp_admin may: every host's import failed.
    func testImportPSKCThroughAHostsDaemon() throws {
        let dir = try makeTemporaryDirectory("pamtotp-fleet-pskc")
        defer { removeTemporaryDirectory(dir) }
        let file = dir.appendingPathComponent("tokens.xml").path
        try """
            <?xml version="1.0" encoding="UTF-8"?>
            <KeyContainer Version="1.0" xmlns="urn:ietf:params:xml:ns:keyprov:pskc">
              <KeyPackage>
                <DeviceInfo><Manufacturer>Test</Manufacturer><SerialNo>F-1</SerialNo></DeviceInfo>
                <Key Id="F-1" Algorithm="urn:ietf:params:xml:ns:keyprov:pskc:hotp">
                  <AlgorithmParameters><ResponseFormat Length="6" Encoding="DECIMAL"/></AlgorithmParameters>
                  <Data>
                    <Secret><PlainValue>MTIzNDU2Nzg5MDEyMzQ1Njc4OTA=</PlainValue></Secret>
                    <Counter><PlainValue>0</PlainValue></Counter>
                  </Data>
                </Key>
              </KeyPackage>
            </KeyContainer>

            """.write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(file, 0o600), 0)
        let r = try enroll(["import-pskc", file, "--assign", "F-1=root", "--name", "fob"])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(try sql("SELECT label || ' ' || kind || ' ' || serial FROM pam_totp.factors WHERE user_name = 'root'"), "fob hotp F-1")
        let again = try enroll(["import-pskc", file, "--assign", "F-1=nobody"])
        XCTAssertNotEqual(again.status, 0)
        XCTAssertTrue(again.stderr.contains("already another user's factor") && again.stderr.contains("nothing was imported"), again.stderr)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors WHERE user_name = 'nobody'"), "0")
        guard case .success? = try login("root", "755224") else { return XCTFail("the imported token's counter-0 code logs in") }
        // What a host's role is told of the token: no counter (an admin's only) and not whether
        // or when a login used it. list and status say "unknown", not "never" or "next 0" (a
        // counter the host does not know), and no period (issue 35, item 7).
        let list = try enroll(["list", "--user", "root"])
        XCTAssertEqual(list.status, 0, list.stderr)
        let row = try XCTUnwrap(list.stdout.split(separator: "\n").first { $0.hasPrefix("fob") }, list.stdout)
        XCTAssertTrue(row.hasSuffix("  unknown") && !row.contains("next") && !row.contains("30s"), String(row))
        XCTAssertFalse(list.stdout.contains("COUNTER"), "no counter is known here: \(list.stdout)")
        let status = try enroll(["status", "--user", "root", "--json"])
        XCTAssertEqual(status.status, 0, status.stderr)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        let fob = try XCTUnwrap(((doc["users"] as? [[String: Any]])?.first?["factors"] as? [[String: Any]])?.first, status.stdout)
        XCTAssertEqual(fob["kind"] as? String, "hotp")
        XCTAssertEqual(fob["digits"] as? Int, 6)
        for key in ["period", "counter", "used", "last_used", "last_used_step", "drift_steps"] {
            XCTAssertTrue(fob[key] is NSNull, "\(key) is not known to a host: \(fob)")
        }
        assertNothingLocal()
    }

    func testImportGoogleAuthenticatorThroughTheDaemon() throws {
        let dir = try makeTemporaryDirectory("pamtotp-fleet-ga")
        defer { removeTemporaryDirectory(dir) }
        let file = dir.appendingPathComponent("google_authenticator").path
        try "\(keyB32)\n\" RATE_LIMIT 3 30\n\" WINDOW_SIZE 3\n\" TOTP_AUTH\n12345678\n87654321\n".write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(file, 0o400), 0)
        let r = try enroll(["import-google-authenticator", file, "--user", "root"])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(try sql("SELECT label FROM pam_totp.factors WHERE user_name = 'root'"), "google-authenticator")
        XCTAssertEqual(try sql("SELECT cardinality(hashes) FROM pam_totp.recovery WHERE user_name = 'root'"), "2")
        XCTAssertEqual(try login("root", "87654321"), .recoveryCode(remaining: 1))
        guard case .success? = try login("root", try code(keyB32, offset: 1)) else { return XCTFail("the imported secret logs in") }
        assertNothingLocal()
    }

    /// A change whose reply never came (pam-totpd's workers were busy past totp-enroll's 5 s
    /// deadline) must not be reported as "NOT saved, the previous codes still work" while the
    /// daemon commits it afterwards: the user would throw away the only codes that work.
    /// Replay: root's status goes through, then totp-enroll blocks writing the codes to a full
    /// pipe; meanwhile a row lock on root's row in the database and 6 code checks of root stuck
    /// on it (1 s each, the statement timeout, recording nothing) fill root's lane (one worker
    /// per account at a time), so the replace request waits behind them past the deadline.
    func testALostReplyIsNotReportedAsNothingChanged() throws {
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var rng = SystemRandomNumberGenerator()
        try owner.enroll(user: Array("root".utf8), accountUID: 0,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0,
                                            secret: try Base32.decode(Array(phoneB32.utf8))), importedCodes: nil, using: &rng)
        try owner.enroll(user: Array("nobody".utf8), accountUID: 65534,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0,
                                            secret: try Base32.decode(Array(keyB32.utf8))), importedCodes: nil, using: &rng)
        // Root logs in through this host first: its proof lets the host change root's codes
        // (migration 008).
        guard case .success? = try login("root", try code(phoneB32, offset: 1)) else { return XCTFail("root logs in through the host") }
        let first = try enroll(["recovery-codes", "--user", "root"])
        XCTAssertEqual(first.status, 0, first.stderr)
        func codes(_ out: String) -> [String] {
            out.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
        }
        let oldCodes = codes(first.stdout)
        XCTAssertEqual(oldCodes.count, 10)

        // totp-enroll's standard output: a pipe filled to the brim, so that it stops (after its
        // status request) when it writes the new codes.
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        let flags = fcntl(fds[1], F_GETFL)
        _ = fcntl(fds[1], F_SETFL, flags | O_NONBLOCK)
        var junk = [UInt8](repeating: 0x2E, count: 4096)
        while write(fds[1], &junk, junk.count) > 0 {}
        var one: UInt8 = 0x2E
        while write(fds[1], &one, 1) > 0 {}
        _ = fcntl(fds[1], F_SETFL, flags)
        let dir = try makeTemporaryDirectory("pamtotp-fleet-lost")
        defer { removeTemporaryDirectory(dir) }
        let errPath = dir.appendingPathComponent("stderr").path
        FileManager.default.createFile(atPath: errPath, contents: nil)
        let p = Process()
        p.executableURL = enrollURL
        p.arguments = ["recovery-codes", "--user", "root", "--config", host.config]
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle(fileDescriptor: fds[1], closeOnDealloc: false)
        p.standardError = try XCTUnwrap(FileHandle(forWritingAtPath: errPath))
        try p.run()
        close(fds[1])
        // Wait until it sits in the write.
        for _ in 0..<100 {
            let wchan = (try? String(contentsOfFile: "/proc/\(p.processIdentifier)/wchan", encoding: .utf8)) ?? ""
            if wchan.contains("pipe") { break }
            usleep(50_000)
        }
        // A row lock every code check of root waits on (up to the statement timeout), held 12 s.
        let locker = Process()
        locker.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        locker.arguments = ["psql", "-X", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", "postgres", "-d", db,
                            "-c", "BEGIN; SELECT 1 FROM pam_totp.users WHERE name = 'root' FOR UPDATE; SELECT pg_sleep(12); COMMIT;"]
        locker.standardOutput = FileHandle.nullDevice
        try locker.run()
        for _ in 0..<100 {
            if (try? sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(12)%' AND state = 'active' AND pid <> pg_backend_pid()")) == "1" { break }
            usleep(50_000)
        }
        var o = ModuleOptions()
        o.backend = .postgresql
        let blocker = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("busy".utf8), user: Array("root".utf8),
                                                  options: o, answer: Array("000000".utf8)).encoded())
        var held: [Int32] = []
        for _ in 0..<6 {
            let fd = DaemonTests.connectTo(host.socketPath)
            XCTAssertGreaterThanOrEqual(fd, 0)
            XCTAssertTrue(DaemonTests.send(fd, blocker))
            held.append(fd)
        }
        usleep(200_000)
        // Let totp-enroll go on: its replace request now waits behind the 40.
        var printed: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fds[0], &chunk, chunk.count)
            if n <= 0 { break }
            printed += chunk[0..<n]
        }
        close(fds[0])
        p.waitUntilExit()
        locker.waitUntilExit()
        for fd in held { _ = DaemonTests.readAll(fd, timeout: 15_000); close(fd) }
        sleep(1)
        let stderr = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
        let newCodes = codes(String(decoding: printed, as: UTF8.self))
        XCTAssertEqual(newCodes.count, 10, stderr)
        XCTAssertTrue(stderr.contains("5 s"), "the replay did not lose the reply: \(p.terminationStatus) \(stderr)")
        // What the user was told must be what happened.
        let newOutcome = try login("root", try XCTUnwrap(newCodes.first))
        let oldOutcome = try login("root", try XCTUnwrap(oldCodes.first))
        let newWork = newOutcome == .recoveryCode(remaining: 9), oldWork = oldOutcome == .recoveryCode(remaining: 9)
        print("lost reply: exit \(p.terminationStatus), new codes \(String(describing: newOutcome)), old codes \(String(describing: oldOutcome)): \(stderr)")
        XCTAssertNotEqual(newWork, oldWork, "exactly one set is in place")
        // Saved: success. Not saved: a failure (pam-totpd drops an admin request whose caller
        // has gone), which may hedge, never the other way round.
        XCTAssertEqual(p.terminationStatus == 0, newWork, stderr)
        XCTAssertFalse(newWork && stderr.contains("were NOT saved"), "told 'NOT saved' about codes that work: \(stderr)")
    }

    /// totp-enroll is set-uid root, so the kernel reports its connections as root's, which
    /// pam-totpd's per-user caps exempt (docs/ARCHITECTURE.md, section 4.15): an unprivileged user
    /// running it in a loop got root's unbounded share of the queue. Its requests must count
    /// against the user who ran it (the peer's real uid). Replay: the user's 8 own requests
    /// (the per-user queue cap) stuck on a row lock; their `totp-enroll list` must be "busy",
    /// as a 9th request of theirs is, not served as root's.
    func testTotpEnrollCountsAgainstTheUserWhoRanIt() throws {
        try XCTSkipUnless(isRoot, "needs root: useradd, a set-uid copy, /etc/pam.d and /etc/security")
        let fixture = try SetUIDFixture(prefix: "totpq", service: SetUIDFixture.passwordAndModuleService)
        defer { fixture.cleanup() }
        let siteConfig = "/etc/security/pam_totp.conf"
        let saved = FileManager.default.contents(atPath: siteConfig)
        defer {
            if let saved { FileManager.default.createFile(atPath: siteConfig, contents: saved) } else { unlink(siteConfig) }
        }
        try (try String(contentsOfFile: host.config, encoding: .utf8)).write(toFile: siteConfig, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(siteConfig, 0o644), 0)
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var rng = SystemRandomNumberGenerator()
        try owner.enroll(user: Array(fixture.user.utf8), accountUID: fixture.uid,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0,
                                            secret: try Base32.decode(Array(phoneB32.utf8))), importedCodes: nil, using: &rng)
        func list() throws -> CommandResult {
            try runCommand(["setpriv", "--reuid=\(fixture.uid)", "--regid=\(fixture.gid)", "--clear-groups", fixture.binary, "list"])
        }
        let idle = try list()
        XCTAssertEqual(idle.status, 0, idle.stderr)
        XCTAssertTrue(idle.stdout.contains("phone"), idle.stdout)

        // The user's own code checks, each held by a row lock until the statement timeout (1 s):
        // 8 of them fill the user's share of the queue for a second or so.
        let locker = Process()
        locker.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        locker.arguments = ["psql", "-X", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", "postgres", "-d", db,
                            "-c", "BEGIN; SELECT 1 FROM pam_totp.users WHERE name = '\(fixture.user)' FOR UPDATE; SELECT pg_sleep(6); COMMIT;"]
        locker.standardOutput = FileHandle.nullDevice
        try locker.run()
        defer { locker.waitUntilExit() }
        for _ in 0..<100 {
            if (try? sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(6)%' AND state = 'active' AND pid <> pg_backend_pid()")) == "1" { break }
            usleep(50_000)
        }
        var o = ModuleOptions()
        o.backend = .postgresql
        let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("flood".utf8), user: Array(fixture.user.utf8),
                                                options: o, answer: Array("000000".utf8)).encoded())
        let dir = try makeTemporaryDirectory("pamtotp-fleet-flood")
        defer { removeTemporaryDirectory(dir) }
        XCTAssertEqual(chmod(dir.path, 0o755), 0)
        let framePath = dir.appendingPathComponent("frame").path
        XCTAssertTrue(FileManager.default.createFile(atPath: framePath, contents: Data(frame)))
        XCTAssertEqual(chmod(framePath, 0o644), 0)
        let flood = Process()
        flood.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        flood.arguments = ["setpriv", "--reuid=\(fixture.uid)", "--regid=\(fixture.gid)", "--clear-groups", "/usr/bin/python3", "-c", """
            import socket, sys, time
            frame = open(sys.argv[2], 'rb').read()
            held = []
            for _ in range(8):
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(frame); held.append(s)
            print('sent', flush=True)
            time.sleep(4)
            """, host.socketPath, framePath]
        let out = Pipe()
        flood.standardOutput = out
        try flood.run()
        defer { flood.waitUntilExit() }
        _ = out.fileHandleForReading.availableData  // "sent"
        usleep(100_000)
        let busy = try list()
        XCTAssertNotEqual(busy.status, 0, "served as root's while the user's share was full: \(busy.stdout)")
        XCTAssertTrue(busy.stderr.contains("busy"), busy.stderr)
    }

    /// Root on one host cannot change the factors of a user enrolled elsewhere without that
    /// user's code through this host (migration 008: a compromised host would otherwise add its
    /// own factor for everyone); the admin daemon can, and so can the host once the user logged
    /// in through it.
    func testRootOnAHostNeedsTheUsersCodeOrTheAdminRole() throws {
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var rng = SystemRandomNumberGenerator()
        try owner.enroll(user: Array("root".utf8), accountUID: 0,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0,
                                            secret: try Base32.decode(Array(phoneB32.utf8))), importedCodes: nil, using: &rng)
        awayFromStepBoundary(margin: 5)
        let add = ["enroll", "--user", "root", "--name", "key", "--secret", "-", "--code", try code(keyB32), "--quiet"]
        let refused = try enroll(add, input: keyB32 + "\n")
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("needs a current code of that user"), refused.stderr)
        for args in [["remove", "phone", "--user", "root"], ["recovery-codes", "--user", "root"]] {
            let r = try enroll(args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains("needs a current code of that user"), "\(args): \(r.stderr)")
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "1")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.recovery"), "0")
        let byAdmin = try enroll(add, config: admin.config, input: keyB32 + "\n")
        XCTAssertEqual(byAdmin.status, 0, byAdmin.stderr)
        guard case .success? = try login("root", try code(phoneB32, offset: 1)) else { return XCTFail("root logs in through the host") }
        let removed = try enroll(["remove", "key", "--user", "root"])
        XCTAssertEqual(removed.status, 0, removed.stderr)
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors"), "phone")
    }

    /// pam-totpd down: a clear error naming it, and nothing written anywhere.
    func testDaemonDownIsAClearErrorAndNothingIsWrittenLocally() throws {
        host.cleanup()
        host = nil
        let config = admin.config.replacingOccurrences(of: "pam_totp.conf", with: "down.conf")
        try (try String(contentsOfFile: admin.config, encoding: .utf8))
            .replacingOccurrences(of: admin.socketPath, with: admin.socketPath + ".gone")
            .write(toFile: config, atomically: true, encoding: .utf8)
        for args in [["list", "--user", "root"], ["enroll", "--user", "root", "--secret", phoneB32, "--code", "000000", "--quiet"],
                     ["unlock", "--user", "root"], ["status", "--all"]] {
            let r = try enroll(args, config: config)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains("pam-totpd: not running"), "\(args): \(r.stderr)")
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.users"), "0")
        assertNothingLocal()
    }

    /// A caller without root that speaks the protocol itself (skipping totp-enroll's checks)
    /// is refused, even about its own account, and nothing changes.
    func testACallerWithoutRootCannotManageEnrolmentsOverTheSocket() throws {
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var rng = SystemRandomNumberGenerator()
        try owner.enroll(user: Array("nobody".utf8), accountUID: 65534,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0,
                                            secret: try Base32.decode(Array(phoneB32.utf8))), importedCodes: nil, using: &rng)
        let dir = try makeTemporaryDirectory("pamtotp-fleet-raw")
        defer { removeTemporaryDirectory(dir) }
        XCTAssertEqual(chmod(dir.path, 0o755), 0)
        var replies: [String] = []
        for request in [AdminRequest.purge(user: Array("nobody".utf8)),
                        .removeFactor(user: Array("nobody".utf8), uid: 65534, label: Array("phone".utf8), mayRemoveLast: true),
                        .enroll(user: Array("nobody".utf8), uid: 65534,
                                factor: try Factor(label: Array("mine".utf8), parameters: .default, created: 0,
                                                   secret: Array("attackersecret123456".utf8)), importedCodes: nil)] {
            let frame = try XCTUnwrap(request.encoded())
            let path = dir.appendingPathComponent("frame").path
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(frame)))
            XCTAssertEqual(chmod(path, 0o644), 0)
            let r = try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c", """
                import socket, sys
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(open(sys.argv[2], 'rb').read())
                out = b''
                while True:
                    b = s.recv(4096)
                    if not b: break
                    out += b
                sys.stdout.write(out.hex())
                """, host.socketPath, path])
            XCTAssertEqual(r.status, 0, r.stderr)
            let bytes = stride(from: 0, to: r.stdout.count, by: 2).compactMap { i -> UInt8? in
                let s = r.stdout.index(r.stdout.startIndex, offsetBy: i)
                return UInt8(r.stdout[s..<r.stdout.index(s, offsetBy: 2)], radix: 16)
            }
            guard case .refused(let why) = try AdminReply.decode(bytes) else { return XCTFail("\(request) was not refused") }
            replies.append(why.string)
        }
        XCTAssertTrue(replies.allSatisfy { $0.contains("needs root") }, "\(replies)")
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors WHERE user_name = 'nobody'"), "phone")
    }

    /// An unprivileged user, as they meet it: the set-uid tool, the password through
    /// /etc/pam.d/totp-enroll whose pam_totp (fleet mode, through the daemon) asks for a code
    /// once the user has a factor — and totp-enroll does not ask for a second one (in the same
    /// 30-s step it would be a replay), because the daemon remembers which process it accepted
    /// a code for. Nothing lands in the local store.
    func testUnprivilegedUserEnrolsThroughTheDaemon() throws {
        try XCTSkipUnless(isRoot, "needs root: useradd, a set-uid copy, /etc/pam.d and /etc/security")
        let fixture = try SetUIDFixture(prefix: "totpf", service: SetUIDFixture.passwordAndModuleService)
        defer { fixture.cleanup() }
        let siteConfig = "/etc/security/pam_totp.conf"
        let saved = FileManager.default.contents(atPath: siteConfig)
        defer {
            if let saved { FileManager.default.createFile(atPath: siteConfig, contents: saved) } else { unlink(siteConfig) }
        }
        try (try String(contentsOfFile: host.config, encoding: .utf8)).write(toFile: siteConfig, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(siteConfig, 0o644), 0)
        func asUser(_ args: [String], input: String) throws -> CommandResult {
            try runCommand(["setsid", "-w", "setpriv", "--reuid=\(fixture.uid)", "--regid=\(fixture.gid)", "--clear-groups",
                            fixture.binary] + args, input: input)
        }
        func labels() throws -> String { try sql("SELECT coalesce(string_agg(label, ',' ORDER BY id), '') FROM pam_totp.factors WHERE user_name = '\(fixture.user)'") }

        awayFromStepBoundary(margin: 8)
        // The first factor: the password alone (not enrolled yet: nullok).
        let first = try asUser(["--name", "phone", "--secret", phoneB32, "--qr", "none", "--code", try code(phoneB32)],
                               input: fixture.password + "\n")
        XCTAssertEqual(first.status, 0, first.stdout + first.stderr)
        XCTAssertEqual(try labels(), "phone")
        XCTAssertEqual(try sql("SELECT uid FROM pam_totp.users WHERE name = '\(fixture.user)'"), "\(fixture.uid)")
        // A second factor: the password and ONE current code, asked by the stack's pam_totp.
        let second = try asUser(["--name", "tablet", "--secret", keyB32, "--qr", "none", "--code", try code(keyB32, offset: 1)],
                                input: fixture.password + "\n" + (try code(phoneB32, offset: 1)) + "\n")
        XCTAssertEqual(second.status, 0, second.stdout + second.stderr)
        XCTAssertFalse(second.stderr.contains("Verification code: Verification code:"), second.stderr)
        XCTAssertEqual(try labels(), "phone,tablet")
        // A wrong code at the stack's prompt changes nothing.
        let wrong = try asUser(["remove", "tablet"], input: fixture.password + "\n000000\n")
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertEqual(try labels(), "phone,tablet")
        // list needs no password; another user's records stay out of reach.
        let list = try asUser(["list"], input: "")
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertTrue(list.stdout.contains("tablet"), list.stdout)
        for args in [["list", "--user", "root"], ["list", "--config", admin.config], ["unlock", "--user", fixture.user]] {
            let r = try asUser(args, input: "")
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains("root only"), "\(args): \(r.stderr)")
        }
        // Nothing in the local default store for this user.
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.storePath + "/" + fixture.user))
        assertNothingLocal()
        // The new factor logs in through the daemon.
        let outcome = try login(fixture.user, try code(keyB32, offset: 2))
        guard case .success? = outcome else { return XCTFail("the second factor logs in: \(String(describing: outcome))") }
    }
}
