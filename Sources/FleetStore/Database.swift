import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// A small pool of libpq connections for pam-totpd's worker threads (docs/ARCHITECTURE.md, section 8):
/// a worker takes an idle connection (or opens one), runs its statements and gives it back.
/// A lost connection is dropped with every idle one (after a server restart they are all
/// dead), so the daemon reconnects by itself on the next request.
public final class ConnectionPool: @unchecked Sendable {
    public let conninfo: String
    public let connectTimeoutMilliseconds: Int
    public let statementTimeoutMilliseconds: Int
    /// An idle connection unused this long is closed (`db_idle_timeout`): a fleet's hosts hold
    /// no server connections they do not use; a worker connects again on demand.
    public let idleTimeoutMilliseconds: Int
    private let maxIdle: Int
    /// Idle connections, each with when it was last given back (monotonic milliseconds).
    private var idle: [(connection: PQConnection, since: Int64)] = []
    private var mutex = pthread_mutex_t()

    /// A whole request (connect, lookup, verify) may outlast the module's 5 s deadline only
    /// when a new connection is slow to make (`db_connect_timeout`, 5 s: TLS across a long
    /// link); the module then denies, and the connection serves the next request
    /// (docs/ARCHITECTURE.md, section 8).
    public init(conninfo: String, maxIdle: Int = 4, connectTimeoutMilliseconds: Int = 5_000,
                statementTimeoutMilliseconds: Int = 1_000, idleTimeoutMilliseconds: Int = 60_000) {
        self.conninfo = conninfo
        self.maxIdle = maxIdle
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        self.idleTimeoutMilliseconds = idleTimeoutMilliseconds
        pthread_mutex_init(&mutex, nil)
    }

    deinit { pthread_mutex_destroy(&mutex) }

    private func locked<R>(_ body: () -> R) -> R {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }

    /// How many connections are idle in the pool now.
    public var idleCount: Int { locked { idle.count } }

    /// Closes the idle connections unused for `idleTimeoutMilliseconds` (pam-totpd calls it
    /// from its event loop, at least every 10 s; `with` never hands one out either).
    public func closeIdle() {
        let now = monotonicMilliseconds()
        dropIdle { now - $0 >= Int64(idleTimeoutMilliseconds) }
    }

    /// Runs `body` on a pooled connection. A lost connection is not returned to the pool, and
    /// the idle ones are dropped too.
    public func with<R>(_ body: (PQConnection) throws(PQError) -> R) throws(PQError) -> R {
        closeIdle()
        var pooled: PQConnection? = locked { idle.popLast()?.connection }
        if let p = pooled, p.looksDead {
            // One dead means the server went away: the other idle ones are dead too.
            pooled = nil
            dropIdle()
        }
        let c: PQConnection
        if let pooled { c = pooled } else {
            c = try PQConnection(conninfo: conninfo, timeoutMilliseconds: connectTimeoutMilliseconds,
                                 statementTimeoutMilliseconds: statementTimeoutMilliseconds)
        }
        do throws(PQError) {
            let r = try body(c)
            giveBack(c)
            return r
        } catch {
            if error.connectionLost || c.isBroken {
                dropIdle()
            } else {
                giveBack(c)
            }
            throw error
        }
    }

    /// Drops the idle connections given back at a time `when` takes (every one by default),
    /// closed outside the lock, as the last references go.
    private func dropIdle(when: (Int64) -> Bool = { _ in true }) {
        let dropped = locked { () -> [(connection: PQConnection, since: Int64)] in
            let gone = idle.filter { when($0.since) }
            idle.removeAll { when($0.since) }
            return gone
        }
        _ = dropped
    }

    private func giveBack(_ c: PQConnection) {
        guard !c.isBroken else { return }
        let now = monotonicMilliseconds()
        locked { if idle.count < maxIdle { idle.append((c, now)) } }
    }

    /// A statement that changes nothing: tried once more on a fresh connection if a pooled one
    /// turned out to be dead at once (the server restarted since it was opened); never after a
    /// timeout, which would double the wait.
    public func read(_ sql: String, _ parameters: [PQValue] = []) throws(PQError) -> [[String?]] {
        do throws(PQError) {
            return try with { (c) throws(PQError) in try c.call(sql, parameters) }
        } catch {
            guard error.connectionLost, !error.timedOut else { throw error }
            return try with { (c) throws(PQError) in try c.call(sql, parameters) }
        }
    }

    public func write(_ sql: String, _ parameters: [PQValue] = []) throws(PQError) -> [[String?]] {
        try with { (c) throws(PQError) in try c.call(sql, parameters) }
    }

    /// A procedure that commits (`CALL login`): alone in its round trip, without the call's
    /// pipelined deadline — PostgreSQL 18 runs a pipeline's later statement in a transaction
    /// block, where its COMMIT fails — so it takes the deadline as its argument `p_timeout_ms`
    /// (sql/api.sql, login).
    public func procedure(_ sql: String, _ parameters: [PQValue]) throws(PQError) -> [[String?]] {
        try with { (c) throws(PQError) in try c.execute(sql, parameters) }
    }
}

