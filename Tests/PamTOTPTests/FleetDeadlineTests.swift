import FleetStore
import Foundation
import MFACrypto
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Rule 19, a deadline lives in the transaction (issue 38, item 2): every call carries its own
/// statement_timeout (set in the call's transaction, in the same round trip), none is left on a
/// session. Before, pam-totpd set it once per session: behind PgBouncer in transaction mode a
/// server connection opened later had none, and a login blocked on a locked row outlived the
/// daemon's deadline, was reported "not recorded", and then completed on the server (the code
/// spent, a success audited). Real PostgreSQL 15 and Debian's PgBouncer.
final class FleetDeadlineTests: XCTestCase {
    var cluster: PostgresCluster!
    var bouncer: PgBouncer?
    let db = "fleet"
    let secret = Array("deadlinesecret123456".utf8)
    let tina = Array("tina".utf8)

    override func setUpWithError() throws {
        cluster = try startFleetCluster(database: db)
        try sql("UPDATE pam_totp.settings SET max_window = 2, max_failures = 100, min_lockout = 0")
        try sql("CREATE ROLE deadline_host LOGIN; GRANT pam_totp_host TO deadline_host")
        var rng = SystemRandomNumberGenerator()
        try PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(database: db)))
            .enroll(user: tina, accountUID: 1007, factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret),
                    importedCodes: nil, using: &rng)
    }

    override func tearDown() {
        bouncer?.stop()
        cluster?.stop()
        cluster = nil
    }

    func sql(_ q: String) throws -> String { try cluster.psql(q, database: db) }

    func login(_ store: PostgresStore, _ code: [UInt8]) -> AuthOutcome {
        var o = ModuleOptions()
        o.adjacentIntervals = 2
        o.maxFailures = 100
        o.lockoutSeconds = 0
        return store.login(user: tina, account: { () throws(MFAError) -> Account? in Account(name: self.tina, uid: 1007) },
                           answer: code, at: Int64(time(nil)), options: o, process: 1)
    }

    func code() throws -> [UInt8] { try TOTP.code(secret: secret, parameters: .default, at: Int64(time(nil))) }

    /// Holds tina's row (what a login locks first) for `seconds` in another session; returns
    /// once the lock is held.
    func holdTinasRow(seconds: Int) throws -> SpawnedProcess {
        let null = open("/dev/null", O_RDWR)
        defer { close(null) }
        let p = SpawnedProcess()
        try p.run(["/usr/bin/psql", "-X", "-q", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", "postgres", "-d", db,
                   "-c", "BEGIN; SELECT 1 FROM pam_totp.users WHERE name = 'tina' FOR UPDATE; SELECT pg_sleep(\(seconds)); COMMIT;"],
                  stdio: null)
        XCTAssertTrue(waitUntil(timeout: 10) {
            (try? self.sql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                           + "WHERE c.relname = 'users' AND l.mode = 'RowShareLock' AND l.granted")) == "1"
        }, "the row is held")
        return p
    }

    /// A login blocked past its deadline is cancelled by the server and changes nothing: once
    /// the row is free again, the code is unused, no success is in the trail, and it logs in.
    func assertALoginPastItsDeadlineChangesNothing(_ store: PostgresStore, file: StaticString = #filePath, line: UInt = #line) throws {
        awayFromStepBoundary(margin: 8)
        let lastStep = try sql("SELECT last_step FROM pam_totp.factors WHERE user_name = 'tina'")
        let holder = try holdTinasRow(seconds: 4)
        let started = Date()
        let c = try code()
        // The server cancels it at the deadline (57014): a failure, as with the database away.
        let outcome = login(store, c)
        switch outcome {
        case .failed, .notRecorded: break
        default: return XCTFail("a blocked login fails: \(outcome)", file: file, line: line)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "answered at the deadline, not when the row came free", file: file, line: line)
        holder.waitUntilExit()
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(try sql("SELECT last_step FROM pam_totp.factors WHERE user_name = 'tina'"), lastStep, "no code spent", file: file, line: line)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.audit WHERE account = 'tina' AND event = 'success'"), "0",
                       "no success in the trail", file: file, line: line)
        guard case .success = login(store, c) else { return XCTFail("the code still logs in", file: file, line: line) }
    }

    func testALoginPastItsDeadlineChangesNothing() throws {
        let store = PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: "deadline_host", database: db)))
        try assertALoginPastItsDeadlineChangesNothing(store)
    }

    /// Behind PgBouncer (transaction mode, one server connection): the server connection that
    /// ran the host's first call is ended, PgBouncer opens another, and the next login still has
    /// its deadline.
    func testBehindPgBouncerALoginPastItsDeadlineChangesNothing() throws {
        let b = try PgBouncer(cluster, database: db, users: ["deadline_host"])
        bouncer = b
        let store = PostgresStore(pool: ConnectionPool(conninfo: b.conninfo(user: "deadline_host", database: db)))
        awayFromStepBoundary(margin: 8)
        let wrong = try code() == Array("000000".utf8) ? Array("111111".utf8) : Array("000000".utf8)
        guard case .wrongCode = login(store, wrong) else {
            return XCTFail("a first login through PgBouncer")
        }
        _ = try sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'deadline_host'")
        XCTAssertTrue(waitUntil(timeout: 10) { (try? self.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'deadline_host'")) == "0" })
        try assertALoginPastItsDeadlineChangesNothing(store)
    }

    /// No statement_timeout stays on a pooled connection after a call.
    func testNoDeadlineIsLeftOnTheSession() throws {
        let pool = ConnectionPool(conninfo: cluster.conninfo(user: "deadline_host", database: db), statementTimeoutMilliseconds: 700)
        let seen = try pool.with { (c) throws(PQError) -> (inside: String?, after: String?) in
            let inside = try c.call("SELECT current_setting('statement_timeout')").first?.first ?? nil
            let after = try c.execute("SHOW statement_timeout").first?.first ?? nil
            return (inside, after)
        }
        XCTAssertEqual(seen.inside, "700ms")
        XCTAssertEqual(seen.after, "0", "nothing left on the session")
        // And a call that runs past it is cancelled by the server (57014), the connection kept.
        XCTAssertThrowsError(try pool.read("SELECT pg_sleep(3)")) { error in
            XCTAssertEqual((error as? PQError)?.sqlState, "57014")
        }
        XCTAssertEqual(try pool.read("SELECT 1").first?.first ?? nil, "1")
    }

    /// An error raised when the call's transaction commits (here a deferred unique constraint)
    /// fails the call: it comes after the statement's own results, before the pipeline's end,
    /// and was taken for a success (found in review).
    func testAnErrorAtCommitFailsTheCall() throws {
        try sql("CREATE TABLE deferred (x integer UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO deferred VALUES (1)")
        let pool = ConnectionPool(conninfo: cluster.conninfo(database: db))
        XCTAssertThrowsError(try pool.write("INSERT INTO deferred VALUES (1) RETURNING x")) { error in
            XCTAssertEqual((error as? PQError)?.sqlState, "23505")
        }
        XCTAssertEqual(try sql("SELECT count(*) FROM deferred"), "1")
        XCTAssertEqual(try pool.read("SELECT 1").first?.first ?? nil, "1", "the connection still serves")
    }
}
