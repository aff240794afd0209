import CLibPQ
import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// A small libpq binding for pam-totpd's PostgreSQL backend (docs/ARCHITECTURE.md, section 8): one
// connection per caller at a time, every wait bounded by a client-side deadline (connect and
// each statement), so a dead or slow server costs a login at most `statementTimeout`, never
// a hang. CONNINFO is libpq's own (keyword/value or postgresql:// URI): TLS (sslmode,
// sslrootcert, sslcert), SCRAM and passfile all come from the system's libpq.

/// A failure talking to PostgreSQL. `connectionLost`: the connection is unusable (refused,
/// timed out, reset); otherwise the server answered with an error (`sqlState`).
public struct PQError: Error, CustomStringConvertible {
    public let message: String
    public let sqlState: String?
    public let connectionLost: Bool
    /// The statement may have reached the server (its effect is unknown).
    public let sent: Bool
    /// A deadline passed (as opposed to a connection refused or reset at once).
    public var timedOut = false
    public var description: String { message }
}

/// The SQLSTATEs the fleet store tells apart (PostgreSQL, Appendix A).
public enum SQLState {
    /// unique_violation: a row already there (import-files: a user already in the database).
    public static let alreadyExists = "23505"
    /// insufficient_privilege: this role may not call that function.
    public static let insufficientPrivilege = "42501"
}

/// One value of a statement's text-format parameters.
public enum PQValue {
    case text(String)
    case bytea([UInt8])
    case byteaArray([[UInt8]])
    case textArray([String])
    case null

    var literal: String? {
        switch self {
        case .text(let s): return s
        case .bytea(let b): return "\\x" + hex(b)
        case .byteaArray(let a): return "{" + a.map { "\"\\\\x" + hex($0) + "\"" }.joined(separator: ",") + "}"
        case .textArray(let a): return "{" + a.map { "\"" + $0.replacingAll("\\", "\\\\").replacingAll("\"", "\\\"") + "\"" }.joined(separator: ",") + "}"
        case .null: return nil
        }
    }
}

func hex(_ bytes: [UInt8]) -> String { String(decoding: Hex.encode(bytes), as: UTF8.self) }

extension String {
    func replacingAll(_ what: String, _ with: String) -> String {
        var out = ""
        var rest = Substring(self)
        while let r = rest.range(of: what) {
            out += rest[..<r.lowerBound]
            out += with
            rest = rest[r.upperBound...]
        }
        return out + rest
    }
}

extension Substring {
    func range(of needle: String) -> Range<Substring.Index>? {
        guard !needle.isEmpty else { return nil }
        var i = startIndex
        while i < endIndex {
            if self[i...].hasPrefix(needle) { return i..<index(i, offsetBy: needle.count) }
            i = index(after: i)
        }
        return nil
    }
}

/// libpq, loaded on first use (CLibPQ, dlopen): pam-totpd links no database client, so a host
/// without fleet mode needs neither libpq nor the TLS, Kerberos and LDAP libraries it pulls in.
public enum PQLibrary {
    /// Loads libpq.so.5 (once); throws, saying what to install, when it cannot.
    public static func load() throws(PQError) {
        var why = [CChar](repeating: 0, count: 512)
        guard cpq_load(&why, why.count) != 0 else { return }
        throw PQError(message: "fleet mode needs libpq, which cannot be loaded (Debian: apt install pam-totp-fleet): "
                      + String(cString: why), sqlState: nil, connectionLost: true, sent: false)
    }
}

/// Milliseconds on the monotonic clock.
func monotonicMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

/// Used by one thread at a time (a pool hands it to one worker).
public final class PQConnection: @unchecked Sendable {
    private var conn: OpaquePointer?
    public let statementTimeoutMilliseconds: Int

    /// Connects within `timeoutMilliseconds` (libpq's own connect_timeout as well, unless
    /// CONNINFO sets one). Nothing is set on the session: a pooler (PgBouncer in transaction
    /// mode) hands a session's server connection to other clients, and hands this client other
    /// server connections; each `call` carries its own deadline (`statementTimeoutMilliseconds`).
    public init(conninfo: String, timeoutMilliseconds: Int = 2_000, statementTimeoutMilliseconds: Int = 3_000) throws(PQError) {
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        try PQLibrary.load()
        let deadline = monotonicMilliseconds() + Int64(timeoutMilliseconds)
        let seconds = String(max(2, (timeoutMilliseconds + 999) / 1000))
        // Earlier keywords are defaults: CONNINFO (expanded from dbname) overrides them.
        let keys = ["connect_timeout", "application_name", "dbname"]
        let values = [seconds, "pam-totpd", conninfo]
        let c: OpaquePointer? = withCStrings(keys) { k in
            withCStrings(values) { v in cpq_PQconnectStartParams(k, v, 1) }
        }
        guard let c else { throw PQError(message: "out of memory", sqlState: nil, connectionLost: true, sent: false) }
        conn = c
        if cpq_PQstatus(c) == CONNECTION_BAD { let e = lastError("cannot connect"); finish(); throw e }
        var status = PGRES_POLLING_WRITING
        while true {
            if status == PGRES_POLLING_OK { break }
            if status == PGRES_POLLING_FAILED { let e = lastError("cannot connect"); finish(); throw e }
            let events = status == PGRES_POLLING_READING ? Int16(POLLIN) : Int16(POLLOUT)
            do throws(PQError) { try wait(events, deadline: deadline, doing: "connecting") } catch { finish(); throw error }
            status = cpq_PQconnectPoll(c)
        }
    }

