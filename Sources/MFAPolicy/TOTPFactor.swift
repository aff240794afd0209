import MFACrypto
import MFASystem

/// RFC 6238 time-based codes from an authenticator app: the kind's payload and its policy
/// (FactorKind.swift dispatches here; its record line is MFAFileStore/TOTPLine.swift,
/// its wire form MFAWire/DeviceWire.swift, its check sql/api.sql's check_totp).
public struct TOTPFactor: Equatable, Sendable {
    static let name: StaticString = "totp"
    static let answering = Answering.typed

    public var key: OTPKey
    /// The time step of the code that proved the factor at enrolment (0 if unknown): it and
    /// every earlier step count as used. Kept in the record, so that an enrolment is one commit
    /// (the record) and never a record plus a state update (docs/ARCHITECTURE.md, section 4.13).
    public var enrolledStep: UInt64

    public init(key: OTPKey, enrolledStep: UInt64 = 0) { (self.key, self.enrolledStep) = (key, enrolledStep) }

    func validate() throws(MFAError) { try key.validate() }

    /// The window is centred on the factor's learned drift (never wider: TOTPVerifier); the
    /// factor's state key is its label's.
    func check(_ factor: Factor, answer: [UInt8], at unixTime: Int64, verifier: TOTPVerifier, state: UserState,
               forwardPass: Bool) throws(MFAError) -> FactorMatch {
        let hmac = HMACKey(algorithm: key.parameters.algorithm, key: key.secret)
        let code = forwardPass ? Array(answer.suffix(key.parameters.digits)) : answer
        let learned = verifier.bounded(state.drift(forLabel: factor.label))
        let m = try verifier.match(answer: code, key: hmac, parameters: key.parameters, at: unixTime,
                                   usedUpTo: state.lastUsedStep(of: factor), drift: learned)
        let after = m.step.map { verifier.drift(ofStep: $0, at: unixTime, period: key.parameters.period) } ?? learned
        return FactorMatch(step: m.step, replayed: m.replayed, driftBefore: learned, driftAfter: after)
    }
}
