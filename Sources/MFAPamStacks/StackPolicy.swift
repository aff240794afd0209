import MFAPolicy
import MFASystem

/// What a stack's pam_totp lines do for one user in one `pam_authenticate`
/// (docs/ARCHITECTURE.md, section 4, rule 18, "one login, one verdict"; `totp-enroll policy`): a
/// line that does not ask decides nothing (an exempt user, or one without a factor under
/// `nullok`: PAM_IGNORE, and the next line decides by its own settings); the first line that asks
/// an enrolled user (or denies one) decides, and every later line returns its result unasked (a
/// later line stricter than it asks for its own code after a success; ARCHITECTURE rule 20).
public enum StackOutcome: Equatable, Sendable {
    /// The user is asked for a code (or offered enrolment at login).
    case ask
    /// No line asks: exempt, or no factor under nullok on every line, or no pam_totp line.
    case pass
    /// The deciding line denies: no factor without nullok (asked like anyone, then denied), no
    /// factor of a kind allowed here, a store that cannot be read, or settings that are invalid.
    case deny

    public var name: [UInt8] {
        switch self {
        case .ask: return literal("ask")
        case .pass: return literal("pass")
        case .deny: return literal("deny")
        }
    }
}

/// What the store says about the user, as the module would see it on one line.
public enum LineEnrolment: Equatable, Sendable {
    /// A record bound to the user's account with a factor or recovery codes.
    case enrolled(UserRecord)
    case unenrolled
    /// The store could not be read (the module asks, then denies: rule 1).
    case unreadable([UInt8])
}

/// One pam_totp line's part for the user.
public struct LineRole: Equatable, Sendable {
    /// The line asks (or ends the question without asking, for a denial): it decides.
    public var decides: Bool
    /// Its result when it decides (`pass` when it does not).
    public var outcome: StackOutcome
    /// One clause: why.
    public var reason: [UInt8]

    /// The part of a line whose settings are `options` for `user`, whose store says `enrolment`,
    /// at Unix time `now` (enrolment at first login ends at a time). `invalid`: the line's
    /// settings could not be loaded (the module denies with PAM_SERVICE_ERR, unasked).
    public static func of(options: ModuleOptions?, invalid: [UInt8]? = nil, enrolment: LineEnrolment, user: [UInt8],
                          now: Int64) -> LineRole {
        guard let options else {
            return LineRole(decides: true, outcome: .deny,
                            reason: literal("its settings are invalid (") + (invalid ?? []) + literal("): the module denies (PAM_SERVICE_ERR) without asking"))
        }
        if options.afterPassword {
            return LineRole(decides: false, outcome: .pass,
                            reason: literal("after_password: it asks nothing; it completes what the forward_pass line before it decided"))
        }
        if options.exempt {
            return LineRole(decides: false, outcome: .pass,
                            reason: user + literal(" is exempt (") + options.exemptBy + literal("): not asked (PAM_IGNORE)"))
        }
        switch enrolment {
        case .unreadable(let why):
            return LineRole(decides: true, outcome: .deny,
                            reason: literal("the store cannot be read (") + why + literal("): the module asks, then denies"))
        case .enrolled(let record):
            let hints = record.hints(kinds: options.offeredKinds)
            if !hints.typed && hints.sent.isEmpty && hints.disallowed > 0 {
                return LineRole(decides: true, outcome: .deny,
                                reason: literal("none of ") + user + literal("'s factors is of a kind offered here (factor_kinds ")
                                    + ModuleOptions.kindNames(options.offeredKinds) + literal("): denied without a prompt"))
            }
            return LineRole(decides: true, outcome: .ask,
                            reason: user + literal(" is enrolled: asked for a code")
                                + (options.codeAfterPassword ? literal(" (with the password, one question; the code is checked by the after_password line, after the password module: code_after_password)")
                                   : options.forwardPass ? literal(" (with the password, one question: forward_pass)") : []))
        case .unenrolled:
            if let until = options.enrollAtLoginUntil, now < until, !options.forwardPass, options.backend == .files {
                return LineRole(decides: true, outcome: .ask,
                                reason: user + literal(" has no factor: offered enrolment at login (enroll_at_login, until ")
                                    + ModuleOptions.utcText(until) + literal(")"))
            }
            if options.nullok && options.forwardPass {
                // Asked, but an ignore binds no later line: the next line decides by its own nullok.
                return LineRole(decides: false, outcome: .pass,
                                reason: literal("asked for the password and a code in one question (forward_pass); ") + user
                                    + literal(" has no factor and nullok applies: the whole answer goes on as the password (PAM_IGNORE)"))
            }
            if options.nullok {
                return LineRole(decides: false, outcome: .pass,
                                reason: user + literal(" has no factor and nullok applies: not asked (PAM_IGNORE)"))
            }
            return LineRole(decides: true, outcome: .deny,
                            reason: user + literal(" has no factor and nullok does not apply: asked like anyone, then denied"))
        }
    }
}

/// The stack's outcome for the user from its pam_totp lines' parts, in stack order.
public struct StackVerdict: Equatable, Sendable {
    public var outcome: StackOutcome
    /// The index of the deciding line in the roles given (nil: no line decides).
    public var deciding: Int?
    /// One line: the outcome's reason, naming the deciding line by `places[deciding]`.
    public var reason: [UInt8]

    public init(roles: [LineRole], places: [[UInt8]], user: [UInt8]) {
        for (i, role) in roles.enumerated() where role.decides {
            let place = i < places.count ? places[i] : literal("line ") + decimalBytes(UInt64(i + 1))
            outcome = role.outcome
            deciding = i
            var r = place + literal(" decides: ") + role.reason
            if i + 1 < roles.count {
                let later = roles.count - i - 1
                r += literal("; the ") + (later == 1 ? literal("later line asks") : decimalBytes(UInt64(later)) + literal(" later lines ask"))
                    + literal(" nothing and ") + (later == 1 ? literal("returns") : literal("return")) + literal(" its result")
            }
            reason = r
            return
        }
        outcome = .pass
        deciding = nil
        if roles.isEmpty {
            reason = literal("no pam_totp line in the stack: pam_totp does not run")
        } else {
            reason = literal("no pam_totp line asks ") + user + literal(" (")
                + (roles.count == 1 ? literal("the line: ") : literal("the last line: ")) + (roles.last?.reason ?? []) + literal(")")
        }
    }
}
