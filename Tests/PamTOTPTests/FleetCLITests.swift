import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// pam-totpd's fleet subcommands and start-up checks as an admin runs them
/// (docs/ARCHITECTURE.md, section 8): init-database twice, import-files from a real file store, and a
/// clear error on stderr for a bad CONNINFO, an unreachable server or a password in a file
/// others can read.
final class FleetCLITests: XCTestCase {
    var cluster: PostgresCluster!
    var root: URL!
    let db = "fleet"

    override func setUpWithError() throws {
        guard PostgresCluster.available else {
            XCTFail("PostgreSQL 15 not found: make check installs postgresql-15")
            throw XCTSkip("no PostgreSQL")
        }
        guard FileManager.default.isExecutableFile(atPath: daemonURL.path) else { throw XCTSkip("pam-totpd not built") }
        cluster = try PostgresCluster()
        try cluster.psql("CREATE DATABASE \(db)")
        root = try makeTemporaryDirectory("pamtotp-fleet-cli")
    }

    override func tearDown() {
        cluster?.stop()
        if let root { removeTemporaryDirectory(root) }
    }

    func writeConfig(_ text: String, mode: mode_t = 0o644) throws -> String {
        let path = root.appendingPathComponent("pam_totp-\(UInt32.random(in: 0...UInt32.max)).conf").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(path, mode), 0)
        return path
    }

    func testInitDatabaseTwice() throws {
        let first = try runCommand([daemonURL.path, "init-database", "--admin", cluster.conninfo(database: db)])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertTrue(first.stdout.contains("from version 0 to \(Migrations.all.count)"), first.stdout)
        let again = try runCommand([daemonURL.path, "init-database", "--admin", cluster.conninfo(database: db)])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stdout.contains("nothing to do"), again.stdout)
        let bad = try runCommand([daemonURL.path, "init-database", "--admin", "host=\(cluster.socketDirectory) port=1 dbname=x"])
        XCTAssertNotEqual(bad.status, 0)
        XCTAssertTrue(bad.stderr.contains("init-database failed"), bad.stderr)
    }

    /// What init-database did not make, it does not build on: a schema of ours that someone
    /// else owns (or may create in) on a database without our schema yet (its owner could swap
    /// the functions the secrets go through, hmac() among them), and a pam_totp_host or
    /// pam_totp_admin role that can log in, is a superuser, may create roles or databases, or is
    /// a member of another role (every host's role inherits from it). Each is refused with a
    /// clear error and changes nothing; what it does make itself (a schema the same role
    /// created first, NOLOGIN roles) is fine.
    func testInitDatabaseRefusesSchemasAndRolesItDidNotMake() throws {
        try cluster.psql("CREATE ROLE mallory")
        func snapshot(_ database: String) throws -> String {
            try cluster.psql("""
                SELECT (SELECT coalesce(string_agg(nspname || ':' || pg_get_userbyid(nspowner) || ':' || coalesce(nspacl::text, ''), ' ' ORDER BY nspname), '')
                          FROM pg_namespace WHERE nspname LIKE 'pam_totp%')
                    || ' | ' || (SELECT coalesce(string_agg(rolname || ':' || rolcanlogin || rolsuper || rolcreaterole || rolcreatedb, ' ' ORDER BY rolname), '')
                                   FROM pg_roles WHERE rolname LIKE 'pam_totp%')
                    || ' | ' || (SELECT count(*) FROM pg_extension)
                    || ' | ' || (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname LIKE 'pam_totp%')
                    || ' | ' || (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname LIKE 'pam_totp%')
                    || ' | ' || (SELECT count(*) FROM pg_auth_members)
                """, database: database)
        }
        let cases: [(setup: String, migratedFirst: Bool, cleanup: String, want: String)] = [
            ("CREATE SCHEMA pam_totp AUTHORIZATION mallory", false, "", "schema pam_totp already exists, owned by mallory"),
            ("CREATE SCHEMA pam_totp_crypto AUTHORIZATION mallory", false, "", "schema pam_totp_crypto already exists, owned by mallory"),
            ("CREATE SCHEMA pam_totp; GRANT CREATE ON SCHEMA pam_totp TO mallory", false, "", "mallory may create objects in it"),
            ("CREATE SCHEMA pam_totp_crypto; GRANT CREATE ON SCHEMA pam_totp_crypto TO PUBLIC", false, "", "PUBLIC may create objects in it"),
            ("CREATE ROLE pam_totp_host LOGIN", false, "DROP ROLE pam_totp_host", "role pam_totp_host already exists"),
            ("CREATE ROLE pam_totp_admin NOLOGIN SUPERUSER", false, "DROP ROLE pam_totp_admin", "it has SUPERUSER"),
            ("CREATE ROLE pam_totp_sender LOGIN", false, "DROP ROLE pam_totp_sender", "role pam_totp_sender already exists"),
            ("CREATE ROLE pam_totp_host NOLOGIN CREATEROLE", false, "DROP ROLE pam_totp_host", "it has CREATEROLE"),
            ("CREATE ROLE pam_totp_host NOLOGIN; GRANT pg_read_all_data TO pam_totp_host", false, "DROP ROLE pam_totp_host",
             "it has member of pg_read_all_data"),
            // Roles are checked on every run, an upgrade's or a second database's too.
            ("ALTER ROLE pam_totp_host LOGIN", true, "ALTER ROLE pam_totp_host NOLOGIN", "it has LOGIN"),
        ]
        for (i, c) in cases.enumerated() {
            let database = "refuse\(i)"
            try cluster.psql("CREATE DATABASE \(database)")
            if c.migratedFirst { _ = try Migrator.migrate(conninfo: cluster.conninfo(database: database)) }
            try cluster.psql(c.setup, database: database)
            let before = try snapshot(database)
            let r = try runCommand([daemonURL.path, "init-database", "--admin", cluster.conninfo(database: database)])
            XCTAssertNotEqual(r.status, 0, "\(c.setup): init-database went ahead: \(r.stdout)")
            XCTAssertTrue(r.stderr.contains("init-database failed") && r.stderr.contains(c.want) && r.stderr.contains("nothing was changed"),
                          "\(c.setup): \(r.stderr)")
            XCTAssertEqual(try snapshot(database), before, "\(c.setup): something changed")
            if !c.cleanup.isEmpty { try cluster.psql(c.cleanup) }
        }
        // The same role having made the schema first, and the NOLOGIN roles that exist (made for
        // the last case's database): fine.
        XCTAssertEqual(try cluster.psql("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'pam_totp_%' AND NOT rolcanlogin"), "4")
        try cluster.psql("CREATE DATABASE fine")
        try cluster.psql("CREATE SCHEMA pam_totp", database: "fine")
        let ok = try runCommand([daemonURL.path, "init-database", "--admin", cluster.conninfo(database: "fine")])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertTrue(ok.stdout.contains("from version 0 to \(Migrations.all.count)"), ok.stdout)
    }

    /// A password in --admin is on the command line, which every local user can read
    /// (/proc/PID/cmdline, ps) while it runs: refused before connecting, never echoed.
    func testInitDatabaseRefusesAPasswordOnTheCommandLine() throws {
        let r = try runCommand([daemonURL.path, "init-database", "--admin", cluster.conninfo(database: db) + " password=s3cretpw"])
        XCTAssertNotEqual(r.status, 0, r.stdout)
        XCTAssertTrue(r.stderr.contains(".pgpass"), r.stderr)
        XCTAssertFalse((r.stdout + r.stderr).contains("s3cretpw"))
        XCTAssertEqual(try cluster.psql("SELECT count(*) FROM pg_namespace WHERE nspname = 'pam_totp'", database: db), "0", "nothing done")
    }

    func testStartUpErrorsAreClearAndNeverEchoThePassword() throws {
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: db))
        let socket = root.appendingPathComponent("s").path
        let cases: [(String, mode_t, String)] = [
            ("backend = postgresql\n", 0o644, "needs postgresql = CONNINFO"),
            ("backend = postgresql\npostgresql = host=x nosuchkeyword=1\n", 0o644, "not valid"),
            ("backend = postgresql\npostgresql = host=\(root.path)/nowhere port=5999 dbname=x connect_timeout=2\n", 0o644, "cannot reach the database"),
            ("backend = postgresql\npostgresql = \(cluster.conninfo(database: db)) password=s3cretpw\n", 0o644, "mode 0600"),
            ("backend = postgresql\npostgresql = \(cluster.conninfo(user: "nosuchrole", database: db))\n", 0o644, "database"),
        ]
        for (text, mode, want) in cases {
            let config = try writeConfig(text, mode: mode)
            let started = Date()
            let r = try runCommand([daemonURL.path, "--config", config, "--socket", socket])
            XCTAssertNotEqual(r.status, 0, text)
            XCTAssertTrue(r.stderr.contains(want), "\(text): \(r.stderr)")
            XCTAssertFalse(r.stderr.contains("s3cretpw"), r.stderr)
            XCTAssertLessThan(Date().timeIntervalSince(started), 8, "a bad server never hangs the start")
        }
        // With the password file root-only 0600 it starts (trust auth ignores the password).
        let config = try writeConfig("backend = postgresql\npostgresql = \(cluster.conninfo(database: db)) password=s3cretpw\nsocket = \(socket)\n", mode: 0o600)
        let p = Process()
        p.executableURL = daemonURL
        p.arguments = ["--config", config]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        defer { if p.isRunning { p.terminate() }; p.waitUntilExit() }
        XCTAssertTrue(waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: socket) }, "starts with a 0600 file")
    }

    /// A file store with a used step, a failure, recovery codes one of which is used: after
    /// import-files the database answers exactly as the files did.
    func testImportFilesRoundTrip() throws {
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: db))
        try cluster.psql("UPDATE pam_totp.settings SET min_lockout = 0, max_failures = 100", database: db)
        let storePath = root.appendingPathComponent("store").path
        XCTAssertEqual(mkdir(storePath, 0o700), 0)
        let files = try Store(path: Array(storePath.utf8))
        let secret = Array("importsecret12345678".utf8)
        let other = Array("importsecondfactor99".utf8)
        var rng = SplitMix64(seed: 99)
        let user = Array("root".utf8)
        let t = Int64(time(nil))
        try files.enroll(user: user, accountUID: 0, factor: try Factor(label: Array("phone".utf8), parameters: .default, created: t - 600,
                                                                      enrolledStep: UInt64((t - 600) / 30), secret: secret), using: &rng)
        let eight = try OTPParameters(algorithm: .sha512, digits: 8, period: 60)
        try files.enroll(user: user, accountUID: 0, factor: try Factor(label: Array("key".utf8), parameters: eight, created: t - 600,
                                                                      enrolledStep: 0, secret: other), using: &rng)
        let (codes, set) = RecoverySet.generate(count: 5, iterations: 1_000, using: &rng)
        _ = try files.replaceRecovery(user: user, accountUID: 0, set: set)
        var o = ModuleOptions()
        o.maxFailures = 100
        o.lockoutSeconds = 0
        func login(_ answer: [UInt8]) throws -> AuthOutcome {
            files.authenticate(answer: answer, at: t, options: o, process: 1, enrollment: try files.lookup(user: user, accountUID: 0))
        }
        let used = try TOTP.code(secret: secret, parameters: .default, at: t)
        guard case .success = try login(used) else { return XCTFail("file store login") }
        XCTAssertEqual(try login(codes[2]), .recoveryCode(remaining: 4))
        guard case .wrongCode(false, 1, _) = try login(Array("000000".utf8)) else { return XCTFail("a failure") }
        // A second user, and a record for a name no account has (reported, not imported).
        try files.enroll(user: Array("daemon".utf8), accountUID: 1,
                         factor: try Factor(label: Array("phone".utf8), parameters: .default, created: t, secret: other), using: &rng)
        // ... who also has a phone for text messages (proved when it was enrolled there): it moves as it is.
        var second = try XCTUnwrap(try files.read(user: Array("daemon".utf8)))
        second.factors.append(try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array("+15105551234".utf8), created: t))
        try files.write(user: Array("daemon".utf8), record: second)

        // Imports set any state: a role with pam_totp_admin (a host role may not call them).
        try cluster.psql("CREATE ROLE pamtotp_fleet_import LOGIN; GRANT pam_totp_admin TO pamtotp_fleet_import", database: db)
        let config = try writeConfig("backend = postgresql\npostgresql = \(cluster.conninfo(user: "pamtotp_fleet_import", database: db))\n")
        let r = try runCommand([daemonURL.path, "import-files", "--config", config, storePath])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("imported 2 user(s), 0 failed"), r.stdout)
        // Again: nothing is doubled, each user is reported as already there.
        let again = try runCommand([daemonURL.path, "import-files", "--config", config, storePath])
        XCTAssertNotEqual(again.status, 0)
        XCTAssertTrue(again.stdout.contains("already in the database"), again.stdout)

        let fleet = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)), callerClock: true)
        let status = try XCTUnwrap(try fleet.status(user: user))
        XCTAssertEqual(status.record.factors.map(\.label), [Array("phone".utf8), Array("key".utf8)])
        XCTAssertEqual(status.record.factors[1].otpKey?.parameters, eight)
        XCTAssertEqual(status.state.failures, 1)
        func fleetLogin(_ answer: [UInt8], at time: Int64 = t) throws -> AuthOutcome {
            fleet.authenticate(answer: answer, at: time, options: o, process: 1, enrollment: try fleet.lookup(user: user, accountUID: 0))
        }
        guard case .wrongCode(replayed: true, _, _) = try fleetLogin(used) else { return XCTFail("the used step stays used") }
        guard case .wrongCode = try fleetLogin(codes[2]) else { return XCTFail("the used recovery code stays used") }
        XCTAssertEqual(try fleetLogin(codes[3]), .recoveryCode(remaining: 3))
        XCTAssertEqual(try fleetLogin(try TOTP.code(secret: other, parameters: eight, at: t + 60), at: t + 60),
                       .success(factor: Array("key".utf8), step: UInt64((t + 60) / 60), digits: 8), "the secrets moved intact")
        XCTAssertEqual(try cluster.psql("SELECT uid FROM pam_totp.users WHERE name = 'daemon'", database: db), "1")
        XCTAssertEqual(try cluster.psql("SELECT string_agg(user_name || ' ' || label || ' ' || drift, ',' ORDER BY user_name, id) FROM pam_totp.factors",
                                        database: db),
                       "daemon phone 0,daemon mobile 0,root phone 0,root key 0", "no drift was learned on the files: none moves")
        XCTAssertEqual(try cluster.psql("SELECT string_agg(kind || ' ' || coalesce(destination, '-'), ',' ORDER BY id) FROM pam_totp.factors "
                                        + "WHERE user_name = 'daemon'", database: db), "totp -,sms +15105551234")
    }

    /// A user whose device's clock drift the file host had learned failed in the fleet after
    /// import-files (the drift stayed behind): now it moves with the factor's last used step,
    /// and the database's verifier goes on from it as the host's did.
    func testImportFilesKeepsTheLearnedDrift() throws {
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: db))
        let storePath = root.appendingPathComponent("store").path
        XCTAssertEqual(mkdir(storePath, 0o700), 0)
        let files = try Store(path: Array(storePath.utf8))
        let secret = Array("driftimportsecret123".utf8)
        var rng = SplitMix64(seed: 7)
        let user = Array("root".utf8)
        let t = Int64(time(nil)) / 30 * 30 + 10
        try files.enroll(user: user, accountUID: 0, factor: try Factor(label: Array("phone".utf8), parameters: .default, created: t - 600,
                                                                      secret: secret), using: &rng)
        let o = ModuleOptions()  // adjacent_intervals 5, on the host and in the fleet
        // The device runs 4 steps ahead of the file host: learned there.
        guard case .success = files.authenticate(answer: try TOTP.code(secret: secret, parameters: .default, at: t + 4 * 30), at: t, options: o,
                                                 process: 1, enrollment: try files.lookup(user: user, accountUID: 0)) else {
            return XCTFail("the file host accepts a code 4 steps ahead")
        }
        XCTAssertEqual(try files.readState(user: user).drift(forLabel: Array("phone".utf8)), 4)

        try cluster.psql("CREATE ROLE pamtotp_fleet_import LOGIN; GRANT pam_totp_admin TO pamtotp_fleet_import", database: db)
        let config = try writeConfig("backend = postgresql\npostgresql = \(cluster.conninfo(user: "pamtotp_fleet_import", database: db))\n")
        let r = try runCommand([daemonURL.path, "import-files", "--config", config, storePath])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(try cluster.psql("SELECT drift FROM pam_totp_api.list_factors('root')", database: db), "4")
        XCTAssertEqual(try cluster.psql("SELECT detail FROM pam_totp.audit WHERE event = 'import' AND label = 'phone'", database: db),
                       "last used step \(t / 30 + 4), clock drift +4 steps from a file store")
        let fleet = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)), callerClock: true)
        XCTAssertEqual(try XCTUnwrap(try fleet.status(user: user)).state.drift(forLabel: Array("phone".utf8)), 4)
        // The device is now 8 steps ahead: within ±5 of the learned +4, as on the host (without
        // the drift, 8 steps is outside the window).
        let later = t + 300
        XCTAssertEqual(fleet.authenticate(answer: try TOTP.code(secret: secret, parameters: .default, at: later + 8 * 30), at: later, options: o,
                                          process: 1, enrollment: try fleet.lookup(user: user, accountUID: 0)),
                       .success(factor: Array("phone".utf8), step: UInt64(later / 30 + 8), digits: 6))
        XCTAssertEqual(try cluster.psql("SELECT drift FROM pam_totp_api.list_factors('root')", database: db), "5", "bounded to ±5")
        // A drift no file store holds is refused (±10 at most, the largest window).
        XCTAssertThrowsError(try cluster.psql("SELECT pam_totp_api.import_last_step('root', 'phone', 0, 11)", database: db))
    }
}
