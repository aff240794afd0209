import MFACrypto
import MFASystem

/// RFC 4226 counter-based codes from a hardware token (a key fob, a YubiKey's OATH-HOTP slot):
/// the kind's payload and its policy (FactorKind.swift dispatches here; its record line is
/// MFAFileStore/HOTPLine.swift, its wire form MFAWire/DeviceWire.swift, its check
/// sql/api.sql's check_hotp).
public struct HOTPFactor: Equatable, Sendable {
    static let name: StaticString = "hotp"
    static let answering = Answering.typed

    /// The key's period is unused (a token counts presses, not time).
    public var key: OTPKey
    /// The first counter not used when the factor was saved (the code that proved it was the
    /// one before); the state's last step moves on from there.
    public var counter: UInt64

    public init(key: OTPKey, counter: UInt64) { (self.key, self.counter) = (key, counter) }

    func validate() throws(MFAError) {
        try key.validate()
        guard counter <= HOTPWindow.maxCounter else { throw .invalidParameters("the counter must be at most 2^48") }
    }

    /// A token enrolled again under a label that was used before (by another token, or by a
    /// TOTP factor whose entry holds a time step) never inherits that entry's counter, which
    /// would lock it out: the key also names the enrolment (creation time and first counter).
    func stateKey(label: UInt64, created: Int64) -> UInt64 {
        fnv1a64(word: UInt64(bitPattern: created), fnv1a64(word: counter, label))
    }

    /// The counter moves past the match with the verdict (the state's last step), so no code
    /// works twice; it never moves back below the record's counter. Resync (forward_pass has
    /// one question per login, so none): the reach is computed for every answer; a pair is
    /// possible only when the login had a far code before.
    func check(_ factor: Factor, answer: [UInt8], previous: [UInt8]?, window: HOTPWindow, state: UserState,
               forwardPass: Bool) -> FactorMatch {
        let hmac = HMACKey(algorithm: key.parameters.algorithm, key: key.secret)
        let code = forwardPass ? Array(answer.suffix(key.parameters.digits)) : answer
        let next = state.nextCounter(of: factor)
        let m = window.match(answer: code, key: hmac, digits: key.parameters.digits, next: next, lastUsed: state.lastStep(of: factor))
        guard !forwardPass else { return FactorMatch(step: m.step, replayed: m.replayed, driftBefore: 0, driftAfter: 0) }
        let r = window.resync(answer: code, previous: previous, key: hmac, digits: key.parameters.digits, next: next)
        return FactorMatch(step: m.step ?? r.pair, replayed: m.replayed, driftBefore: 0, driftAfter: 0, far: r.far)
    }
}

extension UserState {
    /// A counter-based factor's next unused counter: past its last accepted one, never below
    /// the record's (`HOTPFactor.counter`). UInt64.max stays there (and then only a replay
    /// matches). 0 for the other kinds.
    public func nextCounter(of factor: Factor) -> UInt64 {
        guard case .hotp(let h) = factor.data else { return 0 }
        guard let used = lastStep(of: factor) else { return h.counter }
        return used == UInt64.max ? used : max(used + 1, h.counter)
    }
}