    deinit { finish() }

    public var isBroken: Bool { conn == nil || cpq_PQstatus(conn) != CONNECTION_OK }

    /// An idle connection with anything to read is dead or dying: the server's "terminating
    /// connection" notice, or end of file after it was stopped or killed (an async
    /// ParameterStatus would also count: then a healthy one is replaced, which is harmless).
    /// Checked before a pooled connection is used, so a statement is only ever sent on a
    /// connection that was alive, and an outage shows as a failed connect (nothing sent).
    public var looksDead: Bool {
        guard let c = conn, cpq_PQstatus(c) == CONNECTION_OK else { return true }
        var p = pollfd(fd: cpq_PQsocket(c), events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) != 0
    }

    private func finish() {
        if let c = conn { cpq_PQfinish(c) }
        conn = nil
    }

    private func lastError(_ what: String) -> PQError {
        var text = conn.flatMap { cpq_PQerrorMessage($0) }.map { String(cString: $0) } ?? ""
        while text.last == "\n" || text.last == " " { text.removeLast() }
        // libpq's messages name the host and port, never the password.
        return PQError(message: what + (text.isEmpty ? "" : ": " + text.split(separator: "\n").joined(separator: "; ")),
                       sqlState: nil, connectionLost: true, sent: false)
    }

    private func wait(_ events: Int16, deadline: Int64, doing what: String) throws(PQError) {
        guard let c = conn else { throw PQError(message: "not connected", sqlState: nil, connectionLost: true, sent: false) }
        while true {
            let left = deadline - monotonicMilliseconds()
            guard left > 0 else { throw PQError(message: "timed out " + what, sqlState: nil, connectionLost: true, sent: true, timedOut: true) }
            var p = pollfd(fd: cpq_PQsocket(c), events: events, revents: 0)
            let rc = poll(&p, 1, Int32(min(left, 60_000)))
            if rc > 0 { return }
            if rc < 0 && clibc_errno() != EINTR {
                throw PQError(message: what + ": poll failed", sqlState: nil, connectionLost: true, sent: true)
            }
        }
    }

    /// Waits until the server sends a notification (after LISTEN) or `timeoutMilliseconds`
    /// pass; true if one came. Every notification received is taken and freed (their channel
    /// and payload are not needed: the caller asks the database what is waiting).
    public func waitForNotification(timeoutMilliseconds: Int) throws(PQError) -> Bool {
        guard let c = conn, cpq_PQstatus(c) == CONNECTION_OK else {
            throw PQError(message: "not connected", sqlState: nil, connectionLost: true, sent: false)
        }
        func drain() -> Bool {
            var any = false
            while let n = cpq_PQnotifies(c) { cpq_PQfreemem(n); any = true }
            return any
        }
        if drain() { return true }
        var p = pollfd(fd: cpq_PQsocket(c), events: Int16(POLLIN), revents: 0)
        let rc = poll(&p, 1, Int32(clamping: max(timeoutMilliseconds, 0)))
        if rc < 0 && clibc_errno() != EINTR {
            throw PQError(message: "waiting for a notification: poll failed", sqlState: nil, connectionLost: true, sent: false)
        }
        if rc > 0 && cpq_PQconsumeInput(c) != 1 {
            let e = lastError("connection lost")
            finish()
            throw e
        }
        return drain()
    }

