import MFACrypto
import MFASystem

// The factor seam (docs/ARCHITECTURE.md, section 2.3): everything that differs between kinds
// of factor is dispatched once per job — how an answer is checked (`Factor.check`, here) and
// the kind's name in listings and on the wire (here); the kind's line in a record
// (`appendRecordLine`, `parseRecordLine`) is the file store's (MFAFileStore/RecordFile.swift). The login flow, the policy (failures, lockout, recovery codes, one verdict per
// pam_authenticate), the stores' locking and both daemons never look at the kind. In fleet
// mode the same dispatch is `pam_totp_api.judge` in sql/api.sql.

/// What kind of factor a record holds.
public enum FactorKind: UInt8, Equatable, Sendable {
    /// RFC 6238 time-based codes from an authenticator app.
    case totp = 1
    /// RFC 4226 counter-based codes from a hardware token (a key fob, a YubiKey's OATH-HOTP slot).
    case hotp = 2
    /// Codes pam-totpd sends in a text message to an E.164 number (out of band: the factor's
    /// data is its destination, not a secret; the code is made per login, `PendingCode`).
    case sms = 3
    /// Codes pam-totpd sends by email (out of band, like `sms`).
    case email = 4

    /// The kind's name in listings, JSON, `factor_kinds` and the fleet tables.
    public var name: StaticString {
        switch self {
        case .totp: return "totp"
        case .hotp: return "hotp"
        case .sms: return "sms"
        case .email: return "email"
        }
    }

    /// The kind named `name`.
    public init?(name: some Collection<UInt8>) {
        if equals(name, "totp") {
            self = .totp
        } else if equals(name, "hotp") {
            self = .hotp
        } else if equals(name, "sms") {
            self = .sms
        } else if equals(name, "email") {
            self = .email
        } else {
            return nil
        }
    }

    /// A kind whose codes pam-totpd sends (the factor holds a destination, not a secret).
    public var isOutOfBand: Bool { self == .sms || self == .email }

    /// This kind's bit in a set of kinds (`ModuleOptions.factorKinds`).
    public var bit: UInt8 { UInt8(1) << (rawValue &- 1) }

    /// Every kind's bit: the default of `factor_kinds`.
    public static let allBits: UInt8 = 0x0F
}

/// One factor's verdict on an answer (`Factor.check`).
public struct FactorMatch: Equatable, Sendable {
    /// The unused step (TOTP) or counter (HOTP) the answer matched, nil if none.
    public var step: UInt64?
    /// The answer matched a step that was already used.
    public var replayed: Bool
    /// The factor's learned clock drift before this answer, and after it if it matched.
    public var driftBefore: Int64
    public var driftAfter: Int64
    /// HOTP: the answer alone is the code of a counter past the window but within the resync
    /// reach (`HOTPWindow.resync`): never accepted alone, it may start a resync.
    public var far: Bool = false
}

extension Factor {
    /// Checks `answer` against this factor at `unixTime`, given what `state` says is used. The
    /// whole window is computed whatever the answer (no early exit). `forwardPass`: the answer
    /// is password + code, and the code is its last `digits` bytes (docs/ARCHITECTURE.md,
    /// section 5.3). `hotp`: the look-ahead of counter-based factors. `previous`: the answer
    /// before this one in the same login, which was `far` (a resync: `HOTPWindow.resync`).
    @inline(never)  // one copy, called once per factor by decide
    public func check(answer: [UInt8], previous: [UInt8]? = nil, at unixTime: Int64, verifier: TOTPVerifier, hotp: HOTPWindow,
                      state: UserState, forwardPass: Bool) throws(MFAError) -> FactorMatch {
        if kind.isOutOfBand {
            // The code pam-totpd sent for this factor, if one is outstanding: its salted hash,
            // compared in constant time; a match is "step" sentAt (what status shows as last use).
            let pending = state.pending.flatMap { $0.isFor(self) ? $0 : nil }
            var code = forwardPass ? Array(answer.suffix(Int(pending?.digits ?? 6))) : answer
            let ok = PendingCode.matches(pending, code: code, at: unixTime)
            if forwardPass { wipe(&code) }  // its own copy of the code typed (issue 36)
            return FactorMatch(step: ok ? pending.map { UInt64(clamping: $0.sentAt) } : nil, replayed: false, driftBefore: 0, driftAfter: 0)
        }
        let key = HMACKey(algorithm: parameters.algorithm, key: secret)
        let code = forwardPass ? Array(answer.suffix(parameters.digits)) : answer
        switch kind {
        case .sms, .email: return FactorMatch(step: nil, replayed: false, driftBefore: 0, driftAfter: 0)  // (above)
        case .totp:
            // The window is centred on the factor's learned drift (never wider: TOTPVerifier).
            let learned = verifier.bounded(state.drift(forLabel: label))
            let m = try verifier.match(answer: code, key: key, parameters: parameters, at: unixTime,
                                       usedUpTo: state.lastUsedStep(of: self), drift: learned)
            let after = m.step.map { verifier.drift(ofStep: $0, at: unixTime, period: parameters.period) } ?? learned
            return FactorMatch(step: m.step, replayed: m.replayed, driftBefore: learned, driftAfter: after)
        case .hotp:
            // The counter moves past the match with the verdict (the state's last step), so
            // no code works twice; it never moves back below the record's counter.
            let next = state.nextCounter(of: self)
            let m = hotp.match(answer: code, key: key, digits: parameters.digits, next: next, lastUsed: state.lastStep(of: self))
            // Resync (forward_pass has one question per login, so none): the reach is computed
            // for every answer; a pair is possible only when the login had a far code before.
            guard !forwardPass else { return FactorMatch(step: m.step, replayed: m.replayed, driftBefore: 0, driftAfter: 0) }
            let r = hotp.resync(answer: code, previous: previous, key: key, digits: parameters.digits, next: next)
            return FactorMatch(step: m.step ?? r.pair, replayed: m.replayed, driftBefore: 0, driftAfter: 0, far: r.far)
        }
    }
}

extension UserState {
    /// A counter-based factor's next unused counter: past its last accepted one, never below
    /// the record's (`Factor.counter`). UInt64.max stays there (and then only a replay matches).
    public func nextCounter(of factor: Factor) -> UInt64 {
        guard let used = lastStep(of: factor) else { return factor.counter }
        return used == UInt64.max ? used : max(used + 1, factor.counter)
    }
}
