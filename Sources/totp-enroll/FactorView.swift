import MFACrypto
import MFAFileStore
import MFAPolicy

/// What `list` and `status` (text and `--json`) say about one factor, decided here once per
/// kind: each field is set only where it means something for the kind and is known, nil
/// otherwise (shown as `-`, or `null` in JSON). docs/ARCHITECTURE.md, section 5.
///
/// | kind  | period | digits | counter                  | last used                                  | drift |
/// |-------|--------|--------|--------------------------|--------------------------------------------|-------|
/// | totp  | yes    | yes    | -                        | the last accepted step's time (the enrolment step counts) | yes |
/// | hotp  | -      | yes    | next counter, root only  | no time is kept: "used" or "never"         | -     |
/// | sms, email | - | - (the site's oob_digits) | -  | when the accepted code was sent            | -     |
///
/// In fleet mode the database tells a token's counter (as the counter it has consumed) to an
/// admin role only, and neither whether a login used it nor when; a sent code's use is not
/// reported. What it does not tell is `unknown` (JSON: `used: null`), never "never".
struct FactorView {
    /// TOTP, HOTP: the key's hash algorithm (`sha1`); nil for a sent code.
    var algorithm: String?
    /// The ALGORITHM column: SHA1, HOTP-SHA1 for a counter-based factor, SMS or EMAIL for a sent code.
    var algorithmColumn: String
    /// TOTP: seconds per step.
    var period: UInt64?
    /// TOTP and HOTP: the code's length. A sent code's is the site's `oob_digits`, not the factor's.
    var digits: Int?
    /// HOTP: the next counter the token's code must have (for a resync), to root only, when known.
    var counter: UInt64?
    /// When its last accepted code was: TOTP, the start of that step; a sent code, when it
    /// was sent. Never known for HOTP (the state keeps the counter, not the time).
    var lastUsed: Int64?
    /// TOTP: the last accepted step (or the step that proved it at enrolment).
    var lastUsedStep: UInt64?
    /// Whether a code of it was accepted; nil when the store does not say (fleet mode).
    var used: Bool?
    /// TOTP: the clock drift learned from its device, in steps.
    var drift: Int64?

    init(_ f: Factor, state: UserState, fleet: Bool, root: Bool) {
        algorithm = f.otpKey?.parameters.algorithm.name
        algorithmColumn = "\(f.kind.name)".uppercased()
        switch f.data {
        case .totp(let t):
            algorithmColumn = t.key.parameters.algorithm.name.uppercased()
            period = t.key.parameters.period
            digits = t.key.parameters.digits
            lastUsedStep = state.lastUsedStep(of: f)
            lastUsed = lastUsedStep.flatMap { s -> Int64? in
                let (t, overflow) = Int64(clamping: s).multipliedReportingOverflow(by: Int64(clamping: t.key.parameters.period))
                return overflow ? nil : t
            }
            used = lastUsedStep != nil
            drift = state.drift(forLabel: f.label)
        case .hotp(let h):
            algorithmColumn = "HOTP-" + h.key.parameters.algorithm.name.uppercased()
            digits = h.key.parameters.digits
            let last = state.lastStep(of: f)
            if fleet {
                // The database's last step is the counter consumed, at enrolment or at a login
                // (an admin role's only): the next one is past it; whether a login used it, unknown.
                if root, let last { counter = last == UInt64.max ? last : last + 1 }
                used = nil
            } else {
                // The file store records a counter in the state only when a login accepts it.
                if root { counter = state.nextCounter(of: f) }
                used = last != nil
            }
        case .sms, .email:
            // The "step" of a sent code is when it was sent.
            let last = state.lastStep(of: f)
            lastUsed = last.map { Int64(clamping: $0) }
            used = last != nil ? true : fleet ? nil : false
        }
    }

    /// The DIGITS, PERIOD, COUNTER and DRIFT columns: the value, or `-`.
    var digitsText: String { digits.map { "\($0)" } ?? "-" }
    var periodText: String { period.map { "\($0)s" } ?? "-" }
    var counterText: String { counter.map { "\($0)" } ?? "-" }
    var driftColumn: String { drift.map { Status.driftText($0, period: period ?? 0) } ?? "-" }

    /// The LAST USED column: a time, else `used`, `never` or `unknown`.
    var lastUsedText: String {
        if let lastUsed { return formatTime(lastUsed) }
        switch used {
        case true?: return "used"
        case false?: return "never"
        case nil: return "unknown"
        }
    }
}