/// `pam-totpd init-database`: creates or upgrades the schema in one transaction: the data
/// migrations above the database's version (sql/migrations/, tracked in
/// pam_totp.schema_version), then the API re-created whole from sql/api.sql. A second run
/// changes nothing but re-creating the same API.
public enum Migrator {
    /// Applies every migration above the database's version, then the API; returns (from, to).
    /// `upTo`: stop after that version (tests of an upgrade from an older schema).
    public static func migrate(conninfo: String, upTo: Int = Int.max) throws(PQError) -> (from: Int, to: Int) {
        let c = try PQConnection(conninfo: conninfo, timeoutMilliseconds: 10_000, statementTimeoutMilliseconds: 120_000)
        _ = try c.execute("BEGIN")
        do throws(PQError) {
            // Its deadline, for this transaction only (rule 19).
            _ = try c.execute("SET LOCAL statement_timeout = 120000")
            // One migrator at a time, cluster-wide for this database.
            _ = try c.execute("SET LOCAL client_min_messages = warning")
            _ = try c.execute("SELECT pg_advisory_xact_lock(727716180)")
            try refuseForeignObjects(c)
            _ = try c.execute("CREATE SCHEMA IF NOT EXISTS pam_totp")
            _ = try c.execute("REVOKE ALL ON SCHEMA pam_totp FROM PUBLIC")
            _ = try c.execute("""
                CREATE TABLE IF NOT EXISTS pam_totp.schema_version (
                  version integer PRIMARY KEY, name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())
                """)
            _ = try c.execute("REVOKE ALL ON pam_totp.schema_version FROM PUBLIC")
            try refuseUnknownHistory(c)
            let rows = try c.execute("SELECT coalesce(max(version), 0) FROM pam_totp.schema_version")
            let from = Int(rows.first?.first.flatMap { $0 } ?? "0") ?? 0
            var to = from
            for m in Migrations.all where m.version > from && m.version <= upTo {
                try run(c, m.sql, named: m.name)
                _ = try c.execute("INSERT INTO pam_totp.schema_version (version, name) VALUES ($1, $2)",
                                  [.text(String(m.version)), .text(m.name)])
                to = m.version
            }
            if to == Migrations.all.last?.version {
                _ = try c.execute("DROP SCHEMA IF EXISTS pam_totp_api CASCADE")
                try run(c, Migrations.api, named: "api.sql")
                // The hard failure cap and the drift change worth saying: one constant each, the
                // file store's (or the host verifier's) and the database's.
                _ = try c.execute("UPDATE pam_totp.settings SET hard_failure_cap = $1, drift_jump_steps = $2",
                                  [.text(String(UserState.hardFailureCap)), .text(String(TOTPVerifier.driftJumpSteps))])
            }
            _ = try c.execute("COMMIT", timeoutMilliseconds: 120_000)
            return (from, to)
        } catch {
            _ = try? c.execute("ROLLBACK")
            throw error
        }
    }

    /// Every version the database says it has must be the migration of that number here, by
    /// name, from 1 without a gap: a database made by another series (the unreleased
    /// pre-release schema, whose version 1 was 001_fleet.sql) or a newer pam-totpd is refused,
    /// not built on.
    static func refuseUnknownHistory(_ c: PQConnection) throws(PQError) {
        var expected = 1
        for row in try c.execute("SELECT version, name FROM pam_totp.schema_version ORDER BY version") {
            let version = Int(row.first.flatMap { $0 } ?? "") ?? -1
            let name = row.count > 1 ? row[1] ?? "" : ""
            // Versions 1, 2, 3...: a gap is a history this tree did not write either.
            guard version == expected, Migrations.all.contains(where: { $0.version == version && $0.name == name }) else {
                throw PQError(message: "this database's schema_version has version \(version) as \(name), which this pam-totpd "
                              + "does not know (another series, or a newer release): nothing was changed",
                              sqlState: nil, connectionLost: false, sent: true)
            }
            expected += 1
        }
    }

    static func run(_ c: PQConnection, _ sql: String, named name: String) throws(PQError) {
        do throws(PQError) {
            _ = try c.execute(sql, timeoutMilliseconds: 120_000)
        } catch {
            throw PQError(message: name + ": " + error.message, sqlState: error.sqlState,
                          connectionLost: error.connectionLost, sent: true)
        }
    }
}