    /// Runs one statement with its own deadline (rule 19: a deadline lives in the transaction):
    /// in one round trip (libpq's pipeline mode), `set_config('statement_timeout', ms, true)`,
    /// then the statement, then one Sync. Both run in one transaction (the extended protocol's
    /// implicit one, or the caller's block), so the setting ends with it: no session, and so no
    /// server connection a pooler shares, keeps it, and the server cancels the statement at
    /// the deadline whichever server connection runs it. A procedure that commits inside (CALL
    /// login) is still under it: the server arms the timeout when the statement starts. Returns
    /// the statement's rows; on a lost connection or timeout the connection is closed (`isBroken`).
    public func call(_ sql: String, _ parameters: [PQValue] = []) throws(PQError) -> [[String?]] {
        let c = try connected()
        let deadline = monotonicMilliseconds() + Int64(statementTimeoutMilliseconds + 500)
        guard cpq_PQenterPipelineMode(c) == 1 else { let e = lastError("cannot enter pipeline mode"); finish(); throw e }
        let literals = parameters.map { $0.literal }
        let timeoutSent = withOptionalCStrings([String(statementTimeoutMilliseconds)]) { values in
            cpq_PQsendQueryParams(c, "SELECT set_config('statement_timeout', $1, true)", 1, nil, values, nil, nil, 0)
        }
        let sentOK = timeoutSent == 1 && withOptionalCStrings(literals) { values in
            cpq_PQsendQueryParams(c, sql, Int32(literals.count), nil, values, nil, nil, 0)
        } == 1 && cpq_PQpipelineSync(c) == 1
        guard sentOK else { let e = lastError("cannot send"); finish(); throw e }
        try flush(c, deadline: deadline)
        // The results: the deadline's, NULL, the statement's, NULL, then the Sync's.
        var rows: [[String?]] = []
        var failure: PQError? = nil
        var query = 0
        while true {
            try awaitResult(c, deadline: deadline)
            guard let result = cpq_PQgetResult(c) else {
                query += 1
                guard query <= 3 else {
                    finish()
                    throw failure ?? PQError(message: "no end to the call's results", sqlState: nil, connectionLost: true, sent: true)
                }
                continue
            }
            defer { cpq_PQclear(result) }
            let status = cpq_PQresultStatus(result)
            if status == PGRES_PIPELINE_SYNC { break }
            if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK {
                if query == 1 { rows = Self.rows(result) }
            } else if failure == nil {
                // An error after the statement's own results is its transaction's commit
                // failing (a deferred constraint, a serialization failure): the call failed.
                failure = status == PGRES_PIPELINE_ABORTED
                    ? PQError(message: "not run: the call's deadline could not be set", sqlState: nil, connectionLost: false, sent: true)
                    : error(of: result, c)
            }
        }
        guard cpq_PQexitPipelineMode(c) == 1 else { let e = lastError("cannot leave pipeline mode"); finish(); throw e }
        if cpq_PQstatus(c) != CONNECTION_OK { finish() }
        if let failure { throw failure }
        return rows
    }

    /// Runs SQL as it is, with no deadline of its own on the server: a script of several
    /// statements (a migration: its own transaction sets one with SET LOCAL), transaction
    /// control, LISTEN. Parameters, if any, go with it in the extended protocol. Returns the rows
    /// of its results; on a lost connection or timeout the connection is closed (`isBroken`).
    public func execute(_ sql: String, _ parameters: [PQValue] = [],
                        timeoutMilliseconds: Int? = nil) throws(PQError) -> [[String?]] {
        let c = try connected()
        let deadline = monotonicMilliseconds() + Int64(timeoutMilliseconds ?? statementTimeoutMilliseconds + 500)
        let literals = parameters.map { $0.literal }
        // Without parameters: the simple protocol, which also runs a script of several statements.
        let sentOK: Int32 = literals.isEmpty ? cpq_PQsendQuery(c, sql) : withOptionalCStrings(literals) { values in
            cpq_PQsendQueryParams(c, sql, Int32(literals.count), nil, values, nil, nil, 0)
        }
        guard sentOK == 1 else { let e = lastError("cannot send"); finish(); throw e }
        try flush(c, deadline: deadline)
        var rows: [[String?]] = []
        var failure: PQError? = nil
        while true {
            try awaitResult(c, deadline: deadline)
            guard let result = cpq_PQgetResult(c) else { break }
            defer { cpq_PQclear(result) }
            let status = cpq_PQresultStatus(result)
            if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK {
                rows += Self.rows(result)
            } else if failure == nil {
                failure = error(of: result, c)
            }
        }
        if cpq_PQstatus(c) != CONNECTION_OK { finish() }
        if let failure { throw failure }
        return rows
    }

    private func connected() throws(PQError) -> OpaquePointer {
        guard let c = conn, cpq_PQstatus(c) == CONNECTION_OK else {
            throw PQError(message: "not connected", sqlState: nil, connectionLost: true, sent: false)
        }
        return c
    }

    /// Flushes what was sent (a short statement fits the socket buffer; PQflush loops only if it did not).
    private func flush(_ c: OpaquePointer, deadline: Int64) throws(PQError) {
        while cpq_PQflush(c) == 1 {
            do throws(PQError) { try wait(Int16(POLLOUT), deadline: deadline, doing: "sending") } catch { finish(); throw error }
        }
    }

