import FleetStore
import Foundation
import MFACrypto
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Rule 20, a host's identity is its own credential (issue 38, item 1): behind PgBouncer in
/// transaction mode every host may log in as one server role, and the database still names each
/// host by the credential it checks on every call. Before, attempts, proofs and the audit trail
/// used session_user: two hosts through one pooled role were one host (the trail named the pool,
/// and a code accepted through one host let the other change that user's factors). Real
/// PostgreSQL 15, Debian's PgBouncer and pam-totpd's add-host and remove-host.
final class FleetHostCredentialTests: XCTestCase {
    var cluster: PostgresCluster!
    var bouncer: PgBouncer?
    var directory: URL!
    let db = "fleet"
    let secret = Array("credentialsecret1234".utf8)
    let alice = Array("alice".utf8)

    override func setUpWithError() throws {
        cluster = try startFleetCluster(database: db)
        directory = try makeTemporaryDirectory("pamtotp-hosts")
        try sql("UPDATE pam_totp.settings SET max_window = 2, max_failures = 100, min_lockout = 0")
        try sql("CREATE ROLE fleet_pool LOGIN; GRANT pam_totp_pooled TO fleet_pool")
        var rng = SystemRandomNumberGenerator()
        let owner = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
        for label in ["phone", "tablet"] {
            try owner.enroll(user: alice, accountUID: 1001, factor: try Factor(label: Array(label.utf8), parameters: .default, created: 0,
                                                                               secret: secret + Array(label.utf8)), importedCodes: nil, using: &rng)
        }
    }

    override func tearDown() {
        bouncer?.stop()
        cluster?.stop()
        cluster = nil
        if let directory { removeTemporaryDirectory(directory) }
    }

    func sql(_ q: String) throws -> String { try cluster.psql(q, database: db) }

