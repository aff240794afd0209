import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll audit [--user NAME] [--since TIME] [--limit N] [--json]` (root, fleet mode): the
/// database's audit trail through pam-totpd — every login (accepted, refused, locked out),
/// enrolment, removal, new recovery codes, unlock, purge and import, with the database role of
/// the host or admin that did it. The daemon's role needs pam_totp_admin (an admin daemon,
/// docs/FLEET.md). Never a code or a secret: the trail holds none.
struct AuditTrail: Command {
    static let name = "audit"
    static let abstract = "Show the fleet's audit trail: logins, lockouts and enrolment changes (root, fleet mode)."
    static let discussion = """
            Oldest first. TIME is Unix seconds, a UTC date (2026-11-24) or date and time \
            (2026-11-24T09:30:00Z), or an age (90m, 12h, 7d). The daemon asked (socket= of the \
            configuration, --config FILE) must run with a role that has pam_totp_admin.
            """
    static let specs = AuditQuery.specs + [JSONOutputOption.spec, ConfigFileOption.spec]

    let query: AuditQuery
    let output: JSONOutputOption
    let site: ConfigFileOption

    init(_ arguments: Arguments) throws(CommandError) {
        query = try AuditQuery(arguments)
        output = JSONOutputOption(arguments)
        site = ConfigFileOption(arguments)
    }

    func run() throws(CommandError) {
        try Self.requireRoot()
        if let config = site.config { siteConfigFile = config }
        let from = query.since.flatMap { Self.parseTime($0, now: Int64(time(nil))) } ?? 0
        let (storePath, socket) = try CallerContext.where(store: nil)
        guard socket != nil else {
            throw CLIError("the audit trail is kept in fleet mode (backend = postgresql); on a single host, see the authpriv log (pam_totp, pam-totpd and totp-enroll log every login, lockout and change there)")
        }
        let store = try CallerContext.openStore(at: storePath, socket: socket)
        let who = query.user.map { Array($0.utf8) }
        var after: UInt64 = 0
        var shownCount = 0
        var first = true
        if output.json { print("{\"events\":[", terminator: "") }
        // Page by page, printed as it comes: a year of logins need not fit in memory.
        while query.limit.map({ shownCount < $0 }) ?? true {
            let chunk = min(500, (query.limit ?? Int.max) - shownCount)
            let events = try storeCall { () throws(MFAError) in try store.auditTrail(user: who, since: from, after: after, limit: chunk) }
            for e in events {
                if output.json {
                    print((first ? "" : ",") + Self.json(e), terminator: "")
                } else {
                    print(Self.line(e))
                }
                first = false
            }
            shownCount += events.count
            guard events.count == chunk, let last = events.last else { break }
            after = last.id
        }
        if output.json { print("]}") } else if first { print("(no events)") }
    }

    /// One event as a line: time, role, user, event, factor, and what it left (never a code).
    static func line(_ e: AuditEvent) -> String {
        var detail: [String] = []
        if !e.detail.isEmpty { detail.append(shown(e.detail)) }
        if let f = e.failures, f > 0 { detail.append("\(f) consecutive failure\(f == 1 ? "" : "s")") }
        if e.lockedUntil > 0 {
            detail.append(e.lockedUntil == Int64.max ? "locked until an admin unlocks" : "locked out until \(stamp(e.lockedUntil)) UTC")
        }
        let uid = e.uid.map { " (uid \($0))" } ?? ""
        return "\(stamp(e.time)) UTC  \(shown(e.event))  user \(shown(e.account))\(uid)"
            + (e.label.isEmpty ? "" : "  factor \(shown(e.label))") + "  by \(shown(e.role))"
            + (detail.isEmpty ? "" : ": " + detail.joined(separator: "; "))
    }

    static func json(_ e: AuditEvent) -> String {
        JSON.object([
            ("id", "\(e.id)"),
            ("time", "\(e.time)"),
            ("time_utc", JSON.string(Array(stamp(e.time).utf8))),
            ("role", JSON.string(e.role)),
            ("user", JSON.string(e.account)),
            ("uid", e.uid.map { "\($0)" } ?? "null"),
            ("event", JSON.string(e.event)),
            ("factor", e.label.isEmpty ? "null" : JSON.string(e.label)),
            ("failures", e.failures.map { "\($0)" } ?? "null"),
            ("locked_until", e.lockedUntil > 0 ? "\(e.lockedUntil)" : "null"),
            ("detail", JSON.string(e.detail)),
        ])
    }

    /// "2026-11-24 09:30:05".
    static func stamp(_ t: Int64) -> String { formatTime(t, format: "%Y-%m-%d %H:%M:%S") }

    /// --since: Unix seconds, a UTC date or date and time, or an age before `now`.
    static func parseTime(_ text: String, now: Int64) -> Int64? {
        if let seconds = Int64(text), seconds >= 0 { return seconds }
        if let unit = text.last, let n = Int64(text.dropLast()), n >= 0 {
            let scale: Int64? = switch unit { case "s": 1; case "m": 60; case "h": 3600; case "d": 86400; default: nil }
            if let scale {
                let (age, overflow) = n.multipliedReportingOverflow(by: scale)
                return overflow ? nil : max(0, now - min(age, now))
            }
        }
        // 2026-11-24, 2026-11-24T09:30, 2026-11-24 09:30:05, with or without a trailing Z.
        var t = text
        if t.hasSuffix("Z") { t.removeLast() }
        let parts = t.split(whereSeparator: { $0 == "T" || $0 == " " }).map(String.init)
        guard (1...2).contains(parts.count) else { return nil }
        let date = parts[0].split(separator: "-", omittingEmptySubsequences: false).map { Int32($0) }
        let clock = parts.count == 2 ? parts[1].split(separator: ":", omittingEmptySubsequences: false).map { Int32($0) } : []
        guard date.count == 3, let y = date[0], let mo = date[1], let d = date[2], (1970...9999).contains(y), (1...12).contains(mo),
              (1...31).contains(d), clock.count == 0 || (2...3).contains(clock.count), clock.allSatisfy({ $0 != nil }) else { return nil }
        let hms = clock.compactMap { $0 } + [0, 0, 0]
        guard (0...23).contains(hms[0]), (0...59).contains(hms[1]), (0...60).contains(hms[2]) else { return nil }
        var parts_ = tm()
        parts_.tm_year = y - 1900; parts_.tm_mon = mo - 1; parts_.tm_mday = d
        parts_.tm_hour = hms[0]; parts_.tm_min = hms[1]; parts_.tm_sec = hms[2]
        let seconds = timegm(&parts_)
        // timegm normalises 2026-02-31 to March: a date that does not exist is not a time.
        guard seconds >= 0, parts_.tm_mday == d, parts_.tm_mon == mo - 1 else { return nil }
        return Int64(seconds)
    }
}

/// `--user`, `--since` and `--limit` of `audit`: which events, checked before anything is asked.
struct AuditQuery {
    static let specs: [ArgumentSpec] = [
        .option("--user", "NAME", "Only this user's events (the account may already be deleted)."),
        .option("--since", "TIME", "Only events at or after this time."),
        .option("--limit", "N", "At most this many events (default: all)."),
    ]

    let user: String?
    let since: String?
    let limit: Int?

    init(_ arguments: Arguments) throws(CommandError) {
        user = arguments.string("--user")
        since = arguments.string("--since")
        limit = try arguments.integer("--limit", Int.self)
        if let limit, limit < 1 { throw .usage("--limit must be at least 1") }
        if let since, AuditTrail.parseTime(since, now: Int64(time(nil))) == nil {
            throw .usage("--since: not a time: \(shown(since)) (Unix seconds, 2026-11-24, 2026-11-24T09:30:00Z, 90m, 12h or 7d)")
        }
    }
}
