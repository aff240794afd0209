import MFACrypto
import MFASystem

// Sent codes (issue "Text-message and email codes", docs/ARCHITECTURE.md, section 2.3): the
// policy of a send, pure, so every limit is tested with an injected clock and random source.
// Only pam-totpd sends; the store records the code (hashed) and the send under the record lock
// before the message leaves (`FileStore.sendCode`), so a killed daemon never leaves a code
// that works but was not counted, and a failed send is voided (`voidSentCode`).

/// What the prompt shows of one out-of-band factor: never its full destination.
public struct FactorHint: Equatable, Sendable {
    public var kind: FactorKind
    public var label: [UInt8]
    /// `+1******1234`, `a***@example.com`.
    public var masked: [UInt8]
    public init(kind: FactorKind, label: [UInt8], masked: [UInt8]) { (self.kind, self.label, self.masked) = (kind, label, masked) }
}

/// What a login may offer a user, by the kinds the policy allows here (`factor_kinds`).
public struct FactorHints: Equatable, Sendable {
    /// The user has an allowed factor whose code they type from a device (TOTP, HOTP) or recovery codes.
    public var typed: Bool
    /// The allowed factors whose codes are sent, in record order (at most 9 are offered).
    public var sent: [FactorHint]
    /// Factors of kinds not allowed here (`factor_kinds`): neither offered nor accepted.
    public var disallowed: Int
    /// The user has an allowed TOTP or HOTP factor (`typed` without recovery codes, which
    /// forward_pass does not take). Only a user without one may be sent a code by a one-prompt
    /// stack (pam_totp's `after_password`).
    public var device: Bool
    /// A code sent to one of the allowed sent factors is live (not expired, attempts left):
    /// a one-prompt stack then takes the answer's trailing digits as that code.
    public var pending: Bool
    /// How many digits a one-field answer's code has (`code_after_password`: the rest is the
    /// password, handed on before the code is checked): the first allowed TOTP or HOTP
    /// factor's; without one, the live sent code's; 6 otherwise.
    public var codeDigits: Int = 6
    public static let maxOffered = 9

    /// Counts in one factor of `kind` where `allowed` kinds are: a typed one makes `typed` and
    /// `device` true; a sent one is offered (`hint`, made only then) while fewer than
    /// `maxOffered` are; a disallowed one is only counted. Every store's hints are built so.
    @_optimize(size)  // cold: a login with a phone or address only
    public mutating func add(_ kind: FactorKind, allowed: UInt8, digits: Int, hint: () -> FactorHint) {
        guard allowed & kind.bit != 0 else { disallowed += 1; return }
        switch kind.answering {
        case .sent:
            if sent.count < Self.maxOffered { sent.append(hint()) }
        case .typed:
            if !device, OTPParameters.digitsRange.contains(digits) { codeDigits = digits }
            typed = true
            device = true
        }
    }

    /// A live sent code's length, for a user without an allowed TOTP or HOTP factor.
    public mutating func addPending(digits: Int) {
        pending = true
        if !device, OTPParameters.digitsRange.contains(digits) { codeDigits = digits }
    }
    public init(typed: Bool = true, sent: [FactorHint] = [], disallowed: Int = 0, device: Bool = true, pending: Bool = false) {
        (self.typed, self.sent, self.disallowed, self.device, self.pending) = (typed, sent, disallowed, device, pending)
    }
}

extension UserRecord {
    /// The hints for a login where `kinds` (`ModuleOptions.factorKinds`) are allowed.
    @_optimize(size)  // cold: a login with a phone or address only
    public func hints(kinds: UInt8) -> FactorHints {
        var h = FactorHints(typed: !(recovery?.hashes.isEmpty ?? true), device: false)
        for f in factors {
            h.add(f.kind, allowed: kinds, digits: f.otpKey?.parameters.digits ?? 6) { FactorHint(kind: f.kind, label: f.label, masked: f.maskedDestination) }
        }
        return h
    }

    /// Whether `state` holds a live code sent to one of this record's factors of `kinds`
    /// (`FactorHints.pending`).
    @_optimize(size)  // cold: a user whose only factors are sent codes
    public func hasLiveCode(_ state: UserState, kinds: UInt8, at now: Int64) -> Bool {
        guard let p = state.pending, p.isLive(at: now) else { return false }
        return factors.contains { kinds & $0.kind.bit != 0 && p.isFor($0) }
    }
}

