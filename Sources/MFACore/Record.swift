/// One enrolled TOTP factor.
public struct Factor: Equatable, Sendable {
    public static let maxLabelLength = 64

    public var label: [UInt8]
    public var parameters: OTPParameters
    /// Unix time of enrolment.
    public var created: Int64
    public var secret: [UInt8]

    public init(label: [UInt8], parameters: OTPParameters, created: Int64, secret: [UInt8]) throws(MFAError) {
        try Factor.validate(label: label)
        guard secret.count >= 10 && secret.count <= 128 else {
            throw .invalidParameters("secret must be 10 to 128 bytes")
        }
        self.label = label
        self.parameters = parameters
        self.created = created
        self.secret = secret
    }

    /// Labels are 1–64 bytes of text without control characters.
    public static func validate(label: [UInt8]) throws(MFAError) {
        guard !label.isEmpty, label.count <= maxLabelLength else { throw .invalidLabel }
        for c in label where c < 0x20 || c == 0x7F { throw .invalidLabel }
    }
}

/// A user's enrolment data, as stored in `<store>/<user>`.
///
/// Format version 1, line-oriented ASCII, one space between fields, every line ends in '\n':
/// ```
/// pam_totp 1
/// factor <label, percent-encoded> <sha1|sha256|sha512> <digits> <period> <created> <secret, Base32>
/// recovery <set id, 16 hex> <PBKDF2 iterations> <salt, hex>
/// recovery-code <PBKDF2-HMAC-SHA-256 of the code, 64 hex>        (one line per code)
/// ```
/// The first line names the format and version; a reader rejects any other version, any
/// unknown line, any malformed field and any file larger than `maxSize`, so a record is either
/// understood completely or refused.
public struct UserRecord: Equatable, Sendable {
    public static let formatVersion: UInt64 = 1
    public static let maxSize = 64 * 1024
    public static let maxFactors = 32
    static let magic = Array("pam_totp".utf8)

    public var factors: [Factor]
    public var recovery: RecoverySet?

    public init(factors: [Factor] = [], recovery: RecoverySet? = nil) {
        self.factors = factors
        self.recovery = recovery
    }

    /// True when the record lets the user authenticate at all.
    public var isEnrolled: Bool { !factors.isEmpty || !(recovery?.hashes.isEmpty ?? true) }

    public func serialized() -> [UInt8] {
        var out = Self.magic + [ASCII.space] + decimalBytes(Self.formatVersion) + [ASCII.newline]
        for f in factors {
            out += Array("factor ".utf8)
            out += Percent.encode(f.label)
            out.append(ASCII.space)
            out += Array(f.parameters.algorithm.name.utf8)
            out.append(ASCII.space)
            out += decimalBytes(UInt64(f.parameters.digits))
            out.append(ASCII.space)
            out += decimalBytes(f.parameters.period)
            out.append(ASCII.space)
            out += decimalBytes(f.created)
            out.append(ASCII.space)
            out += Base32.encode(f.secret)
            out.append(ASCII.newline)
        }
        if let r = recovery {
            out += Array("recovery ".utf8) + hex64(r.id) + [ASCII.space] + decimalBytes(UInt64(r.iterations))
                + [ASCII.space] + Hex.encode(r.salt) + [ASCII.newline]
            for h in r.hashes { out += Array("recovery-code ".utf8) + Hex.encode(h) + [ASCII.newline] }
        }
        return out
    }

    public static func parse(_ bytes: [UInt8]) throws(MFAError) -> UserRecord {
        guard bytes.count <= maxSize else { throw .corruptRecord("record too large") }
        guard bytes.last == ASCII.newline else { throw .corruptRecord("record truncated") }
        let lines = bytes.split(separator: ASCII.newline, omittingEmptySubsequences: false).dropLast()
        guard let header = lines.first else { throw .corruptRecord("empty record") }
        let headerFields = splitFields(header)
        guard headerFields.count == 2, Array(headerFields[0]) == magic else {
            throw .corruptRecord("not a pam_totp record")
        }
        guard parseDecimal(headerFields[1], limit: 1_000_000) == formatVersion else {
            throw .corruptRecord("unsupported record version")
        }
        var record = UserRecord()
        for line in lines.dropFirst() {
            let fields = splitFields(line)
            guard let keyword = fields.first else { throw .corruptRecord("empty line") }
            if Array(keyword) == Array("recovery".utf8) {
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
            if Array(keyword) == Array("recovery-code".utf8) {
                guard fields.count == 2, let h = Hex.decode(fields[1]), h.count == 32,
                      var r = record.recovery, r.hashes.count < RecoverySet.maxCodes else {
                    throw .corruptRecord("bad recovery-code line")
                }
                r.hashes.append(h)
                record.recovery = r
                continue
            }
            guard Array(keyword) == Array("factor".utf8) else { throw .corruptRecord("unknown line") }
            guard fields.count == 7 else { throw .corruptRecord("factor line has wrong field count") }
            guard record.factors.count < maxFactors else { throw .corruptRecord("too many factors") }
            guard let label = Percent.decode(fields[1]) else { throw .corruptRecord("bad factor label") }
            guard let algorithm = HashAlgorithm(name: fields[2]) else { throw .corruptRecord("bad algorithm") }
            guard let digits = parseDecimal(fields[3], limit: 8),
                  let period = parseDecimal(fields[4], limit: OTPParameters.periodRange.upperBound),
                  let created = parseDecimal(fields[5], limit: UInt64(Int64.max)) else {
                throw .corruptRecord("bad factor number")
            }
            let secret: [UInt8]
            do throws(MFAError) { secret = try Base32.decode(fields[6]) } catch { throw .corruptRecord("bad factor secret") }
            let factor: Factor
            do throws(MFAError) {
                factor = try Factor(label: label,
                                    parameters: try OTPParameters(algorithm: algorithm, digits: Int(digits), period: period),
                                    created: Int64(created), secret: secret)
            } catch {
                throw .corruptRecord("factor out of range")
            }
            guard !record.factors.contains(where: { $0.label == factor.label }) else {
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
