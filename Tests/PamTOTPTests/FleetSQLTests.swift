import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The fleet schema on a real PostgreSQL 15 (docs/ARCHITECTURE.md, section 8): migrations (embedded =
/// files, idempotent), the SQL verifier as a second implementation of RFC 6238 (vectors and
/// random oathtool cross-checks), the catalogue (a host role reads no table and no function
/// returns a secret), and one-time use under concurrency.
final class FleetSQLTests: XCTestCase {
    var cluster: PostgresCluster!
    let db = "fleet"

    override func setUpWithError() throws {
        cluster = try startFleetCluster(database: db)
    }

    override func tearDown() {
        cluster?.stop()
        cluster = nil
    }

    func sql(_ q: String, user: String = "postgres") throws -> String { try cluster.psql(q, user: user, database: db) }
    func login(_ select: String, _ arguments: String, user: String = "postgres") throws -> String {
        try cluster.login(select, arguments, user: user, database: db)
    }

    // MARK: - Migrations

    func testEmbeddedMigrationsAreTheFiles() throws {
        let dir = packageRoot.appendingPathComponent("sql/migrations")
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".sql") }.sorted()
        XCTAssertEqual(Migrations.all.map(\.name), files, "every file under sql/migrations, in Sources/CFleetSQL/fleet_sql.c")
        for (m, f) in zip(Migrations.all, files) {
            let text = try String(contentsOf: dir.appendingPathComponent(f), encoding: .utf8)
            XCTAssertEqual(m.sql, text, "\(f): Sources/CFleetSQL/fleet_sql.c embeds another file under this name")
            XCTAssertEqual(m.version, Int(f.prefix(3)))
        }
        let api = try String(contentsOf: packageRoot.appendingPathComponent("sql/api.sql"), encoding: .utf8)
        XCTAssertEqual(Migrations.api, api)
    }

    func testInitDatabaseIsIdempotent() throws {
        // setUp applied everything once; a second run changes nothing.
        let again = try Migrator.migrate(conninfo: cluster.conninfo(database: db))
        XCTAssertEqual(again.from, Migrations.all.last?.version)
        XCTAssertEqual(again.to, again.from)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.schema_version"), String(Migrations.all.count))
        XCTAssertEqual(try sql("SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolname LIKE 'pam_totp_%'"),
                       "pam_totp_admin,pam_totp_host,pam_totp_pooled,pam_totp_sender")
        XCTAssertEqual(try sql("SELECT bool_and(NOT rolcanlogin) FROM pg_roles WHERE rolname LIKE 'pam_totp_%'"), "t")
        // A second database in the same cluster: the roles exist already, which is fine.
        try cluster.psql("CREATE DATABASE fleet2")
        let other = try Migrator.migrate(conninfo: cluster.conninfo(database: "fleet2"))
        XCTAssertEqual(other.from, 0)
    }

    /// A database at version 1 with an enrolment and a used step is upgraded in place: the
    /// data stays, the API works on it.
    func testUpgradeFromVersionOneKeepsTheData() throws {
        try cluster.psql("CREATE DATABASE fleet_up")
        let conninfo = cluster.conninfo(database: "fleet_up")
        XCTAssertEqual(try Migrator.migrate(conninfo: conninfo, upTo: 1).to, 1)
        XCTAssertEqual(try cluster.psql("SELECT to_regnamespace('pam_totp_api') IS NULL", database: "fleet_up"), "t",
                       "the API is made only at the last version")
        try cluster.psql("INSERT INTO pam_totp.users (name, uid) VALUES ('gina', 1004)", database: "fleet_up")
        try cluster.psql("INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret) "
                         + "VALUES ('gina', 'phone', 'sha1', 6, 30, 0, 1, '\\x3132333435363738393031323334353637383930')", database: "fleet_up")
        let up = try Migrator.migrate(conninfo: conninfo)
        XCTAssertEqual(up.from, 1)
        XCTAssertEqual(up.to, Migrations.all.last?.version)
        XCTAssertEqual(try cluster.login("outcome || ' ' || replayed", "'gina', 1004, '287082', 59, 1, 10, 300, false", procedure: "login_at",
                                         database: "fleet_up"), "wrong true", "the step used before the upgrade stays used")
    }

    /// Every factor has a kind (FactorKind; sql/migrations/004): factors made before the column
    /// are TOTP factors, a kind the API does not know cannot be stored, and list_factors names
    /// it. The dispatch on it is check_factor, once.
    func testAFactorHasAKindTheAPIKnows() throws {
        try cluster.psql("CREATE DATABASE fleet_kind")
        let conninfo = cluster.conninfo(database: "fleet_kind")
        XCTAssertEqual(try Migrator.migrate(conninfo: conninfo, upTo: 3).to, 3)
        func q(_ text: String) throws -> String { try cluster.psql(text, database: "fleet_kind") }
        _ = try q("INSERT INTO pam_totp.users (name, uid) VALUES ('hana', 1005)")
        _ = try q("INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret) "
              + "VALUES ('hana', 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930')")
        _ = try Migrator.migrate(conninfo: conninfo)
        XCTAssertEqual(try q("SELECT label || ' ' || kind FROM pam_totp_api.list_factors('hana')"), "phone totp")
        XCTAssertThrowsError(try q("UPDATE pam_totp.factors SET kind = 'sms' WHERE user_name = 'hana'"), "an unknown kind is refused")
        XCTAssertEqual(try q("SELECT count(*) FROM pg_proc WHERE proname = 'check_factor' AND pronamespace = 'pam_totp_api'::regnamespace"), "1")
        let code = String(decoding: try TOTP.code(secret: Array("12345678901234567890".utf8), parameters: .default, at: 59), as: UTF8.self)
        XCTAssertEqual(try cluster.login("outcome || ' ' || label", "'hana', 1005, '\(code)', 59, 1, 10, 300, false", procedure: "login_at",
                                         database: "fleet_kind"), "success phone")
    }

    /// A hardware token's serial number (sql/migrations/007): enroll takes it (p_serial,
    /// NULL by default), list_factors returns it to a host role too (it is not a secret; a
    /// token's counter stays the admin's), the audit line names it, the CHECK bounds it, and a
    /// database at version 6 upgrades with its factors' serials NULL.
    func testAFactorKeepsItsSerialAndVersionSixUpgrades() throws {
        try cluster.psql("CREATE DATABASE fleet_v6")
        let conninfo = cluster.conninfo(database: "fleet_v6")
        XCTAssertEqual(try Migrator.migrate(conninfo: conninfo, upTo: 6).to, 6)
        func q(_ text: String, user: String = "postgres") throws -> String { try cluster.psql(text, user: user, database: "fleet_v6") }
        _ = try q("INSERT INTO pam_totp.users (name, uid) VALUES ('ines', 1030)")
        _ = try q("INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind) "
              + "VALUES ('ines', 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930', 'totp')")
        let up = try Migrator.migrate(conninfo: conninfo)
        XCTAssertEqual(up.from, 6)
        XCTAssertEqual(up.to, Migrations.all.last?.version)
        XCTAssertEqual(try q("SELECT label || ':' || coalesce(serial, 'none') FROM pam_totp_api.list_factors('ines')"), "phone:none")

        _ = try q("CREATE ROLE host_s LOGIN; GRANT pam_totp_host TO host_s")
        _ = try q("SELECT pam_totp_api.enroll('ines', 1030, 'fob', 'sha1', 6, 30, 0, 4, '\\x00112233445566778899', 'hotp', 'UBHE00012345')")
        XCTAssertEqual(try q("SELECT string_agg(label || ':' || coalesce(serial, 'none') || ':' || coalesce(last_step::text, '-'), ',') "
                             + "FROM pam_totp_api.list_factors('ines')", user: "host_s"), "phone:none:0,fob:UBHE00012345:-")
        XCTAssertEqual(try q("SELECT detail FROM pam_totp.audit WHERE event = 'enroll' ORDER BY id DESC LIMIT 1"),
                       "HOTP-SHA1, 6 digits, serial UBHE00012345")
        // Called as before (no p_serial): none.
        _ = try q("SELECT pam_totp_api.enroll('ines', 1030, 'key', 'sha1', 6, 30, 0, 0, '\\x99887766554433221100')")
        XCTAssertEqual(try q("SELECT count(*) FROM pam_totp_api.list_factors('ines') WHERE serial IS NULL"), "2")
        for bad in ["''", "'\(String(repeating: "x", count: 65))'", "E'UB\\x1b[31mX'", "E'UB\\nX'"] {
            XCTAssertThrowsError(try q("SELECT pam_totp_api.enroll('ines', 1030, 'bad', 'sha1', 6, 30, 0, 0, '\\xaabbccddeeff00112233', 'totp', \(bad))"), bad)
        }
        XCTAssertEqual(try q("SELECT count(*) FROM pam_totp_api.list_factors('ines')"), "3")
        // A token is one user's: its serial for another user is refused (from a host too), for
        // the same user (a device's second key) taken.
        XCTAssertThrowsError(try q("SELECT pam_totp_api.enroll('jon', 1031, 'fob', 'sha1', 6, 30, 0, 4, '\\x0f0e0d0c0b0a09080706', 'hotp', 'UBHE00012345')",
                                   user: "host_s")) { error in
            XCTAssertTrue("\(error)".contains("already another user's factor"), "\(error)")
        }
        XCTAssertEqual(try q("SELECT count(*) FROM pam_totp.users WHERE name = 'jon'"), "0")
        _ = try q("SELECT pam_totp_api.enroll('ines', 1030, 'fob-b', 'sha1', 6, 30, 0, 4, '\\x0f0e0d0c0b0a09080706', 'hotp', 'UBHE00012345')")
        XCTAssertEqual(try q("SELECT count(*) FROM pam_totp_api.list_factors('ines') WHERE serial = 'UBHE00012345'"), "2")
    }

    /// PostgresStore carries the serial both ways (enroll's p_serial, list_factors' column).
    func testTheFleetStoreKeepsTheSerial() throws {
        let store = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var f = try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 1, counter: 3, secret: Array("12345678901234567890".utf8))
        f.serial = Array("UBHE 7".utf8)
        var rng = SystemRandomNumberGenerator()
        try store.enroll(user: Array("ulla".utf8), accountUID: 1040, factor: f, importedCodes: nil, using: &rng)
        var plain = try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: Array("abcdefghijabcdefghij".utf8))
        try store.enroll(user: Array("ulla".utf8), accountUID: 1040, factor: plain, importedCodes: nil, using: &rng)
        let status = try XCTUnwrap(try store.status(user: Array("ulla".utf8)))
        XCTAssertEqual(status.record.factors.map(\.serial), [Array("UBHE 7".utf8), []])
        plain.serial = [0x61, 0x0A]
        XCTAssertThrowsError(try store.enroll(user: Array("ulla".utf8), accountUID: 1040, factor: plain, importedCodes: nil, using: &rng))
    }

    /// The released schemas (NEWS): the last one's upgrade test stays as the schema changes.
    static let lastRelease = (name: "0.1.0", schema: 11)

    /// A database at the last release's schema, with an enrolment, a used step, failures and a
    /// lockout written as that release's tables hold them, is upgraded in place by this tree's
    /// init-database: the data stays and the API works on it.
    func testUpgradeFromTheLastReleaseKeepsTheData() throws {
        try cluster.psql("CREATE DATABASE fleet_release")
        let conninfo = cluster.conninfo(database: "fleet_release")
        XCTAssertEqual(try Migrator.migrate(conninfo: conninfo, upTo: Self.lastRelease.schema).to, Self.lastRelease.schema)
        func q(_ text: String) throws -> String { try cluster.psql(text, database: "fleet_release") }
        _ = try q("INSERT INTO pam_totp.users (name, uid, failures, locked_until) VALUES ('jo', 1006, 2, 0), ('kim', 1007, 9, 4102444800)")
        for user in ["jo", "kim"] {
            _ = try q("INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind) "
                  + "VALUES ('\(user)', 'phone', 'sha1', 6, 30, 0, 1, '\\x3132333435363738393031323334353637383930', 'totp')")
        }
        let up = try Migrator.migrate(conninfo: conninfo)
        XCTAssertEqual(up.from, Self.lastRelease.schema)
        XCTAssertEqual(up.to, Migrations.all.last?.version)
        func login(_ user: String, _ uid: Int, _ code: String) throws -> String {
            try cluster.login("outcome || ' ' || replayed || ' ' || failures", "'\(user)', \(uid), '\(code)', 59, 1, 10, 300, false",
                              procedure: "login_at", database: "fleet_release")
        }
        XCTAssertEqual(try login("jo", 1006, "287082"), "wrong true 3", "the step used before the upgrade stays used, the failures count on")
        XCTAssertEqual(try login("kim", 1007, "287082"), "locked false 9", "the lockout stays")
        let next = String(decoding: try TOTP.code(secret: Array("12345678901234567890".utf8), parameters: .default, at: 89), as: UTF8.self)
        XCTAssertEqual(try cluster.login("outcome || ' ' || failures", "'jo', 1006, '\(next)', 89, 1, 10, 300, false",
                                         procedure: "login_at", database: "fleet_release"), "success 0")
    }

    /// A database whose schema_version names a migration this tree does not have by that number
    /// (the unreleased pre-release series, whose version 1 was 001_fleet.sql; or a newer
    /// release's) is refused, and nothing in it changes.
    func testADatabaseOfAnotherSeriesIsRefusedUnchanged() throws {
        try cluster.psql("CREATE DATABASE fleet_other")
        func q(_ text: String) throws -> String { try cluster.psql(text, database: "fleet_other") }
        _ = try q("CREATE SCHEMA pam_totp; CREATE TABLE pam_totp.schema_version (version integer PRIMARY KEY, name text NOT NULL, "
              + "applied timestamptz NOT NULL DEFAULT now()); INSERT INTO pam_totp.schema_version (version, name) "
              + "VALUES (1, '001_fleet.sql'), (8, '008_changes_need_proof.sql'); CREATE TABLE pam_totp.users (name text PRIMARY KEY)")
        XCTAssertThrowsError(try Migrator.migrate(conninfo: cluster.conninfo(database: "fleet_other"))) { error in
            XCTAssertTrue("\(error)".contains("001_fleet.sql"), "\(error)")
        }
        XCTAssertEqual(try q("SELECT string_agg(version || ':' || name, ',' ORDER BY version) FROM pam_totp.schema_version"),
                       "1:001_fleet.sql,8:008_changes_need_proof.sql")
        XCTAssertEqual(try q("SELECT count(*) FROM pg_class WHERE relnamespace = 'pam_totp'::regnamespace AND relkind = 'r'"), "2")
        XCTAssertEqual(try q("SELECT to_regnamespace('pam_totp_api') IS NULL"), "t")
        // This series' own names with a version missing: refused too (4 would never be applied).
        try cluster.psql("CREATE DATABASE fleet_gap")
        _ = try cluster.psql("CREATE SCHEMA pam_totp; CREATE TABLE pam_totp.schema_version (version integer PRIMARY KEY, name text NOT NULL, "
                             + "applied timestamptz NOT NULL DEFAULT now()); INSERT INTO pam_totp.schema_version (version, name) "
                             + "VALUES (1, '001_tables.sql'), (2, '002_attempts.sql'), (3, '003_audit.sql'), (5, '005_hotp.sql')",
                             database: "fleet_gap")
        XCTAssertThrowsError(try Migrator.migrate(conninfo: cluster.conninfo(database: "fleet_gap"))) { error in
            XCTAssertTrue("\(error)".contains("version 5 as 005_hotp.sql"), "\(error)")
        }
    }

    /// A CONNINFO without TLS to a host on another machine was accepted silently (a new
    /// admin's trial): pam-totpd warns at start, on stderr and in syslog.
    func testAConninfoWithoutTLSToAnotherMachineIsWarnedAbout() {
        for (conninfo, warned) in [("host=db1.example.org dbname=pam_totp user=host_web1", true),
                                   ("host=db1.example.org sslmode=prefer", true),
                                   ("host=10.1.2.3 sslmode=disable", true),
                                   ("host=/run/postgresql,db2.example.org", true),
                                   ("postgresql://host_web1@db1.example.org/pam_totp", true),
                                   ("host=db1.example.org sslmode=verify-full sslrootcert=/etc/ssl/ca.pem", false),
                                   ("host=db1.example.org sslmode=require", false),
                                   ("host=/run/postgresql dbname=pam_totp", false),
                                   ("host=localhost", false), ("host=127.0.0.1", false), ("hostaddr=::1", false), ("dbname=x", false)] {
            let w = conninfoTLSWarning(conninfo)
            XCTAssertEqual(w != nil, warned, "\(conninfo): \(w ?? "no warning")")
        }
        XCTAssertTrue(conninfoTLSWarning("host=db1.example.org")?.contains("verify-full") ?? false)
    }

    // MARK: - The SQL verifier against RFC 6238 and oathtool

    /// RFC 6238 Appendix B: every time, every algorithm, 8 digits; 6 digits are the last six.
    func testSQLVerifierRFC6238Vectors() throws {
        let keys = ["sha1": "12345678901234567890", "sha256": "12345678901234567890123456789012",
                    "sha512": "1234567890123456789012345678901234567890123456789012345678901234"]
        let vectors: [(Int64, String, String)] = [
            (59, "sha1", "94287082"), (59, "sha256", "46119246"), (59, "sha512", "90693936"),
            (1111111109, "sha1", "07081804"), (1111111109, "sha256", "68084774"), (1111111109, "sha512", "25091201"),
            (1111111111, "sha1", "14050471"), (1111111111, "sha256", "67062674"), (1111111111, "sha512", "99943326"),
            (1234567890, "sha1", "89005924"), (1234567890, "sha256", "91819424"), (1234567890, "sha512", "93441116"),
            (2000000000, "sha1", "69279037"), (2000000000, "sha256", "90698825"), (2000000000, "sha512", "38618901"),
            (20000000000, "sha1", "65353130"), (20000000000, "sha256", "77737706"), (20000000000, "sha512", "47863826"),
        ]
        var query: [String] = []
        for (t, alg, _) in vectors {
            let key = keys[alg]!
            query.append("lpad(pam_totp_api.hotp(convert_to('\(key)', 'UTF8'), \(t / 30), '\(alg)', 8)::text, 8, '0') || ' ' || "
                         + "lpad(pam_totp_api.hotp(convert_to('\(key)', 'UTF8'), \(t / 30), '\(alg)', 6)::text, 6, '0')")
        }
        let got = try sql("SELECT " + query.joined(separator: " || ',' || ")).split(separator: ",").map(String.init)
        XCTAssertEqual(got.count, vectors.count)
        for (i, (t, alg, want)) in vectors.enumerated() {
            XCTAssertEqual(got[i], want + " " + want.suffix(6), "t=\(t) \(alg)")
        }
    }

    /// Random secrets, times, algorithms, digits and periods: SQL, MFACrypto and oathtool agree.
    func testSQLVerifierAgainstOathtoolAndMFACrypto() throws {
        var rng = SplitMix64(seed: 0xF1EE7)
        var cases: [(secret: [UInt8], t: Int64, alg: HashAlgorithm, digits: Int, period: UInt64)] = []
        for _ in 0..<60 {
            let length = 10 + Int(rng.next() % 55)
            let secret = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let alg: HashAlgorithm = [.sha1, .sha256, .sha512][Int(rng.next() % 3)]
            let digits = rng.next() % 2 == 0 ? 6 : 8
            let period: UInt64 = [30, 60, 15][Int(rng.next() % 3)]
            cases.append((secret, Int64(rng.next() % 4_000_000_000), alg, digits, period))
        }
        let query = cases.map { c in
            "lpad(pam_totp_api.hotp('\\x\(TestSupport.hex(c.secret))'::bytea, \(UInt64(c.t) / c.period), '\(c.alg.name)', \(c.digits))::text, \(c.digits), '0')"
        }.joined(separator: " || ',' || ")
        let fromSQL = try sql("SELECT " + query).split(separator: ",").map(String.init)
        XCTAssertEqual(fromSQL.count, cases.count)
        for (i, c) in cases.enumerated() {
            let o = try runCommand(["oathtool", "--totp=\(c.alg.name)", "--digits=\(c.digits)", "--time-step-size=\(c.period)s",
                                    "-N", "@\(c.t)", TestSupport.hex(c.secret)])
            XCTAssertEqual(o.status, 0, o.stderr)
            let mine = try TOTP.code(secret: c.secret, parameters: try OTPParameters(algorithm: c.alg, digits: c.digits, period: c.period), at: c.t)
            XCTAssertEqual(fromSQL[i], o.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "case \(i) \(c.alg) \(c.digits)")
            XCTAssertEqual(fromSQL[i], String(decoding: mine, as: UTF8.self), "case \(i)")
        }
    }

    func testSQLPBKDF2MatchesMFACrypto() throws {
        // RFC 7914 §11's PBKDF2-HMAC-SHA-256 vector, and MFACrypto's recovery-code hash.
        XCTAssertEqual(try sql("SELECT encode(pam_totp_api.pbkdf2_sha256('passwd'::bytea, 'salt'::bytea, 1), 'hex')"),
                       "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc")
        let salt = Array("0123456789abcdef".utf8)
        let mine = pbkdf2SHA256(password: Array("123456789012".utf8), salt: salt, iterations: 1000)
        XCTAssertEqual(try sql("SELECT encode(pam_totp_api.pbkdf2_sha256('123456789012'::bytea, '\\x\(TestSupport.hex(salt))'::bytea, 1000), 'hex')"),
                       TestSupport.hex(mine))
    }

    // MARK: - The catalogue: a host can ask, never read

    func makeHost(_ name: String, role: String = "pam_totp_host") throws {
        try sql("CREATE ROLE \(name) LOGIN; GRANT \(role) TO \(name)")
    }

    func testHostRoleReadsNoTableAndNoFunctionReturnsASecret() throws {
        try makeHost("host_a")
        try makeHost("admin_a", role: "pam_totp_admin")
        try makeHost("sender_a", role: "pam_totp_sender")
        // Every relation outside the system catalogues, every column: no SELECT (nor anything
        // else) for the host, admin or sender role, or for a login role holding them.
        for who in ["pam_totp_host", "pam_totp_admin", "pam_totp_sender", "host_a", "admin_a", "sender_a"] {
            XCTAssertEqual(try sql("""
                SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
                   AND (has_table_privilege('\(who)', c.oid, 'SELECT') OR has_table_privilege('\(who)', c.oid, 'INSERT')
                        OR has_table_privilege('\(who)', c.oid, 'UPDATE') OR has_table_privilege('\(who)', c.oid, 'DELETE'))
                """), "0", "\(who) has a privilege on a relation")
            XCTAssertEqual(try sql("""
                SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname LIKE 'pam_totp%' AND a.attnum > 0 AND NOT a.attisdropped
                   AND has_column_privilege('\(who)', c.oid, a.attnum, 'SELECT')
                """), "0", "\(who) can select a column")
        }
        XCTAssertGreaterThan(Int(try sql("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pam_totp' AND c.relkind = 'r'")) ?? 0, 4)
        // Every function a host role may execute in our schemas: none returns bytea, or has an
        // OUT column of it, and every one is SECURITY DEFINER with a pinned search_path; the one
        // procedure (login, which must commit between its two steps) runs as its caller.
        let executable = try sql("""
            SELECT p.proname || ':' || p.prokind::text || ':' || coalesce(pg_get_function_result(p.oid), pg_get_function_arguments(p.oid)) || ':'
                   || p.prosecdef || ':' || coalesce(array_to_string(p.proconfig, ';'), '')
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname LIKE 'pam_totp%' AND has_function_privilege('host_a', p.oid, 'EXECUTE') ORDER BY p.proname
            """).split(separator: "\n").map(String.init)
        // A host logs in (login, or its two steps) and enrols with proof (or, first, at login:
        // enroll_first); the imports, which set any state, are the admin's (a host changes a
        // user's state only by logging in).
        let hostFunctions = ["check_enrollable", "confirm_enrolment", "confirm_enrolment_begin", "confirm_enrolment_finish", "enroll",
                             "enroll_first", "enrolled", "enrolled_uid", "list_factors", "login",
                             "login_begin", "login_finish", "remove_factor", "replace_recovery", "send_code", "send_enrolment_code",
                             "user_status"]
        XCTAssertEqual(executable.map { String($0.prefix { $0 != ":" }) }, hostFunctions)
        for who in ["pam_totp_host", "host_a", "pam_totp_pooled"] {
            XCTAssertEqual(try sql("""
                SELECT string_agg(p.proname, ',' ORDER BY p.proname) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname LIKE 'pam_totp%' AND has_function_privilege('\(who)', p.oid, 'EXECUTE')
                """), hostFunctions.joined(separator: ","), who)
        }
        for who in ["pam_totp_admin", "admin_a"] {
            XCTAssertEqual(try sql("""
                SELECT string_agg(p.proname, ',' ORDER BY p.proname) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname LIKE 'pam_totp%' AND has_function_privilege('\(who)', p.oid, 'EXECUTE')
                """), (hostFunctions + ["add_host", "all_status", "audit_trail", "import_destination", "import_last_step", "import_state",
                                         "purge", "remove_host", "unlock"]).sorted().joined(separator: ","), who)
        }
        // The sender's role takes messages from the outbox and says how they went, nothing else
        // (it neither logs users in nor reads a table).
        for who in ["pam_totp_sender", "sender_a"] {
            XCTAssertEqual(try sql("""
                SELECT string_agg(p.proname, ',' ORDER BY p.proname) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname LIKE 'pam_totp%' AND has_function_privilege('\(who)', p.oid, 'EXECUTE')
                """), "outbox_claim,outbox_done", who)
        }
        // No function is left in the data schema; the API's schema is its own.
        XCTAssertEqual(try sql("SELECT count(*) FROM pg_proc WHERE pronamespace = 'pam_totp'::regnamespace"), "0")
        for f in executable {
            XCTAssertFalse(f.contains("bytea"), "returns bytes: \(f)")
            if f.hasPrefix("login:p:") || f.hasPrefix("confirm_enrolment:p:") {
                XCTAssertTrue(f.hasSuffix(":false:"), "a procedure that commits runs as its caller, with no SET: \(f)")
                continue
            }
            XCTAssertTrue(f.contains(":true:"), "not SECURITY DEFINER: \(f)")
            XCTAssertTrue(f.contains("search_path=pg_catalog"), "search_path not pinned: \(f)")
        }
        // Every SECURITY DEFINER function in the schema pins its search_path.
        XCTAssertEqual(try sql("""
            SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'pam_totp_api' AND p.prosecdef AND NOT coalesce(array_to_string(p.proconfig, ';') LIKE 'search_path=%', false)
            """), "0")
        // And as the host itself: the tables, the clock-taking verifiers, verify (no uid), hmac, unlock and purge are refused.
        for forbidden in ["SELECT secret FROM pam_totp.factors", "SELECT * FROM pam_totp.users", "SELECT * FROM pam_totp.recovery",
                          "SELECT * FROM pam_totp_api.judge('u', '123456', NULL, 0, 1, 10, 100, false)",
                          "SELECT pam_totp_api.login_begin_at('u', 0, '123456', 0, 1, 10, 300, false)",
                          "SELECT pam_totp_api.import_last_step('u', 'phone', 9223372036854775807)",
                          "SELECT pam_totp_api.import_state('u', 100, 9223372036854775807, -1)",
                          "SELECT pam_totp_api.hotp('\\x3132333435363738393031323334353637383930'::bytea, 1, 'sha1', 6)",
                          "SELECT pam_totp_crypto.hmac('a'::bytea, 'b'::bytea, 'sha1')",
                          "SELECT * FROM pam_totp_api.unlock('u')", "SELECT pam_totp_api.purge('u')", "SELECT * FROM pam_totp_api.all_status()",
                          "CREATE TABLE pam_totp.x (a int)", "CREATE FUNCTION pam_totp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'"] {
            XCTAssertThrowsError(try sql(forbidden, user: "host_a"), forbidden) { error in
                XCTAssertTrue("\(error)".contains("permission denied"), "\(forbidden): \(error)")
            }
        }
        // What the host may do works, and the admin's extras work for the admin.
        try sql("SELECT pam_totp_api.enroll('carol', 1000, 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930')", user: "host_a")
        XCTAssertEqual(try login("outcome", "'carol', 1000, '000000', 1, 10, 300, false", user: "host_a"), "wrong")
        XCTAssertEqual(try sql("SELECT label || ' ' || algorithm FROM pam_totp_api.list_factors('carol')", user: "host_a"), "phone sha1")
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp_api.unlock('carol')", user: "admin_a"), "1")
        XCTAssertEqual(try sql("SELECT pam_totp_api.purge('carol')", user: "admin_a"), "t")
    }

    /// A search_path without pg_temp searches pg_temp first for types and relations. A host
    /// (TEMP is PUBLIC's by default) made pg_temp.text a domain whose CHECK calls its own
    /// pg_temp function: verify_at's `text` variables ran it as the functions' owner, which
    /// read every secret. Every function in our schemas names pg_temp last.
    func testHostRoleCannotRunCodeAsTheOwnerThroughPgTemp() throws {
        try makeHost("host_t")
        let secretHex = "3132333435363738393031323334353637383930"
        try sql("SELECT pam_totp_api.enroll('tina', 1010, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(secretHex)')")
        let attack = """
            CREATE FUNCTION pg_temp.steal(v pg_catalog.text) RETURNS boolean LANGUAGE plpgsql AS $f$
            DECLARE s pg_catalog.text;
            BEGIN
              BEGIN
                SELECT pg_catalog.string_agg(pg_catalog.encode(secret, 'hex'), ',') INTO s FROM pam_totp.factors;
                RAISE NOTICE 'STOLEN as %: %', current_user, s;
              EXCEPTION WHEN others THEN NULL;
              END;
              RETURN true;
            END $f$;
            CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (pg_temp.steal(VALUE));
            CREATE DOMAIN pg_temp.bytea AS pg_catalog.bytea CHECK (pg_temp.steal('b'));
            CREATE TABLE pg_temp.settings (max_window int);
            """
        // Each call a statement of its own in the same session (a login commits between its steps).
        let calls = ["CALL pam_totp_api.login('tina', 1010, '000000', 1, 10, 300, false)",
                     "CALL pam_totp_api.login('tina', 1010, '12345678', 1, 10, 300, false)",
                     "SELECT pam_totp_api.enroll('tom', 1011, 'two', 'sha1', 6, 30, 0, 0, '\\x00112233445566778899')",
                     "SELECT count(*) FROM pam_totp_api.list_factors('tom')"]
        let r = try runCommand(["psql", "-X", "-A", "-t", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port),
                                "-U", "host_t", "-d", db, "-c", attack] + calls.flatMap { ["-c", $0] })
        let heard = r.stdout + r.stderr
        XCTAssertFalse(heard.contains(secretHex), "the host read a secret: \(heard)")
        XCTAssertFalse(heard.contains("STOLEN"), "the host's pg_temp code ran inside a SECURITY DEFINER function: \(heard)")
        XCTAssertEqual(r.status, 0, heard)
        XCTAssertEqual(r.stdout.split(separator: "\n").map { String($0.prefix { $0 != "|" }) }, ["wrong", "wrong", "1"])
        // And structurally: every function in our schemas puts pg_temp last (the login
        // procedures commit, so they carry no SET: they run as their caller, as above).
        XCTAssertEqual(try sql("""
            SELECT coalesce(string_agg(p.proname, ','), '') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname LIKE 'pam_totp%' AND n.nspname <> 'pam_totp_crypto' AND p.prokind <> 'p'
               AND NOT coalesce(array_to_string(p.proconfig, ';') ~ '^search_path=pg_catalog, [a-z_, ]*pg_temp(;|$)', false)
            """), "")
        // Every function of the API, whenever it was added, gets both settings from the one
        // place that sets them (the end of sql/api.sql); a procedure (it commits) gets none and
        // runs as its caller.
        XCTAssertEqual(try sql("""
            SELECT coalesce(string_agg(p.oid::regprocedure::text || ' ' || coalesce(array_to_string(p.proconfig, ';'), '(no SET)'), ', '), '')
              FROM pg_proc p
             WHERE p.pronamespace = 'pam_totp_api'::regnamespace
               AND CASE WHEN p.prokind = 'p' THEN p.prosecdef OR p.proconfig IS NOT NULL
                        ELSE NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pam_totp, pg_temp', 'standard_conforming_strings=on'], false) END
            """), "")
        XCTAssertGreaterThan(Int(try sql("SELECT count(*) FROM pg_proc WHERE pronamespace = 'pam_totp_api'::regnamespace AND prokind = 'f'")) ?? 0, 20)
    }

    // MARK: - An attempt is durable before its verdict is told

    /// psql as `user` on a script file (each statement sent on its own, as a client would):
    /// standard output and standard error.
    func psqlScript(_ script: String, user: String) throws -> (out: String, err: String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pamtotp-\(UUID().uuidString).sql")
        try script.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        chmod(file.path, 0o644)
        let r = try runCommand(["psql", "-X", "-A", "-t", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port),
                                "-U", user, "-d", db, "-f", file.path])
        return (r.stdout, r.stderr)
    }

    /// A host role rolled back its wrong guesses: login returned the verdict inside the
    /// caller's transaction, so a host wrapped each call in a savepoint (a DO loop with an
    /// exception block) or in BEGIN ... ROLLBACK and undid every wrong answer, uncounted
    /// (~3,100 guesses/s; a valid code of any user in 8-88 s, whose commit also recorded the
    /// host's proof for changing that user's factors). Now a verdict is told only once its
    /// attempt, counted as a failure, has committed: every variant tells nothing, and the
    /// guesses that are told are counted until the lockout, with no proof recorded.
    func testAHostCannotUndoItsWrongGuesses() throws {
        try makeHost("host_g")
        let secret = Array("12345678901234567890".utf8)
        try sql("SELECT pam_totp_api.enroll('gwen', 1020, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        try sql("UPDATE pam_totp.users SET proof_role = NULL, proof_until = 0")
        awayFromStepBoundary()
        let code = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: Int64(time(nil))), as: UTF8.self)
        // Guesses 000000-000199 and the right code, each in an exception block of a DO loop:
        // through the procedure, and through its two steps.
        let vars = "g text; o text; l text; s bigint; d int; f int; u bigint; r boolean; m int; a bigint; told int := 0"
        let guesses = "ARRAY(SELECT lpad(i::text, 6, '0') FROM generate_series(0, 199) i) || '\(code)'::text"
        let savepoints = try psqlScript("""
            DO $$ DECLARE \(vars); BEGIN
              FOREACH g IN ARRAY \(guesses) LOOP
                BEGIN
                  CALL pam_totp_api.login('gwen', 1020, g, 1, 10, 300, false, o, l, s, d, f, u, r, m);
                  told := told + 1;
                  RAISE EXCEPTION 'undo';
                EXCEPTION WHEN others THEN NULL;
                END;
                BEGIN
                  a := pam_totp_api.login_begin('gwen', 1020, g, 1, 10, 300, false);
                  SELECT x.outcome INTO o FROM pam_totp_api.login_finish(a) x;
                  told := told + 1;
                  RAISE EXCEPTION 'undo';
                EXCEPTION WHEN others THEN NULL;
                END;
              END LOOP;
              RAISE NOTICE 'verdicts told: %', told;
            END $$;
            """, user: "host_g")
        XCTAssertTrue(savepoints.err.contains("verdicts told: 0"), savepoints.out + savepoints.err)
        // The client's own transaction: BEGIN, both steps, ROLLBACK; and the procedure inside BEGIN.
        let rollback = try psqlScript("""
            BEGIN;
            SELECT pam_totp_api.login_begin('gwen', 1020, '\(code)', 1, 10, 300, false) AS a \\gset
            SELECT 'told:' || outcome FROM pam_totp_api.login_finish(:a);
            ROLLBACK;
            BEGIN;
            CALL pam_totp_api.login('gwen', 1020, '\(code)', 1, 10, 300, false);
            ROLLBACK;
            """, user: "host_g")
        XCTAssertFalse(rollback.out.contains("told:") || rollback.out.contains("success"), rollback.out)
        XCTAssertTrue(rollback.err.contains("commit login_begin first"), rollback.err)
        XCTAssertTrue(rollback.err.contains("invalid transaction termination"), rollback.err)
        XCTAssertEqual(try sql("SELECT failures || ' ' || (proof_role IS NULL) FROM pam_totp.users WHERE name = 'gwen'"), "0 true",
                       "nothing was committed, nothing told")
        // An attempt committed and never finished (a killed session) counts as a failure.
        _ = try sql("SELECT pam_totp_api.login_begin('gwen', 1020, '\(code)', 1, 10, 300, false)", user: "host_g")
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp_api.user_status('gwen')", user: "host_g"), "1")
        // Guesses the host commits are told, and counted: the 10th (the database's
        // max_failures) locks gwen out, then every answer, the right code too, is refused.
        let told = try psqlScript("""
            DO $$ DECLARE \(vars); BEGIN
              FOREACH g IN ARRAY \(guesses) LOOP
                CALL pam_totp_api.login('gwen', 1020, g, 1, 10, 300, false, o, l, s, d, f, u, r, m);
                RAISE NOTICE 'verdict %', o;
              END LOOP;
            END $$;
            """, user: "host_g")
        let verdicts = told.err.split(separator: "\n").filter { $0.contains("verdict ") }.map { String($0.split(separator: " ").last ?? "") }
        XCTAssertEqual(verdicts.count, 201, told.err)
        XCTAssertEqual(Array(verdicts.prefix(9)), Array(repeating: "wrong", count: 9), told.err)
        XCTAssertEqual(Set(verdicts.dropFirst(9)), ["locked"], "after max_failures guesses every answer is refused")
        XCTAssertEqual(try sql("SELECT failures || ' ' || (locked_until > 0) || ' ' || (proof_role IS NULL) FROM pam_totp.users WHERE name = 'gwen'"),
                       "10 true true", "the victim's failures counted, locked out, no proof recorded")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.attempts"), "1", "only the attempt never finished waits")
    }

    /// The import functions were granted to host roles: import_last_step(u, f, 2^63-1) and
    /// import_state(u, 100, 2^63-1, -1) made every code read as replayed and every recovery
    /// code spent, forever, and admin unlock did not repair it. Imports are the admin's and
    /// bounded; unlock brings a factor's last used step in the future back to now.
    func testAHostCannotBrickAUserThroughTheImports() throws {
        try makeHost("host_i")
        try makeHost("admin_i", role: "pam_totp_admin")
        let secret = Array("12345678901234567890".utf8)
        try sql("SELECT pam_totp_api.enroll('ivy', 1021, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        for call in ["SELECT pam_totp_api.import_last_step('ivy', 'phone', 9223372036854775807)",
                     "SELECT pam_totp_api.import_state('ivy', 100, 9223372036854775807, -1)"] {
            XCTAssertThrowsError(try sql(call, user: "host_i"), call) { XCTAssertTrue("\($0)".contains("permission denied"), "\($0)") }
            XCTAssertThrowsError(try sql(call, user: "admin_i"), call) { XCTAssertTrue("\($0)".contains("not a file store's"), "\($0)") }
        }
        XCTAssertEqual(try sql("SELECT last_step || ' ' || failures || ' ' || locked_until FROM pam_totp.factors, pam_totp.users WHERE name = 'ivy'"),
                       "0 0 0")
        // A user bricked before this fix: unlock makes the account usable again.
        try sql("UPDATE pam_totp.factors SET last_step = 9223372036854775807 WHERE user_name = 'ivy'")
        try sql("UPDATE pam_totp.users SET failures = 100 WHERE name = 'ivy'")
        awayFromStepBoundary()
        let now = Int64(time(nil))
        func code(_ t: Int64) throws -> String { String(decoding: try TOTP.code(secret: secret, parameters: .default, at: t), as: UTF8.self) }
        XCTAssertEqual(try login("outcome", "'ivy', 1021, '\(try code(now))', 1, 10, 300, false", user: "host_i"), "locked")
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp_api.unlock('ivy')", user: "admin_i"), "100")
        XCTAssertEqual(try login("outcome || ' ' || replayed", "'ivy', 1021, '\(try code(now))', 1, 10, 300, false", user: "host_i"), "wrong true",
                       "the step of unlock's moment counts as used")
        XCTAssertEqual(try login("outcome", "'ivy', 1021, '\(try code(now + 30))', 1, 10, 300, false", user: "host_i"), "success")
    }

    // MARK: - The verdict in one transaction

    /// A store on the owner's connection with the caller's clock (verify_at).
    func ownerStore() -> PostgresStore {
        PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)), callerClock: true)
    }

    func testHostRoleClampsTheLimitsItAsksFor() throws {
        XCTAssertEqual(try sql("SELECT max_window || ' ' || max_failures || ' ' || min_lockout FROM pam_totp.settings"), "5 10 300")
        try makeHost("host_b")
        try sql("SELECT pam_totp_api.enroll('dave', 1001, 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930')")
        // The host asks for 100 failures before a lockout and a 0 s lockout: the database's
        // max_failures (10) and min_lockout (300) apply.
        var last = ""
        for _ in 1...10 { last = try login("failures || ' ' || (locked_until > 0)", "'dave', 1001, '000000', 10, 100, 0, false", user: "host_b") }
        XCTAssertEqual(last, "10 true")
        XCTAssertEqual(try login("outcome", "'dave', 1001, '000000', 10, 100, 0, false", user: "host_b"), "locked")
    }

    // MARK: - A fleet login behaves like a host's: the window and clock drift (issue 35)

    /// Fleet mode capped the window at ±1 (settings.max_window's old default) where a host's
    /// adjacent_intervals is 5 by default: a code 3 to 5 steps off, accepted on a host, was
    /// refused. Now the host's own window applies, up to settings.max_window (default 5, a
    /// host's default): a host asking for more gets the cap, one asking for less gets its own.
    func testTheWindowIsTheHostsUpToTheSettingsCap() throws {
        XCTAssertEqual(try sql("SELECT max_window FROM pam_totp.settings"), "5", "the cap defaults to a host's default window")
        XCTAssertEqual(ModuleOptions().adjacentIntervals, 5)
        try sql("UPDATE pam_totp.settings SET max_failures = 100, min_lockout = 0")
        let secret = Array("12345678901234567890".utf8)
        let t: Int64 = 2_200_000_010
        var n = 0
        // A user of its own for every case (no drift learned from an earlier one), a code
        // `offset` steps from the caller's clock, the window the host asks for.
        func attempt(_ offset: Int64, window: Int) throws -> String {
            n += 1
            try sql("SELECT pam_totp_api.enroll('win\(n)', \(2000 + n), 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
            let code = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: t + 30 * offset), as: UTF8.self)
            return try cluster.login("outcome", "'win\(n)', \(2000 + n), '\(code)', \(t), \(window), 10, 0, false", procedure: "login_at",
                                     database: db)
        }
        for offset: Int64 in [3, -3, 4, -4, 5, -5] {
            XCTAssertEqual(try attempt(offset, window: 5), "success", "\(offset) steps off, the default window")
        }
        for offset: Int64 in [6, -6] { XCTAssertEqual(try attempt(offset, window: 5), "wrong", "\(offset): outside ±5") }
        XCTAssertEqual(try attempt(6, window: 10), "wrong", "a host asking for 10 gets the cap, 5")
        XCTAssertEqual(try attempt(2, window: 1), "wrong", "a host asking for less gets its own")
        XCTAssertEqual(try attempt(1, window: 1), "success")
        try sql("UPDATE pam_totp.settings SET max_window = 10")
        XCTAssertEqual(try attempt(8, window: 10), "success", "the DBA raised the cap")
        XCTAssertEqual(try attempt(8, window: 7), "wrong")
        try sql("UPDATE pam_totp.settings SET max_window = 2")
        XCTAssertEqual(try attempt(3, window: 5), "wrong", "the DBA lowered it")
        XCTAssertEqual(try attempt(-2, window: 5), "success")
        try sql("UPDATE pam_totp.settings SET max_window = 5")

        // A host role on the database's clock, through PostgresStore with the default options:
        // a code 4 steps off logs in; a host asking for 10 still gets ±5, so 7 steps is refused.
        try makeHost("host_w")
        let host = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: "host_w", database: db)))
        func hostLogin(_ user: String, _ offset: Int64, window: Int = TOTPVerifier.defaultAdjacentIntervals) throws -> AuthOutcome {
            n += 1
            try sql("SELECT pam_totp_api.enroll('\(user)', \(2000 + n), 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
            var o = ModuleOptions()
            o.adjacentIntervals = window
            let code = try TOTP.code(secret: secret, parameters: .default, at: Int64(time(nil)) + 30 * offset)
            return host.login(user: Array(user.utf8), account: { () throws(MFAError) -> Account? in Account(name: Array(user.utf8), uid: UInt32(2000 + n)) },
                              answer: code, previous: nil, at: 0, options: o, process: 1)
        }
        awayFromStepBoundary()
        guard case .success = try hostLogin("wendy", 4) else { return XCTFail("a code 4 steps ahead, the default window") }
        guard case .success = try hostLogin("wanda", -4) else { return XCTFail("a code 4 steps behind, the default window") }
        guard case .wrongCode(replayed: false, _, _) = try hostLogin("wilma", 7, window: 10) else {
            return XCTFail("beyond the cap: a host asking for 10 gets ±5")
        }
    }

    /// An upgrade to version 9 moves a cap still at the old default 1 to 5 (a host's default),
    /// keeps any other a DBA chose; version 10 gives every existing factor a drift of 0 (none
    /// learned), from which the first accepted code learns.
    func testUpgradeMovesTheOldWindowCapKeepsAChosenOneAndStartsDriftAtZero() throws {
        for (name, before, after) in [("fleet_w1", "1", "5"), ("fleet_w3", "3", "3"), ("fleet_w0", "0", "0")] {
            try cluster.psql("CREATE DATABASE \(name)")
            let conninfo = cluster.conninfo(database: name)
            XCTAssertEqual(try Migrator.migrate(conninfo: conninfo, upTo: 8).to, 8)
            func q(_ text: String) throws -> String { try cluster.psql(text, database: name) }
            XCTAssertEqual(try q("SELECT max_window FROM pam_totp.settings"), "1", "version 8's default")
            _ = try q("UPDATE pam_totp.settings SET max_window = \(before), min_lockout = 0")
            _ = try q("INSERT INTO pam_totp.users (name, uid) VALUES ('vera', 1090)")
            _ = try q("INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret) "
                      + "VALUES ('vera', 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930')")
            XCTAssertEqual(try Migrator.migrate(conninfo: conninfo).to, Migrations.all.last?.version)
            XCTAssertEqual(try q("SELECT max_window FROM pam_totp.settings"), after, "a cap of \(before)")
            XCTAssertEqual(try q("SELECT drift || ' ' || drift_jump_steps FROM pam_totp.factors, pam_totp.settings"),
                           "0 \(TOTPVerifier.driftJumpSteps)")
            // The kept factor logs in with a code one step ahead where the cap allows it, and learns.
            let t: Int64 = 2_200_000_010
            let code = String(decoding: try TOTP.code(secret: Array("12345678901234567890".utf8), parameters: .default, at: t + 30),
                              as: UTF8.self)
            XCTAssertEqual(try cluster.login("outcome", "'vera', 1090, '\(code)', \(t), 5, 10, 0, false", procedure: "login_at", database: name),
                           after == "0" ? "wrong" : "success")
            XCTAssertEqual(try q("SELECT drift FROM pam_totp.factors"), after == "0" ? "0" : "1")
        }
    }

    /// Fleet mode learned no clock drift: a device whose clock runs ahead failed where a host
    /// follows it. The database keeps each TOTP factor's drift and applies the host's rule
    /// (TOTPVerifier, "Clock drift"), replayed here step for step as DriftIntegrationTests does
    /// on a host: learned from an accepted code, followed, bounded to ±N, never more than 2N
    /// from the clock, the window still 2N+1 steps; a jump of 3 steps or more is in the audit
    /// trail; list_factors and the store's status show the drift.
    func testDriftIsLearnedFollowedAndBoundedAsOnAHost() throws {
        try sql("UPDATE pam_totp.settings SET max_failures = 100, min_lockout = 0")
        let secret = Array("12345678901234567890".utf8)
        for (user, uid) in [("drifter", 1070), ("steady", 1071)] {
            try sql("SELECT pam_totp_api.enroll('\(user)', \(uid), 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        }
        let t: Int64 = 2_200_000_010
        func login(_ user: String, at time: Int64, ahead: Int64, window: Int = 5) throws -> String {
            let code = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: time + ahead * 30), as: UTF8.self)
            return try cluster.login("outcome", "'\(user)', \(user == "drifter" ? 1070 : 1071), '\(code)', \(time), \(window), 100, 0, false",
                                     procedure: "login_at", database: db)
        }
        func drift(_ user: String) throws -> String { try sql("SELECT drift FROM pam_totp_api.list_factors('\(user)')") }
        XCTAssertEqual(try login("drifter", at: t, ahead: 3), "success")
        XCTAssertEqual(try drift("drifter"), "3")
        // Seven ahead: outside ±5 of the clock, inside ±5 of the learned +3; learned, bounded to +5.
        XCTAssertEqual(try login("drifter", at: t + 600, ahead: 7), "success")
        XCTAssertEqual(try drift("drifter"), "5")
        // The same device offset for a user whose drift was never learned: outside the window.
        XCTAssertEqual(try login("steady", at: t + 600, ahead: 7), "wrong")
        XCTAssertEqual(try drift("steady"), "0")
        // Never more than 2N steps from the clock: +11 is refused, +10 accepted.
        XCTAssertEqual(try login("drifter", at: t + 1200, ahead: 11), "wrong")
        XCTAssertEqual(try login("drifter", at: t + 1200, ahead: 10), "success")
        XCTAssertEqual(try drift("drifter"), "5")
        // The window is still 2N+1 steps: centred on +5, one step behind the clock is out.
        XCTAssertEqual(try login("drifter", at: t + 1800, ahead: -1), "wrong")
        // A host with a narrower window bounds the learned drift to its own N.
        XCTAssertEqual(try login("drifter", at: t + 2400, ahead: 3, window: 2), "success", "centred on +2 (5 bounded to ±2)")
        XCTAssertEqual(try drift("drifter"), "2")
        // The first code taught 0 → +3: a jump, said in the audit row of that success.
        XCTAssertEqual(try sql("SELECT string_agg(coalesce(detail, '-'), ',' ORDER BY id) FROM pam_totp.audit WHERE event = 'success' AND account = 'drifter'"),
                       "clock drift jumped from 0 to +3 steps (check the device's clock),-,-,-")
        // A host role sees the drift (it is not a secret), and so does status.
        try makeHost("host_d")
        XCTAssertEqual(try sql("SELECT label || ' ' || drift FROM pam_totp_api.list_factors('drifter')", user: "host_d"), "phone 2")
        let status = try XCTUnwrap(try PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: "host_d", database: db)))
            .status(user: Array("drifter".utf8)))
        XCTAssertEqual(status.state.drift(forLabel: Array("phone".utf8)), 2)
        XCTAssertEqual(status.state.lastUsedStep(of: status.record.factors[0]), UInt64((t + 2400) / 30 + 3))
    }

    /// The same rule as the host, checked against the host's own code: a long random walk of a
    /// device's clock (it wanders a step or two between logins, sometimes far), with windows of
    /// 0 to 10 and some wrong codes, through the file store (Authenticator.decide,
    /// TOTPVerifier) and through the database at the same times: the same verdicts, the same
    /// accepted steps, the same learned drift after every login.
    func testTheDatabaseLearnsDriftExactlyAsTheFileStoreDoes() throws {
        try sql("UPDATE pam_totp.settings SET max_window = 10, max_failures = 100, min_lockout = 0")
        let dir = try makeTemporaryDirectory("pamtotp-fleet-drift")
        defer { removeTemporaryDirectory(dir) }
        let storePath = dir.appendingPathComponent("store").path
        XCTAssertEqual(mkdir(storePath, 0o700), 0)
        let files = try Store(path: Array(storePath.utf8))
        let fleet = ownerStore()
        let secret = Array("driftwalksecret12345".utf8)
        let user = Array("walker".utf8)
        var rng = SplitMix64(seed: 0xD21F7)
        let factor = try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret)
        try files.enroll(user: user, accountUID: 1080, factor: factor, using: &rng)
        try fleet.enroll(user: user, accountUID: 1080, factor: factor, importedCodes: nil, using: &rng)
        var t: Int64 = 2_000_000_000
        var device: Int64 = 0
        var accepted = 0
        for i in 0..<150 {
            t += Int64(1 + rng.next() % 40) * 30 + Int64(rng.next() % 30)
            switch rng.next() % 10 {
            case 0: device += Int64(rng.next() % 15) - 7   // a jump
            case 1, 2, 3: device += Int64(rng.next() % 5) - 2
            default: break
            }
            device = max(-16, min(16, device))
            var o = ModuleOptions()
            o.adjacentIntervals = Int(rng.next() % 11)
            o.maxFailures = 100
            o.lockoutSeconds = 0
            let wrong = rng.next() % 8 == 0
            let answer = wrong ? Array("x".utf8) : try TOTP.code(secret: secret, parameters: .default, at: t + device * 30)
            func verdict(_ a: AuthOutcome) -> String {
                switch a {
                case .success(_, let step, _, _): return "success \(step)"
                case .wrongCode(let replayed, _, _): return replayed ? "replayed" : "wrong"
                default: return "\(a)"
                }
            }
            let onHost = verdict(files.authenticate(answer: answer, at: t, options: o, process: 1,
                                                    enrollment: try files.lookup(user: user, accountUID: 1080)))
            let inFleet = verdict(fleet.authenticate(answer: answer, at: t, options: o, process: 1,
                                                     enrollment: try fleet.lookup(user: user, accountUID: 1080)))
            let hostDrift = try files.readState(user: user).drift(forLabel: factor.label)
            let fleetDrift = try XCTUnwrap(try fleet.status(user: user)).state.drift(forLabel: factor.label)
            XCTAssertEqual(inFleet, onHost, "login \(i): device \(device), window \(o.adjacentIntervals)")
            XCTAssertEqual(fleetDrift, hostDrift, "login \(i): device \(device), window \(o.adjacentIntervals)")
            if onHost.hasPrefix("success") { accepted += 1 }
            if inFleet != onHost || fleetDrift != hostDrift { break }
        }
        XCTAssertGreaterThan(accepted, 50, "the walk exercised the window")
        print("drift walk: 150 logins, \(accepted) accepted, host and fleet agree on every verdict and drift")
    }

    /// pam-totpd's lookup-then-authenticate path as a host role: it used `verify` (a name, no
    /// uid), which hosts no longer hold (migration 007), and checked a record that was purged
    /// and enrolled again for another account between the two calls. Now authenticate is
    /// `login` with the uid the lookup saw: it works as a host, and the other account's record
    /// is unenrolled.
    func testLookupThenAuthenticateAsAHostIsBoundToTheUIDItLookedUp() throws {
        try makeHost("host_l")
        let secret = Array("12345678901234567890".utf8)
        try sql("SELECT pam_totp_api.enroll('lena', 1015, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        try sql("UPDATE pam_totp.settings SET max_window = 10")
        let host = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: "host_l", database: db)))
        var o = ModuleOptions()
        o.adjacentIntervals = 10
        func code(_ offset: Int64) throws -> [UInt8] { try TOTP.code(secret: secret, parameters: .default, at: Int64(time(nil)) + 30 * offset) }
        func lookup(_ uid: UInt32) throws -> Enrollment<PostgresStore> {
            try host.lookup(user: Array("lena".utf8)) { () throws(MFAError) -> Account? in Account(name: Array("lena".utf8), uid: uid) }
        }
        guard case .enrolled(let seen) = try lookup(1015) else { return XCTFail("lena is enrolled") }
        guard case .success = host.authenticate(answer: try code(-2), at: 0, options: o, process: 1, enrolled: seen) else {
            return XCTFail("a host authenticates after its lookup")
        }
        // Between lookup and authenticate the name is purged and enrolled for another account.
        try sql("SELECT pam_totp_api.purge('lena')")
        try sql("SELECT pam_totp_api.enroll('lena', 2015, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        let r = host.authenticate(answer: try code(-1), at: 0, options: o, process: 1, enrolled: seen)
        guard case .unenrolled = r else { return XCTFail("the record of uid 2015 answered for uid 1015's lookup: \(r)") }
        XCTAssertEqual(try sql("SELECT last_step || ' ' || (SELECT failures FROM pam_totp_api.user_status('lena')) FROM pam_totp_api.list_factors('lena')"),
                       "0 0", "nothing recorded on the other account's record")
    }

    /// PL/pgSQL bodies compile with the caller's settings: a host with
    /// standard_conforming_strings off broke pbkdf2_sha256's '\\x00000001' literal, so every
    /// wrong recovery-shaped answer (8 digits: an 8-digit factor's code) of a user with
    /// recovery codes raised after the factors were checked and before the failure was
    /// counted: unlimited guesses. Every wrong answer is counted whatever the session says.
    func testHostSessionSettingsCannotStopAFailureBeingCounted() throws {
        try makeHost("host_s")
        try sql("SELECT pam_totp_api.enroll('olga', 1013, 'phone', 'sha1', 8, 30, 0, 0, '\\x3132333435363738393031323334353637383930')")
        try sql("SELECT pam_totp_api.replace_recovery('olga', 1013, 1, 1000, '\\x30313233343536373839616263646566', ARRAY['\\x00'::bytea], NULL)")
        for call in ["CALL pam_totp_api.login('olga', 1013, '12345678', 1, 10, 300, false)",
                     "CALL pam_totp_api.login('olga', 1013, '87654321', 1, 10, 300, false)"] {
            let r = try runCommand(["psql", "-X", "-A", "-t", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port),
                                    "-U", "host_s", "-d", db, "-c", "SET standard_conforming_strings = off", "-c", call])
            XCTAssertEqual(r.stdout.prefix { $0 != "|" }, "wrong", call + ": " + r.stderr)
        }
        XCTAssertEqual(try sql("SELECT failures FROM pam_totp_api.user_status('olga')", user: "host_s"), "2", "both wrong answers counted")
    }

    /// An 8-digit code is recovery-shaped: verify_at ran the recovery PBKDF2 only when no
    /// factor matched, so a wrong code took far longer than a right one. A host with a
    /// statement_timeout between the two had every wrong guess rolled back uncounted while a
    /// right one committed. A timeout that drops a wrong answer must drop a right one too.
    func testAStatementTimeoutCannotTellARightCodeFromAWrongOne() throws {
        try makeHost("host_c")
        let secret = Array("12345678901234567890".utf8)
        try sql("SELECT pam_totp_api.enroll('cleo', 1014, 'phone', 'sha1', 8, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        // The slowest recovery hashing the schema takes: the wrong path is ~100000 HMACs.
        try sql("SELECT pam_totp_api.replace_recovery('cleo', 1014, 1, 100000, '\\x30313233343536373839616263646566', ARRAY['\\x00'::bytea], NULL)")
        func asHost(_ call: String, timeout: String) throws -> (out: String, err: String) {
            let r = try runCommand(["psql", "-X", "-A", "-t", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port),
                                    "-U", "host_c", "-d", db, "-c", "SET statement_timeout = '\(timeout)'", "-c", call])
            return (String(r.stdout.prefix { $0 != "|" }), r.stderr)
        }
        awayFromStepBoundary()
        let code = String(decoding: try TOTP.code(secret: secret, parameters: try OTPParameters(algorithm: .sha1, digits: 8, period: 30),
                                                  at: Int64(time(nil))), as: UTF8.self)
        let wrong = code == "00000000" ? "11111111" : "00000000"
        let call = { (answer: String) in "CALL pam_totp_api.login('cleo', 1014, '\(answer)', 1, 10, 300, false)" }
        let w = try asHost(call(wrong), timeout: "40ms")
        XCTAssertTrue(w.err.contains("statement timeout"), "the wrong answer's hashing outlasts 40 ms: \(w)")
        let r = try asHost(call(code), timeout: "40ms")
        XCTAssertNotEqual(r.out, "success", "a right code got through where a wrong one was dropped uncounted")
        XCTAssertTrue(r.err.contains("statement timeout"), "\(r)")
        // Without the timeout the same code works (the dropped attempts changed nothing).
        XCTAssertEqual(try asHost(call(code), timeout: "0").out, "success")
    }

    /// The lockout came every max_failures-th failure, with max_failures the host's (clamped
    /// to at most the database's 10) on each call: a host choosing, per attempt, a value that
    /// does not divide the next count (one always exists below 2520) was never locked out and
    /// went straight to the 100-failure cap. The database's own max_failures locks regardless.
    func testHostChoosingMaxFailuresPerAttemptCannotAvoidTheLockout() throws {
        try makeHost("host_m")
        try sql("SELECT pam_totp_api.enroll('mia', 1011, 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930')")
        var outcomes: [String] = []
        for _ in 1...12 {
            let failures = Int(try sql("SELECT failures FROM pam_totp_api.user_status('mia')", user: "host_m")) ?? -1
            let m = (2...10).first { (failures + 1) % $0 != 0 } ?? 10
            outcomes.append(try login("outcome || ' ' || (locked_until > 0)", "'mia', 1011, '000000', 1, \(m), 300, false", user: "host_m"))
        }
        XCTAssertEqual(outcomes[9], "wrong true", "the 10th failure locks, whatever the host asked for: \(outcomes)")
        XCTAssertEqual(outcomes[10], "locked true", "\(outcomes)")
        // A stricter host still gets its own, earlier lockouts.
        try sql("SELECT pam_totp_api.enroll('max', 1012, 'phone', 'sha1', 6, 30, 0, 0, '\\x3132333435363738393031323334353637383930')")
        let strict = try (1...3).map { _ in
            try login("outcome || ' ' || (locked_until > 0)", "'max', 1012, '000000', 1, 3, 300, false", user: "host_m")
        }
        XCTAssertEqual(strict, ["wrong false", "wrong false", "wrong true"])
    }

    /// Counter-based factors (HOTP) in the SQL verifier: the look-ahead is the settings row's
    /// hotp_window, the counter moves past each accepted code under the row lock (20 concurrent
    /// logins with one code: one success per round), a replay and a code past the window are
    /// refused, and a host role reads no counter.
    func testHOTPCountersInTheSQLVerifier() throws {
        let secret = Array("12345678901234567890".utf8)
        let key = HMACKey(algorithm: .sha1, key: secret)
        func code(_ c: UInt64) -> String { String(decoding: HOTP.code(key: key, counter: c, digits: 6), as: UTF8.self) }
        // Enrolled with the code of counter 4 (a factor whose first unused counter is 5).
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        var rng = SystemRandomNumberGenerator()
        try owner.enroll(user: Array("tina".utf8), accountUID: 1007,
                         factor: try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 0, counter: 5, secret: secret),
                         importedCodes: nil, using: &rng)
        XCTAssertEqual(try sql("SELECT kind || ' ' || last_step FROM pam_totp.factors WHERE user_name = 'tina'"), "hotp 4")
        try sql("UPDATE pam_totp.settings SET hotp_window = 3, max_failures = 100, min_lockout = 0")
        func attempt(_ answer: String) throws -> String {
            try cluster.login("outcome || ' ' || coalesce(step::text, '-') || ' ' || replayed", "'tina', 1007, '\(answer)', 1, 1, 100, 0, false",
                              procedure: "login_at", database: db)
        }
        XCTAssertEqual(try attempt(code(4)), "wrong - true", "the enrolment's code is used")
        XCTAssertEqual(try attempt(code(9)), "resync - false", "5, 6 and 7 are the window: 9 is past it, a resync's first code")
        XCTAssertEqual(try attempt(code(7)), "success 7 false")
        XCTAssertEqual(try attempt(code(7)), "wrong - true", "a code never works twice")
        XCTAssertEqual(try attempt(code(6)), "wrong - false", "a skipped counter never comes back")
        // A host role sees the factor, never its counter (nor, as every factor, its secret).
        try makeHost("host_a")
        XCTAssertEqual(try sql("SELECT kind || ' ' || coalesce(last_step::text, 'hidden') FROM pam_totp_api.list_factors('tina')", user: "host_a"),
                       "hotp hidden")
        XCTAssertEqual(try sql("SELECT kind || ' ' || last_step FROM pam_totp_api.list_factors('tina')"), "hotp 7")

        // Resync in the SQL verifier: the window is 8, 9, 10; hotp_resync_window 40 reaches 11..47.
        try sql("UPDATE pam_totp.settings SET hotp_resync_window = 40")
        func pair(_ first: UInt64, _ second: UInt64) throws -> String {
            try cluster.login("outcome || ' ' || coalesce(step::text, '-') || ' ' || failures",
                              "'tina', 1007, '\(code(second))', 1, 1, 100, 0, false, '\(code(first))'", procedure: "login_at", database: db)
        }
        XCTAssertEqual(try attempt(code(30)), "resync - false", "a far code alone is never accepted")
        XCTAssertEqual(try attempt(code(48)), "wrong - false", "past the reach")
        XCTAssertEqual(try pair(30, 32), "wrong - 5", "not the following code: a failure (2 before, the far code, the one past the reach, this)")
        XCTAssertEqual(try pair(47, 48), "success 48 0", "the reach's last counter and the one after it")
        XCTAssertEqual(try sql("SELECT last_step FROM pam_totp.factors WHERE user_name = 'tina'"), "48")
        XCTAssertEqual(try pair(47, 48), "wrong - 1", "the pair never works twice")
        try sql("UPDATE pam_totp.settings SET hotp_resync_window = 0")
        XCTAssertEqual(try attempt(code(60)), "wrong - false", "hotp_resync_window = 0: no resync")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE detail LIKE '%resync%'"), "2")
        try sql("UPDATE pam_totp.settings SET hotp_resync_window = 100")
        // Back in step: the window follows the resynced counter.
        XCTAssertEqual(try attempt(code(49)), "success 49 false")

        // 20 concurrent logins with one code, 10 rounds: exactly one success each.
        let connections = try (0..<20).map { _ in try PQConnection(conninfo: cluster.conninfo(database: db)) }
        for round in 1...10 {
            let answer = code(49 + UInt64(round) * 2)
            let values = try XCTUnwrap(runAtOnce(20) { w in
                let id = try? connections[w].execute("SELECT pam_totp_api.login_begin_at('tina', 1007, $1, 1, 1, 100, 0, false)", [.text(answer)])
                let rows = try? connections[w].execute("SELECT outcome FROM pam_totp_api.login_finish($1)",
                                                        [.text(id?.first?.first.flatMap { $0 } ?? "")])
                return rows?.first?.first.flatMap { $0 } == "success" ? 1 : (rows == nil ? -2 : 0)
            }, "round \(round) did not finish")
            XCTAssertFalse(values.contains(-2), "a statement failed in round \(round)")
            XCTAssertEqual(values.filter { $0 == 1 }.count, 1, "round \(round): exactly one of 20")
        }
        XCTAssertEqual(try sql("SELECT last_step FROM pam_totp.factors WHERE user_name = 'tina'"), "69")

        // Review findings: a counter past an integer's range is scanned (the loop was int4 and
        // raised for every answer), unlock never moves a token's counter (it rewound one past
        // the current TOTP step), and no counter is stored past 2^48.
        try owner.enroll(user: Array("uma".utf8), accountUID: 1008,
                         factor: try Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 0, counter: 2_147_483_640,
                                            secret: secret), importedCodes: nil, using: &rng)
        XCTAssertEqual(try cluster.login("outcome || ' ' || step", "'uma', 1008, '\(code(2_147_483_642))', 1, 1, 100, 0, false",
                                         procedure: "login_at", database: db), "success 2147483642")
        _ = try sql("SELECT failures FROM pam_totp_api.unlock('uma')")
        XCTAssertEqual(try sql("SELECT last_step FROM pam_totp.factors WHERE user_name = 'uma'"), "2147483642")
        XCTAssertThrowsError(try sql("UPDATE pam_totp.factors SET last_step = 281474976710657 WHERE user_name = 'uma'"))
    }

    /// 20 concurrent logins with one code, 100 rounds: exactly one success each round, and the
    /// wrong answers of the same rounds counted exactly.
    func testOneCodeTwentyConcurrentLoginsExactlyOneSuccess() throws {
        let secret = Array("12345678901234567890".utf8)
        try sql("SELECT pam_totp_api.enroll('erin', 1002, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        try sql("SELECT pam_totp_api.enroll('frank', 1003, 'phone', 'sha1', 6, 30, 0, 0, '\\x\(TestSupport.hex(secret))')")
        // No temporary lockout: every failure up to the hard cap of 100 is counted.
        try sql("UPDATE pam_totp.settings SET max_failures = 100, min_lockout = 0")
        let conninfo = cluster.conninfo(database: db)
        let workers = 20
        let connections = try (0..<workers).map { _ in try PQConnection(conninfo: conninfo) }
        var successes: [Int] = []
        var frankFailures = 0
        let t0: Int64 = 1_700_000_000
        for round in 0..<100 {
            let t = t0 + Int64(round) * 30
            let code = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: t), as: UTF8.self)
            let values = try XCTUnwrap(runAtOnce(workers) { w in
                // Even workers: erin with the right code; odd: frank with a wrong one.
                let user = w % 2 == 0 ? "erin" : "frank"
                let answer = w % 2 == 0 ? code : "000000"
                let attempt = try? connections[w].execute("SELECT pam_totp_api.login_begin_at($1, $2, $3, $4, 1, 100, 0, false)",
                                                           [.text(user), .text(w % 2 == 0 ? "1002" : "1003"), .text(answer), .text(String(t))])
                let rows = try? connections[w].execute("SELECT outcome FROM pam_totp_api.login_finish($1)",
                                                        [.text(attempt?.first?.first.flatMap { $0 } ?? "")])
                return rows?.first?.first.flatMap { $0 } == "success" ? 1 : (rows == nil ? -2 : 0)
            }, "round \(round) did not finish")
            XCTAssertFalse(values.contains(-2), "a statement failed in round \(round)")
            successes.append(stride(from: 0, to: workers, by: 2).filter { values[$0] == 1 }.count)
            frankFailures += workers / 2
            // Every 10 rounds frank has failed exactly 100 times (the cap): unlock says so.
            if round % 10 == 9 {
                XCTAssertEqual(try sql("SELECT failures FROM pam_totp_api.unlock('frank')"), String(frankFailures))
                frankFailures = 0
            }
        }
        XCTAssertEqual(successes, Array(repeating: 1, count: 100), "exactly one success per round")
        print("fleet race: 100 rounds x 10 logins with one code: successes per round all 1; 1000 wrong codes counted exactly")
    }
}

/// Runs `work(w)` for every w in 0..<count, each on a thread of its own, all released at once;
/// their results in order, nil if they did not all finish within 30 s.
func runAtOnce(_ count: Int, _ work: @escaping @Sendable (Int) -> Int) -> [Int]? {
    let results = Slots(count)
    let group = DispatchGroup()
    let gate = DispatchSemaphore(value: 0)
    for w in 0..<count {
        group.enter()
        Thread.detachNewThread {
            gate.wait()
            results.set(w, work(w))
            group.leave()
        }
    }
    for _ in 0..<count { gate.signal() }
    return group.wait(timeout: .now() + 30) == .success ? results.all : nil
}

/// Results written by several threads.
final class Slots: @unchecked Sendable {
    private var values: [Int]
    private let lock = NSLock()
    init(_ n: Int) { values = Array(repeating: -1, count: n) }
    func set(_ i: Int, _ v: Int) { lock.lock(); values[i] = v; lock.unlock() }
    var all: [Int] { lock.lock(); defer { lock.unlock() }; return values }
}