extension PendingCode {
    /// A sent kind's check (`Factor.check`): the code pam-totpd sent for `factor`, if one is
    /// outstanding, compared by its salted hash in constant time; a match is "step" sentAt
    /// (what status shows as last use). Never a replay or a drift.
    static func check(_ factor: Factor, answer: [UInt8], at unixTime: Int64, state: UserState, forwardPass: Bool) -> FactorMatch {
        let pending = state.pending.flatMap { $0.isFor(factor) ? $0 : nil }
        var code = forwardPass ? Array(answer.suffix(Int(pending?.digits ?? 6))) : answer
        let ok = matches(pending, code: code, at: unixTime)
        if forwardPass { wipe(&code) }  // its own copy of the code typed (issue 36)
        return FactorMatch(step: ok ? pending.map { UInt64(clamping: $0.sentAt) } : nil, replayed: false, driftBefore: 0, driftAfter: 0)
    }
}

/// What to do about a request to send a code.
public enum SendPlan: Equatable, Sendable {
    /// Send `code` to `factor`; `state` holds the pending code (hashed) and the send, and is
    /// recorded before the message leaves.
    case send(code: [UInt8], factor: Factor, state: UserState, expiresAt: Int64)
    /// The code sent at `sentAt` to `factor` is still valid and `oob_resend_interval` has not
    /// passed: the user is asked for that one again, and nothing is sent.
    case pending(factor: Factor, sentAt: Int64, expiresAt: Int64)
    /// Nothing is sent: why, for the user and the log.
    case refused(Message)
    /// The store sends it itself, and the caller never sees the code (fleet mode: the
    /// database queues the message for `pam-totpd deliver`). `fresh`: queued now; otherwise
    /// the code sent at `sentAt` is still valid and nothing new was queued (as `.pending`).
    case queued(FactorHint, fresh: Bool, sentAt: Int64, expiresAt: Int64)
}

/// What the code typed back at an enrolment did (`TOTPStore.confirmEnrolment`).
public enum EnrolmentCheck: Equatable, Sendable {
    case enrolled
    /// Not the code; `attemptsLeft` more may be tried (0: the code is void).
    case wrong(attemptsLeft: Int)
    /// No such code is pending any more (expired, used up, or replaced by another send).
    case expired

    /// As one number, for pam-totpd's admin reply: -1 enrolled, -2 expired, else the attempts left.
    public var number: Int64 {
        switch self {
        case .enrolled: return -1
        case .expired: return -2
        case .wrong(let left): return Int64(max(left, 0))
        }
    }

    public init?(number: Int64) {
        switch number {
        case -1: self = .enrolled
        case -2: self = .expired
        case 0...255: self = .wrong(attemptsLeft: Int(number))
        default: return nil
        }
    }
}

public enum OutOfBand {
    /// The plan for sending a code to the factor labelled `label` of `record` at `now`, with
    /// the per-account limits of `options` (per daemon: pam-totpd's `oob_max_per_minute`).
    public static func plan<G: RandomNumberGenerator>(record: UserRecord, state: UserState, label: [UInt8], at now: Int64,
                                                      options: ModuleOptions, using generator: inout G) -> SendPlan {
        guard let factor = record.factor(labelled: label), factor.kind.answering == .sent else {
            return .refused("no text-message or email factor of that name")
        }
        guard options.factorKinds & factor.kind.bit != 0 else {
            return .refused(Message(Array(bytes(factor.kind.name))) + " codes are not allowed here (factor_kinds)")
        }
        if state.failures >= UserState.hardFailureCap || now < state.lockedUntil {
            return .refused("locked out: no code is sent")
        }
        var next = state.current(for: record)
        if let p = next.pending, p.isFor(factor), p.isLive(at: now),
           secondsSince(p.sentAt, at: now) < options.oobResendInterval {
            return .pending(factor: factor, sentAt: p.sentAt, expiresAt: p.expiresAt)
        }
        if let why = overLimit(next, at: now, options: options) ?? prefixRefusal(factor, options: options) { return .refused(why) }
        let (code, pending) = PendingCode.make(for: factor, digits: options.oobDigits, lifetime: options.oobLifetime,
                                               maxAttempts: options.oobMaxAttempts, at: now, using: &generator)
        next.pending = pending
        next.recordSend(at: now)
        return .send(code: code, factor: factor, state: next, expiresAt: pending.expiresAt)
    }