extension Migrator {
    /// What init-database finds already there and must not build on (nothing is changed: the
    /// caller rolls back). The roles are cluster-wide and every host's role will be a member of
    /// one: a pam_totp_host or pam_totp_admin that can log in, is a superuser, may create roles,
    /// databases or replicate, bypasses row security or is itself a member of another role was
    /// not made by init-database, and hosts would inherit what it has. On a database with no
    /// pam_totp version yet, a schema pam_totp or pam_totp_crypto that someone else owns, or on
    /// which another role may CREATE, was made by someone else, who could replace the
    /// functions (hmac() among them) that the secrets go through.
    static func refuseForeignObjects(_ c: PQConnection) throws(PQError) {
        func refuse(_ why: String) -> PQError {
            PQError(message: why + "; nothing was changed", sqlState: nil, connectionLost: false, sent: true)
        }
        let roles = try c.execute("""
            SELECT r.rolname,
                   concat_ws(', ', CASE WHEN r.rolcanlogin THEN 'LOGIN' END, CASE WHEN r.rolsuper THEN 'SUPERUSER' END,
                             CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END, CASE WHEN r.rolcreatedb THEN 'CREATEDB' END,
                             CASE WHEN r.rolreplication THEN 'REPLICATION' END, CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END,
                             (SELECT 'member of ' || string_agg(g.rolname, ' and ' ORDER BY g.rolname)
                                FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
                               WHERE m.member = r.oid AND NOT (r.rolname = 'pam_totp_pooled' AND g.rolname = 'pam_totp_host')))
              FROM pg_roles r WHERE r.rolname IN ('pam_totp_host', 'pam_totp_admin', 'pam_totp_sender', 'pam_totp_pooled') ORDER BY r.rolname
            """)
        for row in roles {
            guard let name = row.first ?? nil, row.count == 2, let what = row[1], !what.isEmpty else { continue }
            throw refuse("role \(name) already exists and is not what init-database makes (a NOLOGIN role that is a member of no role but, for pam_totp_pooled, pam_totp_host): it has \(what); "
                         + "drop it, or remove that (ALTER ROLE \(name) NOLOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS, REVOKE its memberships)")
        }
        let versionTable = try c.execute("SELECT to_regclass('pam_totp.schema_version') IS NOT NULL")
        var version = 0
        if versionTable.first?.first ?? nil == "t" {
            try refuseUnknownHistory(c)
            let rows = try c.execute("SELECT coalesce(max(version), 0) FROM pam_totp.schema_version")
            version = Int(rows.first?.first.flatMap { $0 } ?? "0") ?? 0
        }
        guard version == 0 else { return }
        let schemas = try c.execute("""
            SELECT n.nspname, pg_get_userbyid(n.nspowner),
                   (SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END, ' and ')
                      FROM aclexplode(n.nspacl) a WHERE a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner)
              FROM pg_namespace n WHERE n.nspname IN ('pam_totp', 'pam_totp_api', 'pam_totp_crypto') ORDER BY n.nspname
            """)
        let me = try c.execute("SELECT current_user").first?.first ?? nil
        for row in schemas where row.count == 3 {
            guard let name = row[0], let owner = row[1] else { continue }
            if owner != me {
                throw refuse("schema \(name) already exists, owned by \(owner), but this database has no pam_totp schema version yet: "
                             + "init-database creates it as the role it runs as (\(me ?? "?")); drop the schema or check who made it")
            }
            if let others = row[2] {
                throw refuse("schema \(name) already exists and \(others) may create objects in it: "
                             + "REVOKE CREATE ON SCHEMA \(name) FROM \(others), or drop the schema")
            }
        }
    }
}

/// What `PostgresStore.lookup` keeps for `authenticate`: the name, and the uid the lookup
/// checked the record against (`authenticate` checks it again, in the same statement as the
/// verdict).
public struct FleetEnrolled {
    let name: String
    let uid: UInt32
    /// Each factor's kind, name and (a phone or address) mask, in record order; and whether
    /// the user has recovery codes: what `hints` offers.
    var factors: [FactorHint] = []
    var hasRecovery = false
    /// The factors (by index in `factors`) a live sent code belongs to.
    var pending: [Int] = []
    /// Each factor's code length (a sent factor: its live code's; 0: none), as `factors`.
    var digits: [Int] = []
}

/// The store interface (docs/ARCHITECTURE.md, section 2.2) on PostgreSQL: every operation is one call of
/// a function the schema grants to the host role; the secret, the window's HMACs, the replay
/// guard, the failure count and the lockout never leave the database.
public final class PostgresStore: TOTPStore {
    public typealias Enrolled = FleetEnrolled
    public let pool: ConnectionPool
    /// Tests and the owner role only: verify at the caller's clock (login_begin_at, which a host
    /// role may not execute). Production uses the database's clock (login).
    public let callerClock: Bool
    /// Which process last had a code accepted for each user, for `status` (RecentSuccesses).
    let recent = RecentSuccesses()
    /// This host's own credential (`host_credential`): every call carries one made for it
    /// (rule 20). nil: the host is its login role (a role of its own).
    public let credential: HostCredential?
    /// The credential's time stamp (Unix seconds); the wall clock but in tests.
    let clock: @Sendable () -> Int64

    public init(pool: ConnectionPool, callerClock: Bool = false, credential: HostCredential? = nil,
                clock: @escaping @Sendable () -> Int64 = { Int64(time(nil)) }) {
        self.pool = pool
        self.callerClock = callerClock
        self.credential = credential
        self.clock = clock
    }

    /// The call's credential for `operation` (the function identify checks it for) over
    /// `arguments`, exactly as that function receives them; NULL without one.
    func credential(_ operation: String, _ arguments: [PQValue]) -> PQValue {
        credentials(operation, arguments, finishing: nil).first
    }

