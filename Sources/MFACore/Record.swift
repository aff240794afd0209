/// One enrolled TOTP factor.
public struct Factor: Equatable, Sendable {
    public static let maxLabelLength = 64

    public var label: [UInt8]
    public var parameters: OTPParameters
    /// Unix time of enrolment.
    public var created: Int64
    /// The time step of the code that proved the factor at enrolment (0 if unknown): it and
    /// every earlier step count as used. Kept in the record, so that an enrolment is one commit
    /// (the record) and never a record plus a state update (DESIGN §4.13).
    public var enrolledStep: UInt64
    public var secret: [UInt8]

    public init(label: [UInt8], parameters: OTPParameters, created: Int64, enrolledStep: UInt64 = 0,
                secret: [UInt8]) throws(MFAError) {
        try Factor.validate(label: label)
        guard secret.count >= 10 && secret.count <= 128 else {
            throw .invalidParameters("secret must be 10 to 128 bytes")
        }
        self.label = label
        self.parameters = parameters
        self.created = created
        self.enrolledStep = enrolledStep
        self.secret = secret
    }

    /// What a stored label may be: 1–64 bytes without ASCII control characters. Labels read
    /// back are escaped on output anyway; new labels must also pass `validateNew`.
    public static func validate(label: [UInt8]) throws(MFAError) {
        guard !label.isEmpty, label.count <= maxLabelLength else { throw .invalidLabel }
        for c in label where c < 0x20 || c == 0x7F { throw .invalidLabel }
    }

    /// What a new label may be: a stored label that is also printable text (valid UTF-8, no
    /// C0/C1 controls, no bidi or other invisible format characters; `isPrintableText`).
    public static func validateNew(label: [UInt8]) throws(MFAError) {
        try validate(label: label)
        guard isPrintableText(label) else { throw .invalidLabel }
    }
}

/// A user's enrolment data, as stored in `<store>/<user>`.
///
/// Format version 2, line-oriented ASCII, one space between fields, every line ends in '\n':
/// ```
/// pam_totp 2
/// account <uid, or - if not bound yet> <record id, 16 hex>
/// factor <label, percent-encoded> <sha1|sha256|sha512> <digits> <period> <created> <enrolled step> <secret, Base32>
/// recovery <set id, 16 hex> <PBKDF2 iterations> <salt, hex>
/// recovery-code <PBKDF2-HMAC-SHA-256 of the code, 64 hex>        (one line per code)
/// ```
/// `account` binds the record to the account it was enrolled for (a reused name with another
/// uid is not enrolled) and names this record's lifetime (the state file remembers it, so a
/// state left over from a purged record is never applied to a new one). Version 1 (no account
/// line, factor lines without the enrolled step) is still read; every write is version 2.
/// A reader rejects any other version, any unknown line, any malformed field and any file
/// larger than `maxSize`, so a record is either understood completely or refused.
public struct UserRecord: Equatable, Sendable {
    public static let formatVersion: UInt64 = 2
    public static let maxSize = 64 * 1024
    public static let maxFactors = 32

    /// The uid the record was enrolled for; nil in a version-1 record (bound at its next write).
    public var uid: UInt32?
    /// Random, made when the record is created, kept across changes; 0 in a version-1 record.
    public var id: UInt64
    public var factors: [Factor]
    public var recovery: RecoverySet?

    public init(uid: UInt32? = nil, id: UInt64 = 0, factors: [Factor] = [], recovery: RecoverySet? = nil) {
        self.uid = uid
        self.id = id
        self.factors = factors
        self.recovery = recovery
    }

    /// True when the record lets the user authenticate at all.
    public var isEnrolled: Bool { !factors.isEmpty || !(recovery?.hashes.isEmpty ?? true) }

    /// True when the record may be used for the account with `uid` (nil: no such account).
    /// A version-1 record has no uid and belongs to whoever holds the name.
    public func belongs(toAccount accountUID: UInt32?) -> Bool {
        guard let uid else { return true }
        return uid == accountUID
    }

