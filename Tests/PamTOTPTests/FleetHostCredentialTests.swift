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

    @discardableResult
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
        // A read first in its transaction commits its nonce without waiting for the disk; one
        // after a write leaves that transaction's durability alone.
        for wroteFirst in [false, true] {
            _ = try c.execute("BEGIN")
            if wroteFirst { _ = try c.execute("SELECT pg_current_xact_id()") }
            XCTAssertEqual(try call("alice", web1.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: randomNonce())), "1001")
            XCTAssertEqual(try c.execute("SHOW synchronous_commit").first?.first ?? nil, wroteFirst ? "on" : "off")
            _ = try c.execute("COMMIT")
        }
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
        XCTAssertEqual(logged.count, 3, "the lookup's and the login's two credentials are in the log")
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

    /// Found in review, each replayed: a login stopped past its deadline after its first step
    /// left an attempt that the logged CALL's credential finished from another session (now a
    /// second step takes a credential of its own); a REPEATABLE READ snapshot taken before
    /// remove-host still saw the key; the arrays' canonical text took a NULL element, or NULL,
    /// for none; a call sweeping old nonces waited on rows another call held; add-host took an
    /// admin role's name.
    func testWhatReviewFound() throws {
        let web1 = try addHost("web1")
        try sql("CREATE ROLE own1 LOGIN; GRANT pam_totp_host TO own1")
        let pool = try PQConnection(conninfo: cluster.conninfo(user: "fleet_pool", database: db))
        let now = Int64(time(nil))
        func nonce() -> [UInt8] { (0..<16).map { _ in UInt8.random(in: 0...255) } }
        // A login past its deadline (1 ms) after its first step's commit: the attempt is left.
        let args: [PQValue] = [.text("alice"), .text("1001"), .text("000000"), .text("2"), .text("100"), .text("0"), .text("false"), .null]
        let begin = web1.credential(operation: "login_begin", arguments: args, stamp: now, nonce: nonce())
        XCTAssertThrowsError(try pool.execute("CALL pam_totp_api.login($1, $2, $3, $4, $5, $6, $7, p_timeout_ms => 1, p_credential => $8)",
                                              Array(args.prefix(7)) + [.text(begin)])) { error in
            XCTAssertEqual((error as? PQError)?.sqlState, "57014")
        }
        let attempt = try sql("SELECT id FROM pam_totp.attempts WHERE role = 'web1'")
        XCTAssertFalse(attempt.isEmpty)
        let own1 = try PQConnection(conninfo: cluster.conninfo(user: "own1", database: db))
        for (c, who) in [(own1, "own1"), (pool, "the pool")] {
            XCTAssertThrowsError(try c.call("SELECT * FROM pam_totp_api.login_finish($1, $2)", [.text(attempt), .text(begin)]), who) { error in
                XCTAssertEqual((error as? PQError)?.sqlState, Refusal.hostCredentialMismatch.sqlState, "\(who): \(error)")
            }
        }
        XCTAssertThrowsError(try own1.call("SELECT * FROM pam_totp_api.login_finish($1)", [.text(attempt)])) { error in
            XCTAssertEqual((error as? PQError)?.sqlState, Refusal.unknownAttempt.sqlState, "\(error)")
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.attempts WHERE role = 'web1'"), "1", "still unfinished")
        // A snapshot older than the call.
        _ = try pool.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        XCTAssertThrowsError(try pool.execute("SELECT pam_totp_api.enrolled_uid($1, $2)", [.text("alice"),
            .text(web1.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: nonce()))])) { error in
            XCTAssertEqual((error as? PQError)?.sqlState, Refusal.hostIsolation.sqlState)
        }
        _ = try pool.execute("ROLLBACK")
        // The arrays' canonical text.
        XCTAssertEqual(try sql("""
            SELECT concat_ws('|', pam_totp_api.canonical(ARRAY['a', NULL, 'b']), pam_totp_api.canonical(ARRAY['a', 'b']),
                             coalesce(pam_totp_api.canonical(NULL::text[]), 'NULL'), pam_totp_api.canonical('{}'::text[]) = '',
                             pam_totp_api.canonical(ARRAY['\\x01'::bytea, NULL]))
            """), "1:a-1:b|1:a1:b|NULL|t|2:01-")
        // A sweep (forced: setseed) while another session holds old nonces: it skips them.
        try sql("INSERT INTO pam_totp.host_nonces SELECT 'web1', int8send(i), 0 FROM generate_series(1, 50) i")
        let holder = SpawnedProcess()
        let null = open("/dev/null", O_RDWR)
        defer { close(null) }
        try holder.run(["/usr/bin/psql", "-X", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", "postgres", "-d", db,
                        "-c", "BEGIN; SELECT nonce FROM pam_totp.host_nonces WHERE at = 0 FOR UPDATE; SELECT pg_sleep(4); COMMIT;"], stdio: null)
        defer { holder.waitUntilExit() }
        XCTAssertTrue(waitUntil(timeout: 10) {
            (try? self.sql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'host_nonces' AND l.granted "
                           + "AND l.mode = 'RowShareLock'")) == "1"
        })
        _ = try pool.execute("SELECT setseed(0.00077)")
        _ = try pool.execute("SET lock_timeout = 1000")
        XCTAssertEqual(try pool.execute("SELECT pam_totp_api.enrolled_uid($1, $2)", [.text("alice"),
            .text(web1.credential(operation: "enrolled_uid", arguments: [.text("alice")], stamp: now, nonce: nonce()))]).first?.first ?? nil, "1001",
                       "the call does not wait on the held rows")
        // A host's name is never an admin's or a superuser's.
        let r = try runCommand([daemonURL.path, "add-host", "postgres", "--admin", cluster.conninfo(database: db)])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("is not a host's own"), r.stderr)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.hosts WHERE name = 'postgres'"), "0")
    }

    /// Every call a host makes, as pam-totpd makes it, with a credential through the pooled role:
    /// the database takes each (its canonical arguments are the client's: texts, numbers,
    /// booleans, NULLs, bytes and both kinds of array), and every audit row is the host's.
    func testEveryCallAHostMakesCarriesItsCredential() throws {
        let web1 = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: "fleet_pool", database: db)), credential: try addHost("web1"))
        let bob = Array("bob".utf8), uid: UInt32 = 1002
        let first = secret + Array("bob".utf8), second = secret + Array("bob2".utf8)
        var o = ModuleOptions()
        o.adjacentIntervals = 2
        var rng = SystemRandomNumberGenerator()
        let now = Int64(time(nil))
        awayFromStepBoundary(margin: 5)
        // enroll_first: the checks, then the factor with its code (its proof is web1's).
        XCTAssertEqual(try web1.enrollAtLogin(user: bob, accountUID: uid, label: Array("phone".utf8), secret: first, answer: nil, at: now, options: o), .mayEnrol)
        XCTAssertEqual(try web1.enrollAtLogin(user: bob, accountUID: uid, label: Array("phone".utf8), secret: first,
                                              answer: try TOTP.code(secret: first, parameters: .default, at: now), at: now, options: o), .enrolled)
        // check_enrollable (bytes and NULL), enroll with imported recovery codes (enroll and
        // replace_recovery in one statement: bytea[] and text[]), replace_recovery alone.
        try web1.checkEnrollable(user: bob, accountUID: uid, label: Array("tablet".utf8), secret: second)
        try web1.checkEnrollable(user: bob, accountUID: uid, label: Array("tablet".utf8), secret: nil)
        let tablet = try Factor(label: Array("tablet: \"2\", x\\y".utf8), parameters: .default, created: now, secret: second)
        _ = try web1.enroll(user: bob, accountUID: uid, factor: tablet, importedCodes: [Array("12345678".utf8), Array("8765-4321".utf8)], using: &rng)
        XCTAssertTrue(try web1.replaceRecovery(user: bob, accountUID: uid, set: RecoverySet.generate(count: 3, iterations: 1000, using: &rng).set))
        // A phone: send_enrolment_code, confirm_enrolment (its two steps with one credential), send_code.
        try sql("UPDATE pam_totp.settings SET oob_resend_interval = 1")
        let mobile = try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array("+15105551234".utf8), created: now)
        guard case .queued(_, _, let sentAt, _) = try web1.sendEnrolmentCode(user: bob, accountUID: uid, factor: mobile, at: now, options: o, using: &rng)
        else { return XCTFail("the enrolment code is queued") }
        let code = try sql("SELECT code FROM pam_totp.outbox WHERE user_name = 'bob' ORDER BY id DESC LIMIT 1")
        XCTAssertEqual(try web1.confirmEnrolment(user: bob, accountUID: uid, factor: mobile, sentAt: sentAt, answer: Array(code.utf8), at: now,
                                                 options: o, using: &rng), .enrolled)
        Thread.sleep(forTimeInterval: 1.1)
        guard case .queued = try web1.sendCode(user: bob, accountUID: uid, label: Array("mobile".utf8), at: now, options: o, using: &rng)
        else { return XCTFail("a login's code is queued") }
        // user_status and list_factors, remove_factor.
        XCTAssertEqual(try web1.status(user: bob)?.record.factors.count, 3)
        XCTAssertEqual(try web1.removeFactor(user: bob, accountUID: uid, label: tablet.label, mayRemoveLast: false), 2)
        XCTAssertEqual(try sql("SELECT string_agg(DISTINCT role, ',') FROM pam_totp.audit WHERE account = 'bob'"), "web1")
        XCTAssertEqual(try sql("SELECT string_agg(event, ',' ORDER BY id) FROM pam_totp.audit WHERE account = 'bob'"),
                       "enroll,enroll,recovery-codes,recovery-codes,code-sent,enroll,code-sent,remove")
        XCTAssertEqual(try sql("SELECT string_agg(DISTINCT host, ',') FROM pam_totp.sends WHERE user_name = 'bob'"), "web1", "send limits are the host's")
    }

    /// Every function a host may call names its caller first (identify, or for a second step
    /// finishing), and each procedure hands its credential to its first step: none takes the
    /// connection's role, or a name left on the session, for the host.
    func testEveryHostFunctionNamesItsCaller() throws {
        let rows = try sql("""
            SELECT p.proname || ':' || p.prokind::text
                   || ':' || (p.prosrc LIKE '%pam_totp_api.identify(p_credential, ''' || p.proname || '''%')
                   || ':' || (p.prosrc LIKE '%pam_totp_api.finishing(a.role, a.nonce, p_credential, ''' || p.proname || '''%')
                   || ':' || (p.prosrc LIKE '%p_credential);%' AND p.prosrc LIKE '%(attempt, p_finish_credential)%')
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