    /// A two-step procedure's credentials: its first step's, and its second step's (`finishing`)
    /// over the first one's nonce (sql/api.sql, finishing). NULL, NULL without one.
    func credentials(_ operation: String, _ arguments: [PQValue], finishing: String?) -> (first: PQValue, second: PQValue) {
        guard let credential else { return (.null, .null) }
        var generator = SystemRandomNumberGenerator()
        func nonce() -> [UInt8] { (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) } }
        let stamp = clock(), first = nonce()
        let begin = PQValue.text(credential.credential(operation: operation, arguments: arguments, stamp: stamp, nonce: first))
        guard let finishing else { return (begin, .null) }
        return (begin, .text(credential.credential(operation: finishing, arguments: [.text(hex(first))], stamp: stamp, nonce: nonce())))
    }

    /// `arguments` and their credential: what a host-callable function takes.
    func signed(_ operation: String, _ arguments: [PQValue]) -> [PQValue] {
        arguments + [credential(operation, arguments)]
    }

    /// One call that proves the database is there and takes this host (pam-totpd at start).
    public func probe() throws(PQError) {
        _ = try pool.read("SELECT pam_totp_api.enrolled_uid($1, $2)", signed("enrolled_uid", [.text("")]))
    }

    /// A PQError as the store's error, by its SQLSTATE (never its text): a refusal the API raised
    /// (class PT, one SQLSTATE each: `Refusal`) is `refused` with the database's text (which may
    /// say more, as how long to wait); anything else says the database is unavailable.
    static func mapped(_ e: PQError) -> MFAError {
        if let state = e.sqlState, let r = Refusal(sqlState: state) { return .refused(r, Message(Array(e.message.utf8))) }
        // A row already there (two changes raced): refused by the database, nothing changed.
        if e.sqlState == SQLState.alreadyExists { return .invalidParameters(Message(Array(e.message.utf8))) }
        if e.sqlState == SQLState.insufficientPrivilege {
            // insufficient_privilege: a host role (pam_totp_host) asked for an admin operation.
            return .daemon(Message(Array(("the database refused: this daemon's role may not do that (unlock, purge, "
                                          + "status --all and audit need pam_totp_admin; docs/FLEET.md): " + e.message).utf8)))
        }
        if let state = e.sqlState { return .daemon(Message(Array(("database error (SQLSTATE " + state + "): " + e.message).utf8))) }
        return .daemon(Message(Array(("database unavailable: " + e.message).utf8)))
    }

    /// For a change or an admin query: the database's refusal of this role (SQLSTATE 42501) is
    /// a refusal the caller is told as such (nothing was done), never an unconfirmed change.
    static func mappedChange(_ e: PQError) -> MFAError {
        guard e.sqlState == SQLState.insufficientPrivilege else { return mapped(e) }
        return .refused(.roleMayNot, Message(Array(("the database refused: this daemon's role may not do that (unlock, purge, "
                                                    + "status --all and audit need pam_totp_admin: pam-totpd(8), FLEET MODE); nothing was changed").utf8)))
    }

    static func text(_ bytes: [UInt8]) throws(MFAError) -> String {
        guard let s = String(validating: bytes, as: UTF8.self), !bytes.contains(0) else { throw .invalidParameters("not valid UTF-8") }
        return s
    }

    public func lookup(user: [UInt8], account: () throws(MFAError) -> Account?) throws(MFAError) -> Enrollment<PostgresStore> {
        let name = try Self.text(user)
        let rows: [[String?]]
        do throws(PQError) {
            rows = try pool.read("SELECT uid, kind, label, masked, has_recovery, pending, digits FROM pam_totp_api.enrolled($1, $2)",
                                 signed("enrolled", [.text(name)]))
        } catch { throw Self.mapped(error) }
        guard let first = rows.first, first.count == 7, let v = first[0], let recordUID = UInt32(v) else { return .unenrolled }
        let uid = try account()?.uid
        guard uid == recordUID else { return .otherAccount(recordUID: recordUID) }
        var enrolled = FleetEnrolled(name: name, uid: recordUID)
        enrolled.hasRecovery = first[4] == "t"
        for row in rows where row.count == 7 {
            guard let kind = row[1].flatMap({ FactorKind(name: Array($0.utf8)) }), let label = row[2] else { continue }
            if row[5] == "t" { enrolled.pending.append(enrolled.factors.count) }
            enrolled.digits.append(row[6].flatMap { Int($0) } ?? 0)
            enrolled.factors.append(FactorHint(kind: kind, label: Array(label.utf8), masked: Array((row[3] ?? "").utf8)))
        }
        return .enrolled(enrolled)
    }

    /// As `UserRecord.hints` (and `hasLiveCode`), from what `lookup` read (no second statement).
    public func hints(_ enrolled: FleetEnrolled, kinds: UInt8) -> FactorHints {
        var h = FactorHints(typed: enrolled.hasRecovery, device: false)
        for (i, f) in enrolled.factors.enumerated() {
            let digits = i < enrolled.digits.count ? enrolled.digits[i] : 0
            h.add(f.kind, allowed: kinds, digits: digits) { f }
            if kinds & f.kind.bit != 0 && enrolled.pending.contains(i) { h.addPending(digits: digits) }
        }
        return h
    }

    public static var queuesCodes: Bool { true }

    /// The database makes the code and queues the message (send_code): this host never sees
    /// the code or the full destination. The limits are the database's (pam_totp.settings).
    public func sendCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32?, label: [UInt8], at now: Int64,
                                                   options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan {
        let name = try Self.text(user), labelText = try Self.text(label)
        guard let accountUID else { return .refused("no text-message or email factor of that name") }
        let rows: [[String?]]
        do throws(PQError) {
            rows = try pool.write("SELECT outcome, detail, sent_at, expires_at, kind, masked FROM pam_totp_api.send_code($1, $2, $3, $4, $5)",
                                  signed("send_code", [.text(name), .text(String(accountUID)), .text(labelText), .text(Self.host)]))
        } catch { throw Self.mapped(error) }
        guard let row = rows.first, row.count == 6 else { throw .daemon("database: malformed reply to send_code") }
        if row[0] == "refused" { return .refused(Message(Array((row[1] ?? "refused").utf8))) }
        guard let sentAt = row[2].flatMap({ Int64($0) }), let expiresAt = row[3].flatMap({ Int64($0) }),
              let kind = row[4].flatMap({ FactorKind(name: Array($0.utf8)) }), let masked = row[5] else {
            throw .daemon("database: malformed reply to send_code")
        }
        return .queued(FactorHint(kind: kind, label: label, masked: Array(masked.utf8)), fresh: row[0] == "sent",
                       sentAt: sentAt, expiresAt: expiresAt)
    }

    /// The code proving a new phone or address, made and queued by the database
    /// (send_enrolment_code, which raises on every refusal: nothing changed).
    public func sendEnrolmentCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, at now: Int64,
                                                            options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan {
        try factor.validateNew()
        let name = try Self.text(user), label = try Self.text(factor.label), destination = try Self.text(factor.destination ?? [])
        let rows: [[String?]]
        do throws(PQError) {
            rows = try pool.write("SELECT pam_totp_api.send_enrolment_code($1, $2, $3, $4, $5, $6, $7)",
                                  signed("send_enrolment_code", [.text(name), .text(String(accountUID)), .text(label),
                                                                 .text(String(decoding: bytes(factor.kind.name), as: UTF8.self)),
                                                                 .text(destination), .text(Self.host)]))
        } catch { throw Self.mappedChange(error) }
        guard let sentAt = rows.first?.first.flatMap({ $0 }).flatMap({ Int64($0) }) else {
            throw .daemon("database: malformed reply to send_enrolment_code")
        }
        return .queued(FactorHint(kind: factor.kind, label: factor.label, masked: factor.maskedDestination), fresh: true,
                       sentAt: sentAt, expiresAt: 0)
    }

    public func confirmEnrolment<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, sentAt: Int64,
                                                           answer: [UInt8], at now: Int64, options: ModuleOptions,
                                                           using generator: inout G) throws(MFAError) -> EnrolmentCheck {
        try factor.validateNew()
        let name = try Self.text(user), label = try Self.text(factor.label)
        let code = answer.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } ? String(decoding: answer, as: UTF8.self) : "x"
        let rows: [[String?]]
        do throws(PQError) {
            // A procedure: the attempt is committed (counted) before its verdict is told.
            // Two credentials: its first step's (confirm_enrolment_begin) and its second's.
            let arguments: [PQValue] = [.text(name), .text(String(accountUID)), .text(label), .text(String(sentAt)),
                                        .text(code), .text(String(factor.created))]
            let signed = credentials("confirm_enrolment_begin", arguments, finishing: "confirm_enrolment_finish")
            rows = try pool.procedure("CALL pam_totp_api.confirm_enrolment($1, $2, $3, $4, $5, $6, p_timeout_ms => $7, p_credential => $8, "
                                      + "p_finish_credential => $9)",
                                      arguments + [.text(String(pool.statementTimeoutMilliseconds)), signed.first, signed.second])
        } catch { throw Self.mappedChange(error) }
        guard let row = rows.first, row.count == 2 else { throw .daemon("database: malformed reply to confirm_enrolment") }
        switch row[0] {
        case "enrolled": return .enrolled
        case "wrong": return .wrong(attemptsLeft: Int(row[1].flatMap { Int64($0) } ?? 0))
        default: return .expired
        }
    }

    /// This host's name, for the message's %h (at most 64 printable bytes, as send_code takes it).
    static let host: String = {
        let name = hostName().filter { $0 > 0x20 && $0 < 0x7F }.prefix(64)
        return name.isEmpty ? "localhost" : String(decoding: name, as: UTF8.self)
    }()

    /// One login in one statement (the procedure pam_totp_api.login): enrolled for this
    /// account's uid, the attempt committed, then the verdict (sql/api.sql).
    public func login(user: [UInt8], account: () throws(MFAError) -> Account?, answer: [UInt8], previous: [UInt8]?,
                      at unixTime: Int64, options: ModuleOptions, process: UInt32) -> AuthOutcome {
        guard let name = try? Self.text(user) else { return .unenrolled }
        let uid: UInt32?
        do throws(MFAError) { uid = try account()?.uid } catch { return .failed(error) }
        let outcome = verdict(name: name, uid: uid.map { .text(String($0)) } ?? .null, answer: answer, previous: previous,
                              at: unixTime, options: options)
        recent.record(outcome, user: user, process: process)
        return outcome
    }

    /// After `lookup`: `login` with the uid the lookup saw, so the verdict is bound to that
    /// account in the same statement (a record purged and enrolled again for another uid in
    /// between is unenrolled, never verified).
    public func authenticate(answer: [UInt8], previous: [UInt8]?, at unixTime: Int64, options: ModuleOptions, process: UInt32,
                             enrolled: FleetEnrolled) -> AuthOutcome {
        let outcome = verdict(name: enrolled.name, uid: .text(String(enrolled.uid)), answer: answer, previous: previous,
                              at: unixTime, options: options)
        recent.record(outcome, user: Array(enrolled.name.utf8), process: process)
        return outcome
    }

    /// `CALL login` on the database's clock; for tests, on the caller's: login_begin_at (the
    /// owner's), committed, then login_finish, two statements on one connection.
    func verdict(name: String, uid: PQValue, answer: [UInt8], previous: [UInt8]?, at unixTime: Int64,
                 options: ModuleOptions) -> AuthOutcome {
        // An answer is digits (and '-' or ' ' in a recovery code); anything else matches nothing.
        func text(_ answer: [UInt8]) -> PQValue {
            .text(answer.allSatisfy { $0 >= 0x20 && $0 < 0x7F } ? String(decoding: answer, as: UTF8.self) : "x")
        }
        var params: [PQValue] = [.text(name), uid, text(answer)]
        if callerClock { params.append(.text(String(unixTime))) }
        params += [.text(String(options.adjacentIntervals)), .text(String(options.maxFailures)),
                   .text(String(options.lockoutSeconds)), .text(options.forwardPass ? "true" : "false"),
                   previous.map(text) ?? .null]
        let placeholders = (1...params.count).map { "$\($0)" }.joined(separator: ", ")
        let rows: [[String?]]
        do throws(PQError) {
            if callerClock {
                rows = try pool.with { (c) throws(PQError) -> [[String?]] in
                    let attempt = try c.call("SELECT pam_totp_api.login_begin_at(\(placeholders))", params)
                    return try c.call("SELECT * FROM pam_totp_api.login_finish($1)", [.text(attempt.first?.first.flatMap { $0 } ?? "")])
                }
            } else {
                // p_previous by name: it follows the procedure's INOUT arguments.
                // p_timeout_ms: its deadline (a procedure that commits sets its own, sql/api.sql).
                // p_credential: its first step's (login_begin, which takes these arguments);
                // p_finish_credential: its second's (login_finish).
                let positional = (1..<params.count).map { "$\($0)" }.joined(separator: ", ")
                let signed = credentials("login_begin", params, finishing: "login_finish")
                rows = try pool.procedure("CALL pam_totp_api.login(\(positional), p_previous => $\(params.count), "
                                          + "p_timeout_ms => $\(params.count + 1), p_credential => $\(params.count + 2), "
                                          + "p_finish_credential => $\(params.count + 3))",
                                          params + [.text(String(pool.statementTimeoutMilliseconds)), signed.first, signed.second])
            }
        } catch {
            // Sent: the verdict may or may not have been recorded; denied either way.
            return error.sent && error.sqlState == nil ? .notRecorded(Self.mapped(error)) : .failed(Self.mapped(error))
        }
        guard let row = rows.first, row.count == 8 else { return .failed(.daemon("database: malformed verdict")) }
        return Self.outcome(row)
    }

    /// A verify row as an outcome: (outcome, label, step, digits, failures, locked_until,
    /// replayed, remaining).
    static func outcome(_ row: [String?]) -> AuthOutcome {
        func int(_ i: Int) -> Int64? { row[i].flatMap { Int64($0) } }
        switch row[0] {
        case "success":
            guard let label = row[1], let step = int(2), step >= 0, let digits = int(3) else { break }
            return .success(factor: Array(label.utf8), step: UInt64(step), digits: Int(digits))
        case "recovery":
            return .recoveryCode(remaining: Int(int(7) ?? 0))
        case "resync":
            return .resyncNeeded(failures: UInt32(clamping: int(4) ?? 0))
        case "wrong":
            let until = int(5) ?? 0
            return .wrongCode(replayed: row[6] == "t", failures: UInt32(clamping: int(4) ?? 0), lockedUntil: until > 0 ? until : nil)
        case "locked":
            let until = int(5) ?? Int64.max
            return .lockedOut(until: until, permanent: until == Int64.max)
        case "unenrolled":
            return .unenrolled
        default:
            break
        }
        return .failed(.daemon("database: malformed verdict"))
    }

    public func status(user: [UInt8]) throws(MFAError) -> UserStatus? {
        let name = try Self.text(user)
        let s: [[String?]], f: [[String?]]
        do throws(PQError) {
            s = try pool.read("SELECT * FROM pam_totp_api.user_status($1, $2)", signed("user_status", [.text(name)]))
            f = try pool.read("SELECT * FROM pam_totp_api.list_factors($1, $2)", signed("list_factors", [.text(name)]))
        } catch { throw Self.mapped(error) }
        guard let row = s.first, row.count >= 6 else { return nil }  // (the seventh, sends, since 008)
        var record = UserRecord()
        record.uid = row[0].flatMap { UInt32($0) }
        var lastUsed: [(Factor, UInt64, Int64)] = []
        for r in f where r.count >= 8 {  // list_factors' columns (sql/api.sql; the ninth, destination, since 008; the tenth, drift, since 010)
            guard let kind = r[6].flatMap({ FactorKind(name: Array($0.utf8)) }), let label = r[0], let alg = r[1].flatMap({ HashAlgorithm(name: Array($0.utf8)) }),
                  let digits = r[2].flatMap({ Int($0) }), let period = r[3].flatMap({ UInt64($0) }),
                  let created = r[4].flatMap({ Int64($0) }) else { continue }
            // A phone or address: its mask (the full one for an admin role), shown as it is. A
            // device: its parameters (the secret never leaves the database).
            let sent = FactorData(kind: kind, destination: r.count > 8 ? Array((r[8] ?? "").utf8) : [])
            let parameters = try OTPParameters(algorithm: alg, digits: digits, period: period)
            guard let data = sent ?? FactorData(kind: kind, key: OTPKey(secret: [], parameters: parameters)) else { continue }
            let factor = try Factor(label: Array(label.utf8), created: created, serial: sent == nil ? r[7].map { Array($0.utf8) } ?? [] : [], data: data)
            record.factors.append(factor)
            guard sent == nil else { continue }
            // The last used step or counter (NULL for a token's counter, unless this role is an
            // admin), with the learned clock drift (TOTP; 0 for the other kinds).
            let drift = r.count > 9 ? r[9].flatMap { Int64($0) } ?? 0 : 0
            if let last = r[5].flatMap({ UInt64($0) }) { lastUsed.append((factor, last, drift)) }
        }
        var state = UserState()
        // The recovery set's id, size and used codes (its salt and hashes stay in the database).
        if let set = row[3].flatMap({ Int64($0) }), let count = row[4].flatMap({ Int($0) }), count >= 0 {
            record.recovery = RecoverySet(id: UInt64(bitPattern: set), iterations: 0, salt: [],
                                          hashes: [[UInt8]](repeating: [], count: count))
            state.recoverySet = UInt64(bitPattern: set)
            state.recoveryUsed = UInt32(truncatingIfNeeded: row[5].flatMap { Int64($0) } ?? 0)
        }
        // "{1764151200,1764151260}": the sends of the last day, oldest first.
        if row.count > 6, let list = row[6] {
            state.sends = list.split(whereSeparator: { $0 == "{" || $0 == "}" || $0 == "," }).compactMap { Int64($0) }.suffix(32).map { $0 }
        }
        state.failures = UInt32(clamping: row[1].flatMap { Int64($0) } ?? 0)
        state.lockedUntil = row[2].flatMap { Int64($0) } ?? 0
        for (factor, last, drift) in lastUsed { state.setLastStep(last, of: factor, drift: drift) }
        var status = UserStatus(record: record, state: state)
        recent.apply(to: &status, user: user)
        return status
    }

    /// Every enrolled name, in byte order (`all_status`, granted to pam_totp_admin only).
    public func users() throws(MFAError) -> [[UInt8]] {
        let rows: [[String?]]
        do throws(PQError) { rows = try pool.read("SELECT name FROM pam_totp_api.all_status()") } catch { throw Self.mappedChange(error) }
        return rows.compactMap { $0.first ?? nil }.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
    }

    public func checkEnrollable(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8]?) throws(MFAError) {
        try Factor.validateNew(label: label)
        let params: [PQValue] = [.text(try Self.text(user)), .text(String(accountUID)), .text(try Self.text(label)),
                                 secret.map { .bytea($0) } ?? .null]
        do throws(PQError) {
            _ = try pool.read("SELECT pam_totp_api.check_enrollable($1, $2, $3, $4, $5)", signed("check_enrollable", params))
        } catch { throw Self.mapped(error) }
    }

    @discardableResult
    public func enroll<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor,
                                                 importedCodes: [[UInt8]]?, using generator: inout G) throws(MFAError) -> Int {
        try factor.validateNew()
        let name = try Self.text(user)
        // A device's key, and the step or counter its saving uses (`usedAtEnrolment`).
        guard let key = factor.otpKey, let used = factor.data.usedAtEnrolment else { throw .refusal(.enrolNeedsSecret) }
        let p = key.parameters
        let params: [PQValue] = [.text(name), .text(String(accountUID)), .text(try Self.text(factor.label)),
                                 .text(p.algorithm.name), .text(String(p.digits)),
                                 .text(String(p.period)), .text(String(factor.created)), .text(String(used)),
                                 .bytea(key.secret), .text("\(factor.kind.name)"), Self.serial(factor)]
        do throws(PQError) {
            if let codes = importedCodes, !codes.isEmpty {
                // The factor and the codes in one transaction: one statement.
                let set = RecoverySet.hashing(codes: codes, using: &generator)
                let recovery = recoveryParameters(set) + [.textArray(codes.map { String(decoding: $0, as: UTF8.self) })]
                // Two calls, each with its own credential.
                let rows = try pool.write("""
                    WITH e AS (SELECT pam_totp_api.enroll($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $17))
                    SELECT pam_totp_api.replace_recovery($1, $2, $12, $13, $14, $15, $16, $18) FROM e
                    """, params + recovery + [credential("enroll", params),
                                                 credential("replace_recovery", Array(params.prefix(2)) + recovery)])
                return max(0, Int(rows.first?.first.flatMap { $0 } ?? "0") ?? 0)
            }
            _ = try pool.write("SELECT pam_totp_api.enroll($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)", signed("enroll", params))
            return 0
        } catch { throw Self.mappedChange(error) }
    }

    /// Enrolment at first login (`enroll_first`, sql/api.sql): the code checked against the new
    /// secret on the database's clock, and the factor saved only while the user has no factor,
    /// under the user's row lock, in one statement. The secret goes in and never comes out.
    public func enrollAtLogin(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8], answer: [UInt8]?, at now: Int64,
                              options: ModuleOptions) throws(MFAError) -> FirstFactor {
        try Factor.validateNew(label: label)
        var proof: [PQValue] = [.null, .null]  // the checks only
        if let answer {
            guard secret.count >= 10 && secret.count <= 128 else { throw .invalidParameters("secret must be 10 to 128 bytes") }
            guard let text = try? Self.text(answer) else { return .wrongCode }
            proof = [.bytea(secret), .text(text)]
        }
        let p = OTPParameters.default
        let params: [PQValue] = [.text(try Self.text(user)), .text(String(accountUID)), .text(try Self.text(label)),
                                 .text(p.algorithm.name), .text(String(p.digits)), .text(String(p.period))]
            + proof + [.text(String(options.adjacentIntervals))]
        let rows: [[String?]]
        do throws(PQError) {
            rows = try pool.write("SELECT pam_totp_api.enroll_first($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)", signed("enroll_first", params))
        } catch { throw Self.mappedChange(error) }
        switch (rows.first?.first ?? nil) ?? "" {
        case "may-enrol" where answer == nil: return .mayEnrol
        case "enrolled" where answer != nil: return .enrolled
        case "wrong" where answer != nil: return .wrongCode
        case "had-factor": return .hadFactor
        default: throw MFAError.daemon("database: malformed reply")
        }
    }

    /// enroll's p_serial: the factor's serial number, or NULL for none (valid UTF-8 once
    /// `validateNew` passed; a file import's is read as its labels are).
    static func serial(_ factor: Factor) -> PQValue {
        factor.serial.isEmpty ? .null : .text(String(decoding: factor.serial, as: UTF8.self))
    }

    func recoveryParameters(_ set: RecoverySet) -> [PQValue] {
        [.text(String(Int64(bitPattern: set.id))), .text(String(set.iterations)), .bytea(set.salt), .byteaArray(set.hashes)]
    }

    public func removeFactor(user: [UInt8], accountUID: UInt32, label: [UInt8], mayRemoveLast: Bool) throws(MFAError) -> Int {
        let params: [PQValue] = [.text(try Self.text(user)), .text(String(accountUID)), .text(try Self.text(label)),
                                 .text(mayRemoveLast ? "true" : "false")]
        do throws(PQError) {
            let rows = try pool.write("SELECT pam_totp_api.remove_factor($1, $2, $3, $4, $5)", signed("remove_factor", params))
            return Int(rows.first?.first.flatMap { $0 } ?? "0") ?? 0
        } catch { throw Self.mappedChange(error) }
    }

    public func replaceRecovery(user: [UInt8], accountUID: UInt32, set: RecoverySet) throws(MFAError) -> Bool {
        let params: [PQValue] = [.text(try Self.text(user)), .text(String(accountUID))] + recoveryParameters(set) + [.null]
        do throws(PQError) {
            let rows = try pool.write("SELECT pam_totp_api.replace_recovery($1, $2, $3, $4, $5, $6, $7, $8)", signed("replace_recovery", params))
            return (rows.first?.first.flatMap { $0 }).flatMap { Int($0) }.map { $0 >= 0 } ?? false
        } catch { throw Self.mappedChange(error) }
    }

    public func unlock(user: [UInt8], at now: Int64) throws(MFAError) -> UnlockResult {
        let name = try Self.text(user)
        let rows: [[String?]]
        do throws(PQError) { rows = try pool.write("SELECT * FROM pam_totp_api.unlock($1)", [.text(name)]) } catch { throw Self.mappedChange(error) }
        guard let r = rows.first, r.count == 2 else { throw MFAError.daemon("database: malformed reply") }
        return UnlockResult(failures: UInt32(clamping: r[0].flatMap { Int64($0) } ?? 0),
                            lockedUntil: r[1].flatMap { Int64($0) } ?? 0, rebuilt: false)
    }

    /// The audit trail (`audit_trail`, granted to pam_totp_admin only).
    public func auditTrail(user: [UInt8]?, since: Int64, after: UInt64, limit: Int) throws(MFAError) -> [AuditEvent] {
        var name = PQValue.null
        if let user { name = .text(try Self.text(user)) }
        let params: [PQValue] = [name, .text(String(since)),
                                 .text(String(Int64(clamping: after))), .text(String(max(1, min(limit, 1000))))]
        let rows: [[String?]]
        do throws(PQError) {
            rows = try pool.read("SELECT * FROM pam_totp_api.audit_trail($1, $2, $3, $4)", params)
        } catch { throw Self.mappedChange(error) }
        var events: [AuditEvent] = []
        for r in rows {
            guard r.count == 10, let id = r[0].flatMap({ UInt64($0) }), let at = r[1].flatMap({ Int64($0) }),
                  let role = r[2], let account = r[3], let event = r[5] else { throw MFAError.daemon("database: malformed reply") }
            events.append(AuditEvent(id: id, time: at, role: Array(role.utf8), account: Array(account.utf8), uid: r[4].flatMap { UInt32($0) },
                              event: Array(event.utf8), label: Array((r[6] ?? "").utf8), failures: r[7].flatMap { UInt32($0) },
                              lockedUntil: r[8].flatMap { Int64($0) } ?? 0, detail: Array((r[9] ?? "").utf8)))
        }
        return events
    }

    public func purge(user: [UInt8]) throws(MFAError) -> Bool {
        let name = try Self.text(user)
        do throws(PQError) {
            let rows = try pool.write("SELECT pam_totp_api.purge($1)", [.text(name)])
            return rows.first?.first.flatMap { $0 } == "t"
        } catch { throw Self.mappedChange(error) }
    }
}
