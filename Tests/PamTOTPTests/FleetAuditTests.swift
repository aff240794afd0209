import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// The fleet's audit trail (a new admin's trial: in fleet mode the only record of who logged in
/// where, who was locked out and who changed what was syslog on each host). A real PostgreSQL,
/// a host pam-totpd (pam_totp_host) and an admin pam-totpd (pam_totp_admin), the built
/// totp-enroll: every login outcome and every change appends one row in its own transaction,
/// `totp-enroll audit` reads them through the admin daemon, and no host role can read or alter
/// them (sql/migrations/003_audit.sql, sql/api.sql).
final class FleetAuditTests: XCTestCase {
    var cluster: PostgresCluster!
    var host: DaemonFixture!
    var admin: DaemonFixture!
    let db = "fleet"
    let phoneB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    let keyB32 = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
    let hostRole = "pamtotp_audit_host"
    let adminRole = "pamtotp_audit_admin"

    override func setUpWithError() throws {
        guard FileManager.default.isExecutableFile(atPath: enrollURL.path) else { throw XCTSkip("totp-enroll not built") }
        cluster = try startFleetCluster(database: db)
        try sql("UPDATE pam_totp.settings SET max_window = 3, max_failures = 100, min_lockout = 0")
        try sql("""
            DROP ROLE IF EXISTS \(hostRole); CREATE ROLE \(hostRole) LOGIN; GRANT pam_totp_host TO \(hostRole);
            DROP ROLE IF EXISTS \(adminRole); CREATE ROLE \(adminRole) LOGIN; GRANT pam_totp_admin TO \(adminRole)
            """)
        host = try daemon(role: hostRole)
        admin = try daemon(role: adminRole)
    }

