import CLibc

/// One enrolled factor: its kind (FactorKind.swift holds everything that differs by kind),
/// its label, and the kind's data.
public struct Factor: Equatable, Sendable {
    public static let maxLabelLength = 64

    public var kind: FactorKind
    public var label: [UInt8]
    public var parameters: OTPParameters
    /// Unix time of enrolment.
    public var created: Int64
    /// The time step of the code that proved the factor at enrolment (0 if unknown): it and
    /// every earlier step count as used. Kept in the record, so that an enrolment is one commit
    /// (the record) and never a record plus a state update (docs/ARCHITECTURE.md, section 4.13).
    public var enrolledStep: UInt64
    public var secret: [UInt8]

    public init(kind: FactorKind = .totp, label: [UInt8], parameters: OTPParameters, created: Int64,
                enrolledStep: UInt64 = 0, secret: [UInt8]) throws(MFAError) {
        try Factor.validate(label: label)
        guard secret.count >= 10 && secret.count <= 128 else {
            throw .invalidParameters("secret must be 10 to 128 bytes")
        }
        self.kind = kind
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
    @_optimize(size)  // cold: not on a login's path
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
///                                                  (a TOTP factor: each kind has its own line, FactorKind.swift)
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

    @_optimize(size)  // cold: not on a login's path
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
        for f in factors { f.appendRecordLine(to: &out) }
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
        // One pass over the lines, each split into at most 8 fields in place (no arrays of
        // lines or fields: this runs on every login).
        var f = FieldSplitter()
        var lineStart = 0
        var lineNumber = 0
        var version: UInt64 = 0
        var record = UserRecord()
        while lineStart < bytes.count {
            var end = lineStart
            while end < bytes.count && bytes[end] != ASCII.newline { end += 1 }
            let line = bytes[lineStart..<end]
            lineStart = end + 1
            lineNumber += 1
            let n = f.split(line)
            if lineNumber == 1 {
                version = try parseHeader(line, f, count: n)
            } else if version == 2 && lineNumber == 2 {
                try record.parseAccount(line, f, count: n)
            } else {
                guard n > 0, !line.isEmpty else { throw .corruptRecord("empty line") }
                try record.parseLine(line, f, count: n, version: version)
            }
        }
        if lineNumber == 0 { throw .corruptRecord("empty record") }
        if version == 2 && lineNumber < 2 { throw .corruptRecord("no account line") }
        return record
    }

    /// `pam_totp <version>`: the version (1 or 2).
    private static func parseHeader(_ line: ArraySlice<UInt8>, _ f: FieldSplitter, count n: Int) throws(MFAError) -> UInt64 {
        guard n == 2, equals(f.field(0, of: line), "pam_totp") else { throw .corruptRecord("not a pam_totp record") }
        guard let v = parseDecimal(f.field(1, of: line), limit: 1_000_000), v == 1 || v == 2 else {
            throw .corruptRecord("unsupported record version")
        }
        return v
    }

    /// `account <uid or -> <id, 16 hex>` (version 2).
    private mutating func parseAccount(_ line: ArraySlice<UInt8>, _ f: FieldSplitter, count n: Int) throws(MFAError) {
        guard n == 3, equals(f.field(0, of: line), "account"), f.field(2, of: line).count == 16,
              let id = Hex.decode(f.field(2, of: line)) else {
            throw .corruptRecord("bad account line")
        }
        let uidField = f.field(1, of: line)
        if !equals(uidField, "-") {
            guard let uid = parseDecimal(uidField, limit: UInt64(UInt32.max)) else { throw .corruptRecord("bad account line") }
            self.uid = UInt32(truncatingIfNeeded: uid)
        }
        self.id = uint64(id)
    }

    /// A factor line of any kind, a `recovery` line or a `recovery-code` line.
    private mutating func parseLine(_ line: ArraySlice<UInt8>, _ f: FieldSplitter, count n: Int,
                                    version: UInt64) throws(MFAError) {
        let keyword = f.field(0, of: line)
        if let kind = FactorKind(recordKeyword: keyword) {
            guard factors.count < Self.maxFactors else { throw .corruptRecord("too many factors") }
            let factor = try Factor.parseRecordLine(kind, line, f, count: n, version: version)
            guard self.factor(labelled: factor.label) == nil else { throw .corruptRecord("duplicate factor label") }
            factors.append(factor)
        } else if equals(keyword, "recovery") {
            guard recovery == nil, n == 4, f.field(1, of: line).count == 16,
                  let id = Hex.decode(f.field(1, of: line)).map(uint64),
                  let iterations = parseDecimal(f.field(2, of: line), limit: RecoverySet.iterationRange.upperBound),
                  RecoverySet.iterationRange.contains(iterations),
                  let salt = Hex.decode(f.field(3, of: line)), salt.count >= 8, salt.count <= 64 else {
                throw .corruptRecord("bad recovery line")
            }
            recovery = RecoverySet(id: id, iterations: Int(iterations), salt: salt, hashes: [])
        } else if equals(keyword, "recovery-code") {
            guard n == 2, let h = Hex.decode(f.field(1, of: line)), h.count == 32,
                  var r = recovery, r.hashes.count < RecoverySet.maxCodes else {
                throw .corruptRecord("bad recovery-code line")
            }
            recovery = nil  // keep the hash array uniquely referenced while appending
            r.hashes.append(h)
            recovery = r
        } else {
            throw .corruptRecord("unknown line")
        }
    }
}

/// Splits a line on single spaces into at most 8 fields, in place: `split` returns the number
/// of fields (9 for "more than 8"); `field(i, of:)` is the i-th. Empty fields (two spaces in a
/// row) are kept, so that the caller's field-count and content checks reject them.
struct FieldSplitter {
    var starts = InlineArray<9, Int>(repeating: 0)
    var ends = InlineArray<9, Int>(repeating: 0)

    mutating func split(_ line: ArraySlice<UInt8>) -> Int {
        var n = 0
        var start = line.startIndex
        var i = line.startIndex
        while i < line.endIndex {
            if line[i] == ASCII.space {
                if n == 8 { return 9 }
                starts[n] = start
                ends[n] = i
                n += 1
                start = i + 1
            }
            i += 1
        }
        if n == 8 { return 9 }
        starts[n] = start
        ends[n] = line.endIndex
        return n + 1
    }

    /// Field `i` (callers only ask for indexes below the count `split` returned).
    func field(_ i: Int, of line: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        guard i >= 0, i < 9 else { return line[line.endIndex...] }
        let s = starts[i], e = ends[i]
        guard s >= line.startIndex, s <= e, e <= line.endIndex else { return line[line.endIndex...] }
        return line[s..<e]
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

extension UserRecord {
    /// Zeroes every factor's secret where it is stored: through the array's own buffer, which
    /// every copy of this record shares, so the bytes are gone before that buffer is freed,
    /// whichever copy is released last. Only for a record nothing will read a secret of again.
    public func wipeSecretsInPlace() {
        for factor in factors {
            factor.secret.withUnsafeBufferPointer { bytes in
                guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
                clibc_wipe(UnsafeMutableRawPointer(mutating: base), bytes.count)
            }
        }
    }
}