    /// `pam-totpd add-host NAME --credential FILE` as an admin would run it; the credential read back.
    func addHost(_ name: String) throws -> HostCredential {
        let file = directory.path + "/" + name + ".credential"
        let r = try runCommand([daemonURL.path, "add-host", name, "--credential", file, "--admin", cluster.conninfo(database: db)])
        XCTAssertEqual(r.status, 0, r.stderr)
        var st = stat()
        XCTAssertEqual(stat(file, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600, "the credential file is root's only")
        return try XCTUnwrap(HostCredential.parse(Array(try Data(contentsOf: URL(fileURLWithPath: file)))))
    }

    func pooledStore(_ credential: HostCredential?, through b: PgBouncer) -> PostgresStore {
        PostgresStore(pool: ConnectionPool(conninfo: b.conninfo(user: "fleet_pool", database: db)), credential: credential)
    }

    func login(_ store: PostgresStore, _ label: String) throws -> AuthOutcome {
        var o = ModuleOptions()
        o.adjacentIntervals = 2
        o.maxFailures = 100
        o.lockoutSeconds = 0
        let code = try TOTP.code(secret: secret + Array(label.utf8), parameters: .default, at: Int64(time(nil)))
        return store.login(user: alice, account: { () throws(MFAError) -> Account? in Account(name: self.alice, uid: 1001) },
                           answer: code, at: Int64(time(nil)), options: o, process: 1)
    }

    /// Two hosts, one pooled server role, one PgBouncer server connection: the trail names each
    /// host, and a user's proof is the host's it was given through, not the pool's.
    func testTwoHostsThroughOnePooledRoleAreNamedApart() throws {
        let b = try PgBouncer(cluster, database: db, users: ["fleet_pool"])
        bouncer = b
        let web1 = pooledStore(try addHost("web1"), through: b), web2 = pooledStore(try addHost("web2"), through: b)
        awayFromStepBoundary(margin: 5)
        guard case .success = try login(web1, "phone") else { return XCTFail("alice logs in through web1") }
        guard case .enrolled = try web2.lookup(user: alice, account: { () throws(MFAError) -> Account? in Account(name: self.alice, uid: 1001) })
        else { return XCTFail("web2 looks alice up") }
        XCTAssertEqual(try sql("SELECT string_agg(role || ' ' || event, ',' ORDER BY id) FROM pam_totp.audit WHERE account = 'alice' AND event <> 'enroll'"),
                       "web1 success")
        // alice's code went through web1: web2 may not change her factors, web1 may.
        XCTAssertThrowsError(try web2.removeFactor(user: alice, accountUID: 1001, label: Array("tablet".utf8), mayRemoveLast: false)) { error in
            guard case .refused(.proofNeeded, _)? = error as? MFAError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(try web1.removeFactor(user: alice, accountUID: 1001, label: Array("tablet".utf8), mayRemoveLast: false), 1)
        XCTAssertEqual(try sql("SELECT role FROM pam_totp.audit WHERE event = 'remove'"), "web1")
        // One server connection served both.
        XCTAssertEqual(try sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'fleet_pool'"), "1")
    }

    /// A pooled role may call nothing without a credential (it would be every host at once), and
    /// pam-totpd configured so does not start.
    func testAPooledRoleWithoutACredentialIsRefused() throws {
        let b = try PgBouncer(cluster, database: db, users: ["fleet_pool"])
        bouncer = b
        XCTAssertThrowsError(try pooledStore(nil, through: b).lookup(user: alice, account: { () throws(MFAError) -> Account? in nil })) { error in
            guard case .refused(.hostPooled, let text)? = error as? MFAError else { return XCTFail("\(error)") }
            XCTAssertTrue(text.string.contains("pam_totp_pooled"), text.string)
        }
        let host = try DaemonFixture()
        defer { host.cleanup() }
        try "backend = postgresql\npostgresql = \(b.conninfo(user: "fleet_pool", database: db))\nsocket = \(host.socketPath)\n"
            .write(toFile: host.config, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try host.start()) { error in
            XCTAssertTrue(String(describing: error).contains("every call needs the host's credential"), "\(error)")
        }
    }

    /// A credential is good for one call: not under another key, not twice, not for other
    /// arguments, not an old one. Called as the pooled role straight into PostgreSQL.
    func testAForgedReplayedAlteredOrStaleCredentialIsRefused() throws {
        let web1 = try addHost("web1")
        let c = try PQConnection(conninfo: cluster.conninfo(user: "fleet_pool", database: db))
        let now = Int64(time(nil))
        func call(_ user: String, _ credential: String) throws -> String? {
            try c.call("SELECT pam_totp_api.enrolled_uid($1, $2)", [.text(user), .text(credential)]).first?.first ?? nil
        }
        func refusal(_ user: String, _ credential: String) -> String {
            do { _ = try call(user, credential); return "accepted" } catch { return (error as? PQError)?.sqlState ?? "\(error)" }
        }
        let good = web1.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: randomNonce())
        XCTAssertEqual(try call("alice", good), "1001")
        XCTAssertEqual(refusal("alice", good), Refusal.hostCredentialUsed.sqlState, "the same credential twice")
        let other = try XCTUnwrap(HostCredential(host: Array("web1".utf8), key: (0..<32).map { _ in UInt8.random(in: 0...255) }))
        XCTAssertEqual(refusal("alice", other.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: randomNonce())),
                       Refusal.hostCredentialMismatch.sqlState, "another key")
        XCTAssertEqual(refusal("bob", web1.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: randomNonce())),
                       Refusal.hostCredentialMismatch.sqlState, "other arguments")
        XCTAssertEqual(refusal("alice", web1.credential(operation: "enrolled", arguments: [.text("alice")], stamp: now, nonce: randomNonce())),
                       Refusal.hostCredentialMismatch.sqlState, "another operation")
        XCTAssertEqual(refusal("alice", web1.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now - 120, nonce: randomNonce())),
                       Refusal.hostClock.sqlState, "two minutes old")
        let web9 = try XCTUnwrap(HostCredential(host: Array("web9".utf8), key: (0..<32).map { _ in 7 }))
        XCTAssertEqual(refusal("alice", web9.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: randomNonce())),
                       Refusal.hostUnknown.sqlState, "a host never added")
        XCTAssertEqual(refusal("alice", "v1:web1:1:2:3"), Refusal.hostCredentialMalformed.sqlState, "malformed")
    }

    /// With every statement logged (log_statement = all, parameters included), no credential
    /// in PostgreSQL's log can be used again.
    func testCredentialsInTheStatementLogCannotBeUsedAgain() throws {
        try sql("ALTER SYSTEM SET log_statement = 'all'")
        try sql("SELECT pg_reload_conf()")
        let web1 = try addHost("web1")
        let store = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: "fleet_pool", database: db)), credential: web1)
        awayFromStepBoundary(margin: 5)
        guard case .enrolled = try store.lookup(user: alice, account: { () throws(MFAError) -> Account? in Account(name: self.alice, uid: 1001) })
        else { return XCTFail("web1 looks alice up") }
        let code = String(decoding: try TOTP.code(secret: secret + Array("phone".utf8), parameters: .default, at: Int64(time(nil))), as: UTF8.self)
        guard case .success = try login(store, "phone") else { return XCTFail("alice logs in through web1") }
        let log = try String(contentsOfFile: cluster.socketDirectory + "/log", encoding: .utf8)
        let logged = Set(log.split(whereSeparator: { $0 == "'" }).filter { $0.hasPrefix("v1:web1:") }.map(String.init))
        XCTAssertEqual(logged.count, 2, "the lookup's and the login's credentials are in the log")
        let c = try PQConnection(conninfo: cluster.conninfo(user: "fleet_pool", database: db))
        for credential in logged {
            // Each call again, exactly as logged.
            // Spent (the call it was made for) or another call's (the other).
            let spentOrOther = [Refusal.hostCredentialUsed.sqlState, Refusal.hostCredentialMismatch.sqlState]
            XCTAssertThrowsError(try c.call("SELECT pam_totp_api.enrolled($1, $2)", [.text("alice"), .text(credential)])) { error in
                XCTAssertTrue(spentOrOther.contains((error as? PQError)?.sqlState ?? ""), "\(error)")
            }
            XCTAssertThrowsError(try c.execute("CALL pam_totp_api.login($1, $2, $3, $4, $5, $6, $7, p_timeout_ms => 1000, p_credential => $8)",
                                               [.text("alice"), .text("1001"), .text(code), .text("2"), .text("100"), .text("0"),
                                                .text("false"), .text(credential)])) { error in
                XCTAssertTrue(spentOrOther.contains((error as? PQError)?.sqlState ?? ""), "\(error)")
            }
            XCTAssertEqual(spentOrOther.count, 2)
        }
    }

    /// pam-totpd with its credential through PgBouncer logs alice in as web1; after
    /// `pam-totpd remove-host web1` its next login is refused, while web2 goes on.
    func testRemoveHostRefusesItAtOnce() throws {
        let b = try PgBouncer(cluster, database: db, users: ["fleet_pool"])
        bouncer = b
        _ = try addHost("web1")
        let web2 = pooledStore(try addHost("web2"), through: b)
        let host = try DaemonFixture()
        defer { host.cleanup() }
        try """
            backend = postgresql
            postgresql = \(b.conninfo(user: "fleet_pool", database: db))
            host_credential = \(directory.path)/web1.credential
            socket = \(host.socketPath)
            max_failures = 100
            lockout = 0
            """.write(toFile: host.config, atomically: true, encoding: .utf8)
        try host.start()
        var rng = SystemRandomNumberGenerator()
        try PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
            .enroll(user: Array("root".utf8), accountUID: 0, factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0,
                                                                                  secret: secret), importedCodes: nil, using: &rng)
        awayFromStepBoundary(margin: 5)
        let first = try askFleetDaemon(host.socketPath, .authenticate, service: "sshd", answer: try codeNow(secret))
        guard case .outcome(.success) = first else { return XCTFail("\(first): \(host.output)") }
        XCTAssertEqual(try sql("SELECT role FROM pam_totp.audit WHERE account = 'root' AND event = 'success'"), "web1")
        let r = try runCommand([daemonURL.path, "remove-host", "web1", "--admin", cluster.conninfo(database: db)])
        XCTAssertEqual(r.status, 0, r.stderr)
        let after = try askFleetDaemon(host.socketPath, .authenticate, service: "sshd", answer: String(decoding: try currentCode(secret, offsetSteps: 1), as: UTF8.self))
        if case .outcome(.success) = after { XCTFail("a removed host is refused at once") }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE account = 'root' AND event = 'success'"), "1")
        guard case .enrolled = try web2.lookup(user: alice, account: { () throws(MFAError) -> Account? in Account(name: self.alice, uid: 1001) })
        else { return XCTFail("web2 goes on") }
        XCTAssertEqual(try sql("SELECT string_agg(event || ' ' || account, ',' ORDER BY id) FROM pam_totp.audit WHERE event LIKE 'host-%'"),
                       "host-added web1,host-added web2,host-removed web1")
    }

    /// Every function a host may call names its caller first (identify, or for a second step
    /// finishing), and each procedure hands its credential to its first step: none takes the
    /// connection's role, or a name left on the session, for the host.
    func testEveryHostFunctionNamesItsCaller() throws {
        let rows = try sql("""
            SELECT p.proname || ':' || p.prokind::text
                   || ':' || (p.prosrc LIKE '%pam_totp_api.identify(p_credential, ''' || p.proname || '''%')
                   || ':' || (p.prosrc LIKE '%pam_totp_api.finishing(a.role, a.credential, p_credential)%')
                   || ':' || (p.prosrc LIKE '%p_credential);%')
              FROM pg_proc p WHERE p.pronamespace = 'pam_totp_api'::regnamespace AND has_function_privilege('pam_totp_host', p.oid, 'EXECUTE')
             ORDER BY p.proname
            """).split(separator: "\n").map(String.init)
        XCTAssertEqual(rows.count, 17)
        for r in rows {
            let f = r.split(separator: ":").map(String.init)
            guard f.count == 5 else { XCTFail(r); continue }
            switch (f[0], f[1]) {
            case ("login_finish", _), ("confirm_enrolment_finish", _): XCTAssertEqual(f[3], "true", r)
            case (_, "p"): XCTAssertEqual(f[4], "true", "a procedure passes its credential on: \(r)")
            default: XCTAssertEqual(f[2], "true", "identify first, for its own name: \(r)")
            }
        }
    }

    func randomNonce() -> [UInt8] { (0..<16).map { _ in UInt8.random(in: 0...255) } }
}