    /// Why the account may not be sent another code now (`oob_resend_interval`,
    /// `oob_max_per_hour`, `oob_max_per_day`, counted in `state.sends`); nil: it may.
    static func overLimit(_ state: UserState, at now: Int64, options: ModuleOptions) -> Message? {
        if let last = state.sends.last, secondsSince(last, at: now) < options.oobResendInterval {
            let ago = secondsSince(last, at: now)
            return "a code was sent " + Message(decimalBytes(UInt64(ago))) + " s ago: wait "
                + Message(decimalBytes(UInt64(options.oobResendInterval - ago))) + " s before asking for another"
        }
        if state.sends(within: 3600, of: now) >= options.oobMaxPerHour {
            return "at most " + Message(decimalBytes(UInt64(options.oobMaxPerHour)))
                + " codes are sent an hour: use your app or a recovery code, or try later"
        }
        if state.sends(within: 86_400, of: now) >= options.oobMaxPerDay {
            return "at most " + Message(decimalBytes(UInt64(options.oobMaxPerDay)))
                + " codes are sent a day: use your app or a recovery code, or try tomorrow"
        }
        return nil
    }

    /// Whether a text message may go to `factor`'s number (`oob_allowed_prefixes`: SMS pumping
    /// sends to premium numbers abroad); nil: it may. Email is not limited by country.
    static func prefixRefusal(_ factor: Factor, options: ModuleOptions) -> Message? {
        guard factor.channel?.countryLimited == true, let destination = factor.destination,
              !options.oobAllowedPrefixes.isEmpty else { return nil }
        for p in options.oobAllowedPrefixes where destination.starts(with: p) { return nil }
        return "text messages are not sent to that country from here (oob_allowed_prefixes): use your app or a recovery code"
    }

    /// What sends to `factor`'s destination are counted under, whoever asks: a SHA-256 of the
    /// kind and the destination (an address in lower case: one mailbox however it is written).
    /// The fleet's database counts the same way (sql/api.sql, destination_key).
    public static func destinationKey(_ factor: Factor) -> [UInt8] {
        var text = Array(bytes(factor.kind.name))
        text.append(0x3A)
        let caseless = factor.channel?.caseless ?? false
        for c in factor.destination ?? [] { text.append(caseless && c >= 0x41 && c <= 0x5A ? c | 0x20 : c) }
        return SHA256.hash(text)
    }

    /// Why no code may go to a destination that was sent `hour` codes in the last hour and
    /// `day` in the last day, whatever the accounts (`oob_destination_max_per_hour`, `_per_day`:
    /// made-up or many accounts bring no new allowance); nil: it may.
    public static func destinationRefusal(_ factor: Factor, hour: Int, day: Int, options: ModuleOptions) -> Message? {
        let one = Message(Array(bytes(factor.channel?.shortNoun ?? "destination")))
        if hour >= options.oobDestinationMaxPerHour {
            return "at most " + Message(decimalBytes(UInt64(options.oobDestinationMaxPerHour))) + " codes are sent to one " + one
                + " an hour: use your app or a recovery code, or try later"
        }
        if day >= options.oobDestinationMaxPerDay {
            return "at most " + Message(decimalBytes(UInt64(options.oobDestinationMaxPerDay))) + " codes are sent to one " + one
                + " a day: use your app or a recovery code, or try tomorrow"
        }
        return nil
    }

    /// A pending code for a factor being enrolled is bound to this, never a saved factor's
    /// binding: a login cannot use it, and the first state write after the enrolment drops it.
    public static func enrolmentBinding(for factor: Factor) -> [UInt8] { PendingCode.binding(for: factor, enrolment: true) }

    /// The plan for the code that proves a new out-of-band factor at enrolment (totp-enroll
    /// add-phone, add-email): the account's limits as for a login's send, the code kept under
    /// `enrolmentBinding`. Never `.pending`: each enrolment proves its destination with a new code.
    public static func planEnrolment<G: RandomNumberGenerator>(record: UserRecord, state: UserState, factor: Factor, at now: Int64,
                                                               options: ModuleOptions, using generator: inout G) -> SendPlan {
        guard factor.kind.answering == .sent else { return .refused("not a text-message or email factor") }
        var next = state.current(for: record)
        if let why = overLimit(next, at: now, options: options) ?? prefixRefusal(factor, options: options) { return .refused(why) }
        var (code, pending) = PendingCode.make(for: factor, digits: options.oobDigits, lifetime: options.oobLifetime,
                                               maxAttempts: options.oobMaxAttempts, at: now, using: &generator)
        pending.binding = enrolmentBinding(for: factor)
        next.pending = pending
        next.recordSend(at: now)
        return .send(code: code, factor: factor, state: next, expiresAt: pending.expiresAt)
    }
}