    func daemon(role: String) throws -> DaemonFixture {
        let d = try DaemonFixture()
        try """
            backend = postgresql
            postgresql = \(cluster.conninfo(user: role, database: db))
            socket = \(d.socketPath)
            store = \(d.store)
            max_failures = 3
            lockout = 600

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
    func sql(_ q: String, user: String = "postgres") throws -> String { try cluster.psql(q, user: user, database: db) }

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
        o.maxFailures = 3
        o.lockoutSeconds = 600
        let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("fleet-audit".utf8), user: Array(user.utf8),
                                                options: o, answer: Array(answer.utf8)).encoded())
        let fd = DaemonTests.connectTo(host.socketPath)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        XCTAssertTrue(DaemonTests.send(fd, frame))
        guard let bytes = DaemonTests.readAll(fd), case .outcome(let o) = try DaemonReply.decode(bytes) else { return nil }
        return o
    }

    /// The events as `totp-enroll audit --json` gives them.
    func auditJSON(_ extra: [String] = []) throws -> [[String: Any]] {
        let r = try enroll(["audit", "--json"] + extra, config: admin.config)
        XCTAssertEqual(r.status, 0, r.stderr)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], r.stdout)
        return try XCTUnwrap(doc["events"] as? [[String: Any]])
    }

    func testEveryLoginOutcomeAndChangeIsInTheTrailAndNoCodeOrSecret() throws {
        awayFromStepBoundary(margin: 8)
        let started = Int64(time(nil))
        // Enrol (host role, a first factor needs no proof), log in, make recovery codes.
        let enrolCode = try code(phoneB32)
        let enrolled = try enroll(["enroll", "--user", "root", "--name", "phone", "--secret", "-", "--code", enrolCode, "--quiet"],
                                  input: phoneB32 + "\n")
        XCTAssertEqual(enrolled.status, 0, enrolled.stderr)
        let next = try code(phoneB32, offset: 1)
        guard case .success? = try login("root", next) else { return XCTFail("the new factor logs in") }
        guard case .wrongCode(replayed: true, _, _)? = try login("root", next) else { return XCTFail("once") }
        let made = try enroll(["recovery-codes", "--user", "root"])
        XCTAssertEqual(made.status, 0, made.stderr)
        let recovery = made.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
        XCTAssertEqual(recovery.count, 10)
        XCTAssertEqual(try login("root", recovery[0]), .recoveryCode(remaining: 9))
        // Three wrong codes (the third starts the lockout), then one refused while locked out.
        let wrong = ["918273", "827364", "736455"]
        for w in wrong { _ = try login("root", w) }
        guard case .lockedOut? = try login("root", "645546") else { return XCTFail("locked out after 3 failures") }
        // Another user (the trail's --user filter), then the admin's unlock and purge.
        let other = try enroll(["enroll", "--user", "daemon", "--name", "key", "--secret", "-", "--code", try code(keyB32), "--quiet"],
                               input: keyB32 + "\n")
        XCTAssertEqual(other.status, 0, other.stderr)
        XCTAssertEqual(try enroll(["unlock", "--user", "root"], config: admin.config).status, 0)
        XCTAssertEqual(try enroll(["remove", "key", "--user", "daemon"], config: admin.config).status, 0)
        XCTAssertEqual(try enroll(["purge", "--user", "root"], config: admin.config).status, 0)

        let events = try auditJSON()
        let summary = events.map { "\($0["event"] as? String ?? "?"):\($0["user"] as? String ?? "?"):\($0["role"] as? String ?? "?")" }
        XCTAssertEqual(summary, [
            "enroll:root:\(hostRole)", "success:root:\(hostRole)", "failure:root:\(hostRole)", "recovery-codes:root:\(hostRole)",
            "recovery:root:\(hostRole)", "failure:root:\(hostRole)", "failure:root:\(hostRole)", "failure:root:\(hostRole)",
            "locked:root:\(hostRole)", "enroll:daemon:\(hostRole)", "unlock:root:\(adminRole)", "remove:daemon:\(adminRole)",
            "purge:root:\(adminRole)",
        ])
        XCTAssertEqual(events[0]["factor"] as? String, "phone")
        XCTAssertEqual(events[1]["factor"] as? String, "phone")
        XCTAssertEqual(events[2]["detail"] as? String, "a used code")
        XCTAssertEqual(events[4]["detail"] as? String, "9 recovery codes left")
        XCTAssertEqual(events[7]["failures"] as? Int, 3)
        let lockedUntil = try XCTUnwrap(events[7]["locked_until"] as? Int, "the third failure started the lockout")
        XCTAssertGreaterThanOrEqual(lockedUntil, Int(started) + 600)
        XCTAssertEqual(events[8]["locked_until"] as? Int, lockedUntil)
        XCTAssertEqual(events[0]["uid"] as? Int, 0)
        for e in events {
            let t = try XCTUnwrap(e["time"] as? Int)
            XCTAssertTrue(Int(started) - 5 <= t && t <= Int(time(nil)) + 5, "the database's clock: \(t)")
        }

        // Nothing in the table or any output is a code, a recovery code or a secret.
        let table = try sql("SELECT string_agg(concat_ws('|', at, role, account, uid, event, label, failures, locked_until, detail), E'\\n' ORDER BY id) FROM pam_totp.audit")
        let text = try enroll(["audit"], config: admin.config)
        XCTAssertEqual(text.status, 0, text.stderr)
        for out in [table, text.stdout] {
            for secret in [enrolCode, next, phoneB32, keyB32, "645546"] + wrong + recovery + recovery.map({ $0.replacingOccurrences(of: "-", with: "") }) {
                XCTAssertFalse(out.contains(secret), "\(secret) in: \(out)")
            }
        }
        // The text form: one line per event, saying who, what, by which role and until when.
        let lines = text.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 13, text.stdout)
        XCTAssertTrue(lines[7].contains("failure  user root (uid 0)  by \(hostRole): wrong code; 3 consecutive failures; locked out until "),
                      lines[7])
        XCTAssertTrue(lines[10].contains("unlock  user root (uid 0)  by \(adminRole): 3 failures cleared, a lockout until "), lines[10])

        // --user, --since and --limit.
        XCTAssertEqual(try auditJSON(["--user", "daemon"]).compactMap { $0["event"] as? String }, ["enroll", "remove"])
        XCTAssertEqual(try auditJSON(["--limit", "2"]).count, 2)
        XCTAssertEqual(try auditJSON(["--since", "1h"]).count, 13)
        XCTAssertEqual(try auditJSON(["--since", String(Int(time(nil)) + 3600)]).count, 0)
        let none = try enroll(["audit", "--since", "2099-01-01"], config: admin.config)
        XCTAssertEqual(none.stdout, "(no events)\n")
        let badDate = try enroll(["audit", "--since", "2026-02-31"], config: admin.config)
        XCTAssertNotEqual(badDate.status, 0)
        XCTAssertTrue(badDate.stderr.contains("not a time"), badDate.stderr)

        // A host's daemon may not read it: a clear refusal naming the role it needs.
        let refused = try enroll(["audit"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("pam_totp_admin"), refused.stderr)
        // Nor may a user without root ask.
        let asUser = try runCommand(["/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", enrollURL.path, "audit"])
        XCTAssertNotEqual(asUser.status, 0)
    }

    /// Hosts only append, through the functions: a host role (and an admin role) can neither
    /// read nor change the table, nor call the function that appends or the one that reads.
    func testAHostRoleCanNeitherReadNorAlterTheTrail() throws {
        awayFromStepBoundary(margin: 5)
        let enrolled = try enroll(["enroll", "--user", "root", "--name", "phone", "--secret", "-", "--code", try code(phoneB32), "--quiet"],
                                  input: phoneB32 + "\n")
        XCTAssertEqual(enrolled.status, 0, enrolled.stderr)
        _ = try login("root", "918273")
        let before = try sql("SELECT string_agg(id || event, ',' ORDER BY id) FROM pam_totp.audit")
        XCTAssertEqual(before, "1enroll,2failure")
        for role in [hostRole, adminRole] {
            for statement in [
                "SELECT count(*) FROM pam_totp.audit",
                "INSERT INTO pam_totp.audit (at, role, account, event) VALUES (0, 'x', 'root', 'success')",
                "UPDATE pam_totp.audit SET event = 'success'",
                "DELETE FROM pam_totp.audit",
                "TRUNCATE pam_totp.audit",
                "ALTER TABLE pam_totp.audit DROP COLUMN detail",
                "DROP TABLE pam_totp.audit",
                "SELECT nextval('pam_totp.audit_id_seq')",
                "SELECT pam_totp_api.audit_append('success', 'root', 0, 'phone', 0, 0, NULL)",
                "UPDATE pam_totp.settings SET audit_days = 1",
            ] {
                XCTAssertThrowsError(try sql(statement, user: role), "\(role): \(statement)") { error in
                    XCTAssertTrue("\(error)".contains("permission denied") || "\(error)".contains("must be owner"), "\(role): \(error)")
                }
            }
        }
        XCTAssertThrowsError(try sql("SELECT * FROM pam_totp_api.audit_trail(NULL, 0, 0, 10)", user: hostRole)) { error in
            XCTAssertTrue("\(error)".contains("permission denied"), "\(error)")
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp_api.audit_trail(NULL, 0, 0, 10)", user: adminRole), "2")
        XCTAssertEqual(try sql("SELECT string_agg(id || event, ',' ORDER BY id) FROM pam_totp.audit"), before, "nothing changed")
        // A host's login appends exactly one row; a change rolled back takes its row with it.
        _ = try login("root", "827364")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit"), "3")
        try sql("BEGIN; SELECT pam_totp_api.remove_factor('root', 0, 'phone', true); ROLLBACK", user: hostRole)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE event = 'remove'"), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.factors"), "1")
    }

    /// More events than one reply holds (pages of about 3 KB, 100 rows a query) come whole and
    /// in order through the admin daemon.
    func testManyEventsComeInPages() throws {
        try sql("""
            INSERT INTO pam_totp.audit (at, role, account, event, detail)
            SELECT extract(epoch FROM now())::bigint - 1000 + i, 'host_' || (i % 7), 'user' || (i % 13), 'failure', repeat('d', i % 200)
              FROM generate_series(1, 333) i
            """)
        let events = try auditJSON()
        XCTAssertEqual(events.compactMap { $0["id"] as? Int }, Array(1...333))
        XCTAssertEqual(events.last?["detail"] as? String, String(repeating: "d", count: 333 % 200))
        XCTAssertEqual(try auditJSON(["--user", "user5"]).count, 333 / 13 + (333 % 13 >= 5 ? 1 : 0))
    }

    /// Rows older than settings.audit_days go, a few per new event, and newer ones stay; an
    /// attempt a host began and never finished is in the trail as a counted failure.
    func testRetentionAndUnfinishedAttempts() throws {
        awayFromStepBoundary(margin: 5)
        let enrolled = try enroll(["enroll", "--user", "root", "--name", "phone", "--secret", "-", "--code", try code(phoneB32), "--quiet"],
                                  input: phoneB32 + "\n")
        XCTAssertEqual(enrolled.status, 0, enrolled.stderr)
        try sql("UPDATE pam_totp.settings SET audit_days = 30")
        try sql("""
            INSERT INTO pam_totp.audit (at, role, account, event, detail)
            SELECT extract(epoch FROM now())::bigint - 31 * 86400 - i, 'old', 'root', 'failure', 'old row ' || i FROM generate_series(1, 20) i;
            INSERT INTO pam_totp.audit (at, role, account, event, detail)
            VALUES (extract(epoch FROM now())::bigint - 29 * 86400, 'old', 'root', 'failure', 'kept')
            """)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE role = 'old'"), "21")
        for (i, w) in ["918273", "827364", "736455"].enumerated() {
            _ = try login("root", w)
            XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE role = 'old'"), String(21 - min(20, 8 * (i + 1))))
        }
        XCTAssertEqual(try sql("SELECT detail FROM pam_totp.audit WHERE role = 'old'"), "kept")

        // An attempt begun by the host's role and never finished (a killed host between the two
        // steps): an hour on, the next login's sweep records it.
        try sql("UPDATE pam_totp.users SET locked_until = 0")
        let attempt = try sql("SELECT pam_totp_api.login_begin('root', 0, '555555', 3, 3, 600, false)", user: hostRole)
        XCTAssertFalse(attempt.isEmpty)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE event = 'unfinished'"), "0")
        try sql("UPDATE pam_totp.attempts SET begun = begun - 3700")
        _ = try login("root", "444444")
        XCTAssertEqual(try sql("SELECT role || ':' || account || ':' || failures FROM pam_totp.audit WHERE event = 'unfinished'"),
                       "\(hostRole):root:4")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.attempts"), "0")
    }
}
