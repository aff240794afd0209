// The factor seam (docs/ARCHITECTURE.md, section 2.3): everything that differs between kinds
// of factor is dispatched here, once — how an answer is checked (`Factor.check`), the kind's
// line in a record (`appendRecordLine`, `parseRecordLine`) and its name in listings and on
// the wire. The login flow, the policy (failures, lockout, recovery codes, one verdict per
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

    /// The keyword that starts the kind's line in a record (`factor`: TOTP, the first kind).
    var recordKeyword: StaticString {
        switch self {
        case .totp: return "factor"
        }
    }

    /// The kind whose record line starts with `keyword`.
    init?(recordKeyword keyword: some Collection<UInt8>) {
        if equals(keyword, "factor") { self = .totp } else { return nil }
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

    /// The factor's line in a record (`UserRecord.serialized`), newline included.
    @_optimize(size)  // cold: not on a login's path
    func appendRecordLine(to out: inout [UInt8]) {
        out.append(contentsOf: bytes(kind.recordKeyword))
        out.append(ASCII.space)
        out += Percent.encode(label)
        switch kind {
        case .totp:
            // <label> <sha1|sha256|sha512> <digits> <period> <created> <enrolled step> <secret, Base32>
            out.append(ASCII.space)
            out += parameters.algorithm.nameBytes
            out.append(ASCII.space)
            out += decimalBytes(UInt64(parameters.digits))
            out.append(ASCII.space)
            out += decimalBytes(parameters.period)
            out.append(ASCII.space)
            out += decimalBytes(created)
            out.append(ASCII.space)
            out += decimalBytes(enrolledStep)
            out.append(ASCII.space)
            out += Base32.encode(secret)
        }
        out.append(ASCII.newline)
    }

    /// A factor from its record line, split into `count` fields by `f` (field 0 is the keyword
    /// that named `kind`). `version`: the record's format version (1 has no enrolled step).
    static func parseRecordLine(_ kind: FactorKind, _ line: ArraySlice<UInt8>, _ f: FieldSplitter, count: Int,
                                version: UInt64) throws(MFAError) -> Factor {
        switch kind {
        case .totp:
            let fields = version == 2 ? 8 : 7
            guard count == fields else { throw .corruptRecord("factor line has wrong field count") }
            guard let label = Percent.decode(f.field(1, of: line)) else { throw .corruptRecord("bad factor label") }
            guard let algorithm = HashAlgorithm(name: f.field(2, of: line)) else { throw .corruptRecord("bad algorithm") }
            guard let digits = parseDecimal(f.field(3, of: line), limit: 8),
                  let period = parseDecimal(f.field(4, of: line), limit: OTPParameters.periodRange.upperBound),
                  let created = parseDecimal(f.field(5, of: line), limit: UInt64(Int64.max)),
                  let enrolledStep = version == 2 ? parseDecimal(f.field(6, of: line), limit: UInt64.max) : 0 else {
                throw .corruptRecord("bad factor number")
            }
            let secret: [UInt8]
            do throws(MFAError) { secret = try Base32.decode(f.field(fields - 1, of: line)) } catch {
                throw .corruptRecord("bad factor secret")
            }
            do throws(MFAError) {
                return try Factor(label: label,
                                  parameters: try OTPParameters(algorithm: algorithm, digits: Int(digits), period: period),
                                  created: Int64(created), enrolledStep: enrolledStep, secret: secret)
            } catch {
                throw .corruptRecord("factor out of range")
            }
        }
    }
}