    /// Waits until a result can be taken without blocking.
    private func awaitResult(_ c: OpaquePointer, deadline: Int64) throws(PQError) {
        while cpq_PQisBusy(c) == 1 {
            do throws(PQError) { try wait(Int16(POLLIN), deadline: deadline, doing: "waiting for the database") } catch {
                finish(); throw error
            }
            guard cpq_PQconsumeInput(c) == 1 else {
                var e = lastError("connection lost")
                e = PQError(message: e.message, sqlState: nil, connectionLost: true, sent: true, timedOut: e.timedOut)
                finish(); throw e
            }
        }
    }

    private static func rows(_ result: OpaquePointer) -> [[String?]] {
        var rows: [[String?]] = []
        let n = cpq_PQntuples(result), m = cpq_PQnfields(result)
        for i in 0..<n {
            var row: [String?] = []
            for j in 0..<m {
                row.append(cpq_PQgetisnull(result, i, j) == 1 ? nil : String(cString: cpq_PQgetvalue(result, i, j)))
            }
            rows.append(row)
        }
        return rows
    }

    private func error(of result: OpaquePointer, _ c: OpaquePointer) -> PQError {
        let state = cpq_PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let primary = cpq_PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) } ?? "error"
        return PQError(message: primary, sqlState: state, connectionLost: cpq_PQstatus(c) != CONNECTION_OK, sent: true)
    }
}

/// Checks a CONNINFO without connecting: nil if libpq parses it, else libpq's message. And
/// whether it holds a password (then its file must be root-only).
public func checkConninfo(_ conninfo: String) -> (error: String?, hasPassword: Bool) {
    do throws(PQError) { try PQLibrary.load() } catch { return (error.message, false) }
    var err: UnsafeMutablePointer<CChar>? = nil
    guard let options = cpq_PQconninfoParse(conninfo, &err) else {
        let text = err.map { String(cString: $0) } ?? "cannot parse"
        if let err { cpq_PQfreemem(err) }
        return (text.split(separator: "\n").joined(separator: "; "), false)
    }
    defer { cpq_PQconninfoFree(options) }
    var hasPassword = false
    var p = options
    while let keyword = p.pointee.keyword {
        if String(cString: keyword) == "password", let v = p.pointee.val, v.pointee != 0 { hasPassword = true }
        p += 1
    }
    return (nil, hasPassword)
}

/// A warning when `conninfo` reaches a database on another machine without requiring TLS
/// (sslmode unset, disable, allow or prefer): a host's requests — codes and passwords' neighbours
/// — and the verdicts would cross the network readable and changeable. Nil for Unix sockets,
/// localhost and loopback addresses, or sslmode require, verify-ca or verify-full.
public func conninfoTLSWarning(_ conninfo: String) -> String? {
    guard (try? PQLibrary.load()) != nil else { return nil }
    var err: UnsafeMutablePointer<CChar>? = nil
    guard let options = cpq_PQconninfoParse(conninfo, &err) else {
        if let err { cpq_PQfreemem(err) }
        return nil
    }
    defer { cpq_PQconninfoFree(options) }
    var values: [String: String] = [:]
    var p = options
    while let keyword = p.pointee.keyword {
        if let v = p.pointee.val, v.pointee != 0 { values[String(cString: keyword)] = String(cString: v) }
        p += 1
    }
    let mode = values["sslmode"] ?? "prefer"
    guard !["require", "verify-ca", "verify-full"].contains(mode) else { return nil }
    // hostaddr, where given, is what is connected to (host then only names it for TLS).
    let targets = (values["hostaddr"] ?? values["host"] ?? "").split(separator: ",", omittingEmptySubsequences: false)
        .map { String($0.filter { $0 != " " }) }
    func local(_ h: String) -> Bool {
        h.isEmpty || h.hasPrefix("/") || h.hasPrefix("@") || h == "localhost" || h.hasPrefix("127.") || h == "::1"
    }
    guard let remote = targets.first(where: { !local($0) }) else { return nil }
    return "postgresql = CONNINFO reaches \(remote) without requiring TLS (sslmode=\(mode)): codes and verdicts would cross the network "
        + "readable and changeable; use sslmode=verify-full with sslrootcert= (docs/FLEET.md, TLS)"
}

private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for p in pointers { free(p) } }
    return pointers.withUnsafeBufferPointer { buffer in
        buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { body($0) }
    }
}

private func withOptionalCStrings<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
    let pointers: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0) } ?? nil }
    defer {
        for p in pointers {
            if let p { memset(p, 0, strlen(p)); free(p) }  // parameters may hold an answer
        }
    }
    if pointers.isEmpty { return body(nil) }
    return pointers.withUnsafeBufferPointer { buffer in
        buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { body($0) }
    }
}