    public func factor(labelled label: [UInt8]) -> Factor? {
        for f in factors where f.label == label { return f }
        return nil
    }

    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.append(literal: "pam_totp ")
        out += decimalBytes(Self.formatVersion)
        out.append(ASCII.newline)
        out.append(literal: "account ")
        if let uid { out += decimalBytes(UInt64(uid)) } else { out.append(0x2D) }  // '-': not bound yet
        out.append(ASCII.space)
        out += hex64(id)
        out.append(ASCII.newline)
        for f in factors {
            out.append(literal: "factor ")
            out += Percent.encode(f.label)
            out.append(ASCII.space)
            out += f.parameters.algorithm.nameBytes
            out.append(ASCII.space)
            out += decimalBytes(UInt64(f.parameters.digits))
            out.append(ASCII.space)
            out += decimalBytes(f.parameters.period)
            out.append(ASCII.space)
            out += decimalBytes(f.created)
            out.append(ASCII.space)
            out += decimalBytes(f.enrolledStep)
            out.append(ASCII.space)
            out += Base32.encode(f.secret)
            out.append(ASCII.newline)
        }
        if let r = recovery {
            out.append(literal: "recovery ")
            out += hex64(r.id)
            out.append(ASCII.space)
            out += decimalBytes(UInt64(r.iterations))
            out.append(ASCII.space)
            out += Hex.encode(r.salt)
            out.append(ASCII.newline)
            for h in r.hashes {
                out.append(literal: "recovery-code ")
                out += Hex.encode(h)
                out.append(ASCII.newline)
            }
        }
        return out
    }

    public static func parse(_ bytes: [UInt8]) throws(MFAError) -> UserRecord {
        guard bytes.count <= maxSize else { throw .corruptRecord("record too large") }
        guard bytes.last == ASCII.newline else { throw .corruptRecord("record truncated") }
        let lines = bytes.split(separator: ASCII.newline, omittingEmptySubsequences: false).dropLast()
        guard let header = lines.first else { throw .corruptRecord("empty record") }
        let headerFields = splitFields(header)
        guard headerFields.count == 2, equals(headerFields[0], "pam_totp") else {
            throw .corruptRecord("not a pam_totp record")
        }
        guard let version = parseDecimal(headerFields[1], limit: 1_000_000), version == 1 || version == 2 else {
            throw .corruptRecord("unsupported record version")
        }
        var record = UserRecord()
        var body = lines.dropFirst()
        if version == 2 {
            guard let line = body.first else { throw .corruptRecord("no account line") }
            let fields = splitFields(line)
            guard fields.count == 3, equals(fields[0], "account"),
                  fields[2].count == 16, let id = Hex.decode(fields[2]) else {
                throw .corruptRecord("bad account line")
            }
            if !equals(fields[1], "-") {
                guard let uid = parseDecimal(fields[1], limit: UInt64(UInt32.max)) else { throw .corruptRecord("bad account line") }
                record.uid = UInt32(truncatingIfNeeded: uid)
            }
            record.id = uint64(id)
            body = body.dropFirst()
        }
        let factorFields = version == 2 ? 8 : 7
        for line in body {
            let fields = splitFields(line)
            guard let keyword = fields.first else { throw .corruptRecord("empty line") }
            if equals(keyword, "recovery") {
                guard record.recovery == nil, fields.count == 4, fields[1].count == 16,
                      let id = Hex.decode(fields[1]).map(uint64),
                      let iterations = parseDecimal(fields[2], limit: RecoverySet.iterationRange.upperBound),
                      RecoverySet.iterationRange.contains(iterations),
                      let salt = Hex.decode(fields[3]), salt.count >= 8, salt.count <= 64 else {
                    throw .corruptRecord("bad recovery line")
                }
                record.recovery = RecoverySet(id: id, iterations: Int(iterations), salt: salt, hashes: [])
                continue
            }
            if equals(keyword, "recovery-code") {
                guard fields.count == 2, let h = Hex.decode(fields[1]), h.count == 32,
                      var r = record.recovery, r.hashes.count < RecoverySet.maxCodes else {
                    throw .corruptRecord("bad recovery-code line")
                }
                r.hashes.append(h)
                record.recovery = r
                continue
            }
            guard equals(keyword, "factor") else { throw .corruptRecord("unknown line") }
            guard fields.count == factorFields else { throw .corruptRecord("factor line has wrong field count") }
            guard record.factors.count < maxFactors else { throw .corruptRecord("too many factors") }
            guard let label = Percent.decode(fields[1]) else { throw .corruptRecord("bad factor label") }
            guard let algorithm = HashAlgorithm(name: fields[2]) else { throw .corruptRecord("bad algorithm") }
            guard let digits = parseDecimal(fields[3], limit: 8),
                  let period = parseDecimal(fields[4], limit: OTPParameters.periodRange.upperBound),
                  let created = parseDecimal(fields[5], limit: UInt64(Int64.max)) else {
                throw .corruptRecord("bad factor number")
            }
            var enrolledStep: UInt64 = 0
            if version == 2 {
                guard let s = parseDecimal(fields[6], limit: UInt64.max) else { throw .corruptRecord("bad factor number") }
                enrolledStep = s
            }
            let secret: [UInt8]
            do throws(MFAError) { secret = try Base32.decode(fields[factorFields - 1]) } catch {
                throw .corruptRecord("bad factor secret")
            }
            let factor: Factor
            do throws(MFAError) {
                factor = try Factor(label: label,
                                    parameters: try OTPParameters(algorithm: algorithm, digits: Int(digits), period: period),
                                    created: Int64(created), enrolledStep: enrolledStep, secret: secret)
            } catch {
                throw .corruptRecord("factor out of range")
            }
            guard record.factor(labelled: factor.label) == nil else {
                throw .corruptRecord("duplicate factor label")
            }
            record.factors.append(factor)
        }
        return record
    }
}

/// 16 lower-case hex digits, big-endian.
func hex64(_ v: UInt64) -> [UInt8] {
    var bytes: [UInt8] = []
    for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(56 - 8 * i))) }
    return Hex.encode(bytes)
}

/// The big-endian value of up to 8 bytes.
func uint64(_ bytes: [UInt8]) -> UInt64 {
    var v: UInt64 = 0
    for b in bytes.prefix(8) { v = v << 8 | UInt64(b) }
    return v
}
