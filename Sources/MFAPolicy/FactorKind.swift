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

    /// The kind's name in listings, JSON and the fleet tables.
    public var name: StaticString {
        switch self {
        case .totp: return "totp"
        }
    }

    /// The kind named `name`.
    public init?(name: some Collection<UInt8>) {
        if equals(name, "totp") { self = .totp } else { return nil }
    }
}

/// One factor's verdict on an answer (`Factor.check`).
public struct FactorMatch: Equatable, Sendable {
    /// The unused step (TOTP) the answer matched, nil if none.
    public var step: UInt64?
    /// The answer matched a step that was already used.
    public var replayed: Bool
    /// The factor's learned clock drift before this answer, and after it if it matched.
    public var driftBefore: Int64
    public var driftAfter: Int64
}

extension Factor {
    /// Checks `answer` against this factor at `unixTime`, given what `state` says is used. The
    /// whole window is computed whatever the answer (no early exit). `forwardPass`: the answer
    /// is password + code, and the code is its last `digits` bytes (docs/ARCHITECTURE.md,
    /// section 5.3).
    public func check(answer: [UInt8], at unixTime: Int64, verifier: TOTPVerifier, state: UserState,
                      forwardPass: Bool) throws(MFAError) -> FactorMatch {
        switch kind {
        case .totp:
            let key = HMACKey(algorithm: parameters.algorithm, key: secret)
            let code = forwardPass ? Array(answer.suffix(parameters.digits)) : answer
            // The window is centred on the factor's learned drift (never wider: TOTPVerifier).
            let learned = verifier.bounded(state.drift(forLabel: label))
            let m = try verifier.match(answer: code, key: key, parameters: parameters, at: unixTime,
                                       usedUpTo: state.lastUsedStep(of: self), drift: learned)
            let after = m.step.map { verifier.drift(ofStep: $0, at: unixTime, period: parameters.period) } ?? learned
            return FactorMatch(step: m.step, replayed: m.replayed, driftBefore: learned, driftAfter: after)
        }
    }
}
