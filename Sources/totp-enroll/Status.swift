import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll status [--all] [--user NAME] [--json]`: what the store holds for a user, or
/// (root, `--all`) for every enrolled user — factors (label, algorithm/digits/period, created,
/// last used, learned clock drift), recovery codes left, consecutive failures and lockout.
/// Never a secret, in any output form. Everything goes through the store interface.
struct Status: Command {
    static let name = "status"
    static let abstract = "Show enrolment status: factors, drift, recovery codes, failures, lockout (never a secret)."
    static let discussion = "Root sees any user (--user) or every enrolled user (--all); anyone else sees their own."
    static let specs = TargetOptions.specs + [.flag("--all", "Every enrolled user in the store (root only)."), JSONOutputOption.spec]

    let target: TargetOptions
    let all: Bool
    let output: JSONOutputOption

    init(_ arguments: Arguments) throws(CommandError) {
        target = TargetOptions(arguments)
        all = arguments.flag("--all")
        output = JSONOutputOption(arguments)
        if all && target.user != nil { throw .usage("--all and --user exclude each other") }
    }

    func run() throws(CommandError) {
        if all && getuid() != 0 { throw CLIError("--all is for root only") }
        let now = Int64(time(nil))
        var reports: [UserReport] = []
        var failed = false
        if all {
            // --config and --store (root only, as --all is) name the store; no account is
            // needed to list.
            if let config = target.config { siteConfigFile = config }
            let (storePath, socket) = try CallerContext.where(store: target.store)
            let store = try CallerContext.openStore(at: storePath, socket: socket)
            let names = try storeCall { () throws(MFAError) in try store.users() }
            for name in names {
                let report = UserReport.read(store, user: name, now: now)
                if report.error != nil { failed = true }
                // A record with no factor and no recovery code is not an enrolment.
                if report.error == nil && report.status.map({ !$0.record.isEnrolled }) ?? true { continue }
                reports.append(report)
            }
        } else {
            let context = try target.context()
            let store = try context.openStore()
            let report = UserReport.read(store, user: context.user, now: now)
            if report.error != nil { failed = true }
            reports.append(report)
        }
        print(output.json ? Self.json(reports, now: now) : Self.text(reports, now: now, all: all), terminator: "")
        if failed { throw .exit(1) }
    }

    // MARK: - Text

    static func text(_ reports: [UserReport], now: Int64, all: Bool) -> String {
        if reports.isEmpty { return "No enrolled users.\n" }
        var out = ""
        for (i, r) in reports.enumerated() {
            if i > 0 { out += "\n" }
            let name = shown(r.user)
            if let error = r.error {
                out += "\(name): cannot be read: \(error)\n"
                continue
            }
            guard let status = r.status, status.record.isEnrolled else {
                out += "\(name): no factors.\n"
                continue
            }
            let record = status.record
            let uid = record.uid.map { "uid \($0)" } ?? "uid not bound yet"
            out += "\(name) (\(uid)): \(record.factors.count) factor\(record.factors.count == 1 ? "" : "s")\n"
            let serials = r.factors.contains { !$0.serial.isEmpty }  // a SERIAL column only where there is one
            let destinations = r.factors.contains { !$0.destination.isEmpty }  // a DESTINATION column likewise (masked)
            let counters = r.factors.contains { $0.view.counter != nil }  // a COUNTER column where a token's is shown (root)
            var rows = [["  LABEL"] + (serials ? ["SERIAL"] : []) + (destinations ? ["DESTINATION"] : [])
                        + ["ALGORITHM", "DIGITS", "PERIOD"] + (counters ? ["COUNTER"] : []) + ["CREATED", "LAST USED", "DRIFT"]]
            for f in r.factors {
                let v = f.view
                var row: [String] = ["  " + shown(f.label)]
                if serials { row.append(serialColumn(f.serial)) }
                if destinations { row.append(f.destination.isEmpty ? "-" : shown(f.destination)) }
                row += [v.algorithmColumn, v.digitsText, v.periodText]
                if counters { row.append(v.counterText) }
                row += [formatTime(f.created), v.lastUsedText, v.driftColumn]
                rows.append(row)
            }
            out += table(rows)
            if r.sendsLastDay > 0 {
                out += "  Codes sent: \(r.sendsLastHour) in the last hour, \(r.sendsLastDay) in the last day"
                    + (r.lastSend.map { " (last \(formatTime($0)))" } ?? "") + ".\n"
            }
            if let left = r.recoveryLeft, let total = r.recoveryTotal {
                out += "  Recovery codes: \(left) of \(total) left.\n"
            } else {
                out += "  Recovery codes: none.\n"
            }
            out += "  Consecutive failures: \(r.failures).\n"
            if r.lockedPermanently {
                out += "  Locked: at the \(UserState.hardFailureCap)-failure cap, until root runs totp-enroll unlock.\n"
            } else if let until = r.lockedUntil {
                out += "  Locked: until \(formatTime(until)) (\(until - now) s).\n"
            } else {
                out += "  Locked: no.\n"
            }
        }
        return out
    }

    /// "0", "+2 steps (+60 s)", "-1 step (-30 s)".
    static func driftText(_ drift: Int64, period: UInt64) -> String {
        if drift == 0 { return "0" }
        let sign = drift > 0 ? "+" : "-"
        let steps = drift.magnitude
        return "\(sign)\(steps) step\(steps == 1 ? "" : "s") (\(sign)\(steps &* period) s)"
    }

    // MARK: - JSON

    /// One JSON object, keys in a fixed order, strings escaped (JSON.string).
    static func json(_ reports: [UserReport], now: Int64) -> String {
        var users: [String] = []
        for r in reports {
            var fields: [(String, String)] = [("user", JSON.string(r.user))]
            if let error = r.error {
                fields.append(("error", JSON.string(Array(error.utf8))))
                users.append(JSON.object(fields))
                continue
            }
            let enrolled = r.status?.record.isEnrolled ?? false
            fields.append(("enrolled", enrolled ? "true" : "false"))
            fields.append(("uid", r.status?.record.uid.map { "\($0)" } ?? "null"))
            // Each kind's fields as FactorView decides them; null where they mean nothing or are unknown.
            let factors = r.factors.map { f in
                let v = f.view
                return JSON.object([
                    ("kind", JSON.string(Array("\(f.kind.name)".utf8))),
                    ("label", JSON.string(f.label)),
                    ("serial", f.serial.isEmpty ? "null" : JSON.string(f.serial)),
                    ("destination", f.destination.isEmpty ? "null" : JSON.string(f.destination)),
                    ("algorithm", v.algorithm.map { JSON.string(Array($0.utf8)) } ?? "null"),
                    ("digits", v.digits.map { "\($0)" } ?? "null"),
                    ("period", v.period.map { "\($0)" } ?? "null"),
                    ("created", "\(f.created)"),
                    ("last_used", v.lastUsed.map { "\($0)" } ?? "null"),
                    ("last_used_step", v.lastUsedStep.map { "\($0)" } ?? "null"),
                    ("used", v.used.map { $0 ? "true" : "false" } ?? "null"),
                    ("drift_steps", v.drift.map { "\($0)" } ?? "null"),
                    ("drift_seconds", v.drift.map { "\($0 &* Int64(clamping: v.period ?? 0))" } ?? "null"),
                    ("counter", v.counter.map { "\($0)" } ?? "null"),
                ])
            }
            fields.append(("factors", "[" + factors.joined(separator: ",") + "]"))
            fields.append(("recovery_codes_left", r.recoveryLeft.map { "\($0)" } ?? "null"))
            fields.append(("recovery_codes_total", r.recoveryTotal.map { "\($0)" } ?? "null"))
            fields.append(("failures", "\(r.failures)"))
            fields.append(("codes_sent_last_hour", "\(r.sendsLastHour)"))
            fields.append(("codes_sent_last_day", "\(r.sendsLastDay)"))
            fields.append(("last_code_sent", r.lastSend.map { "\($0)" } ?? "null"))
            fields.append(("locked", r.lockedPermanently || r.lockedUntil != nil ? "true" : "false"))
            fields.append(("locked_until", r.lockedUntil.map { "\($0)" } ?? "null"))
            fields.append(("locked_at_cap", r.lockedPermanently ? "true" : "false"))
            users.append(JSON.object(fields))
        }
        return JSON.object([("time", "\(now)"), ("users", "[" + users.joined(separator: ",") + "]")]) + "\n"
    }
}

/// What `status` reports of one user, read through the store interface.
struct UserReport {
    struct FactorReport {
        var kind: FactorKind
        var label: [UInt8]
        /// A hardware token's serial number (empty: none); not a secret.
        var serial: [UInt8]
        var created: Int64
        /// What the kind's fields say (period, digits, counter, last used, drift).
        var view: FactorView
        /// An out-of-band factor's destination, masked (`+1******1234`); empty for the others.
        var destination: [UInt8] = []
    }
    /// Codes pam-totpd sent for the account: in the last hour, the last day, and when the last was.
    var sendsLastHour = 0
    var sendsLastDay = 0
    var lastSend: Int64?

    var user: [UInt8]
    var status: UserStatus?
    var error: String?
    var factors: [FactorReport] = []
    var recoveryLeft: Int?
    var recoveryTotal: Int?
    var failures: UInt32 = 0
    var lockedUntil: Int64?
    var lockedPermanently = false

    static func read(_ store: EnrolStore, user: [UInt8], now: Int64) -> UserReport {
        var r = UserReport(user: user)
        do {
            r.status = try storeCall { () throws(MFAError) in try store.status(user: user) }
        } catch {
            r.error = "\(error)"
            return r
        }
        guard let status = r.status else { return r }
        let (record, state) = (status.record, status.state)
        for f in record.factors {
            r.factors.append(FactorReport(kind: f.kind, label: f.label, serial: f.serial,
                                          created: f.created, view: FactorView(f, state: state, fleet: store.isFleet, root: getuid() == 0),
                                          destination: f.maskedDestination))
        }
        if let set = record.recovery {
            let used = state.usedRecovery(set: set.id)
            r.recoveryTotal = set.hashes.count
            r.recoveryLeft = (0..<set.hashes.count).filter { $0 >= 32 || (used >> UInt32($0)) & 1 == 0 }.count
        }
        r.failures = state.failures
        r.sendsLastHour = state.sends(within: 3600, of: now)
        r.sendsLastDay = state.sends(within: 86_400, of: now)
        r.lastSend = state.sends.last
        if state.failures >= UserState.hardFailureCap {
            r.lockedPermanently = true
        } else if state.lockedUntil > now {
            r.lockedUntil = state.lockedUntil
        }
        return r
    }
}

/// A small JSON writer: deterministic (keys in the order given), every string escaped as RFC
/// 8259 requires, and invalid UTF-8 replaced (U+FFFD) so the document is always valid.
enum JSON {
    static func object(_ fields: [(String, String)]) -> String {
        "{" + fields.map { string(Array($0.0.utf8)) + ":" + $0.1 }.joined(separator: ",") + "}"
    }

    static func string(_ bytes: [UInt8]) -> String {
        var out = "\""
        for scalar in String(decoding: bytes, as: UTF8.self).unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                // Control characters (C0, DEL, C1) and the line/paragraph separators, which
                // some JavaScript parsers reject, as \u escapes.
                let v = scalar.value
                if v < 0x20 || (v >= 0x7F && v <= 0x9F) || v == 0x2028 || v == 0x2029 || isBidiControl(v) {
                    out += "\\u" + hex4(v)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// Bidi embeddings, overrides, isolates and marks: escaped, so a label printed from the
    /// JSON cannot reorder what a terminal shows (docs/ARCHITECTURE.md, section 4.11).
    static func isBidiControl(_ v: UInt32) -> Bool {
        v == 0x061C || v == 0x200E || v == 0x200F || (v >= 0x202A && v <= 0x202E) || (v >= 0x2066 && v <= 0x2069)
    }

    static func hex4(_ v: UInt32) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int((v >> 12) & 0xF)], digits[Int((v >> 8) & 0xF)], digits[Int((v >> 4) & 0xF)], digits[Int(v & 0xF)]])
    }
}
