import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

// A record's text (the format is documented on UserRecord): the file store's, and the decoy's.

extension UserRecord {
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
        var afterFactor = false  // the line before was a factor line (a `serial` line may follow)
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
                afterFactor = try record.parseLine(line, f, count: n, version: version, afterFactor: afterFactor)
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

    /// A factor line of any kind (true: a `serial` line may follow), a `serial` line (only
    /// `afterFactor`: the one before was a factor line), a `recovery` line or a `recovery-code` line.
    private mutating func parseLine(_ line: ArraySlice<UInt8>, _ f: FieldSplitter, count n: Int,
                                    version: UInt64, afterFactor: Bool) throws(MFAError) -> Bool {
        let keyword = f.field(0, of: line)
        if let kind = FactorKind(recordKeyword: keyword) {
            guard factors.count < Self.maxFactors else { throw .corruptRecord("too many factors") }
            let factor = try Factor.parseRecordLine(kind, line, f, count: n, version: version)
            guard self.factor(labelled: factor.label) == nil else { throw .corruptRecord("duplicate factor label") }
            factors.append(factor)
            return true
        } else if equals(keyword, "serial") {
            // The factor's own serial: right after its line, once, what a stored label may be;
            // a device's only (a phone or an address has none, and none would be written back).
            guard afterFactor, n == 2, let serial = Percent.decode(f.field(1, of: line)),
                  (try? Factor.validate(label: serial)) != nil, let last = factors.indices.last,
                  factors[last].otpKey != nil else {
                throw .corruptRecord("bad serial line")
            }
            factors[last].serial = serial
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
        return false
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

// Each kind's line is its own file's (TOTPLine.swift, HOTPLine.swift, SentLine.swift): the keyword, the fields after the label and
// how they are read back. This is the one place that dispatches on the kind in this layer.

extension FactorKind {
    /// The keyword that starts the kind's line in a record (`factor`: TOTP, the first kind).
    var recordKeyword: StaticString {
        switch self {
        case .totp: return TOTPFactor.recordKeyword
        case .hotp: return HOTPFactor.recordKeyword
        case .sms: return PhoneFactor.recordKeyword
        case .email: return EmailFactor.recordKeyword
        }
    }

    /// The kind whose record line starts with `keyword`.
    init?(recordKeyword keyword: some Collection<UInt8>) {
        for k in FactorKind.all where equals(keyword, k.recordKeyword) {
            self = k
            return
        }
        return nil
    }
}

extension Factor {
    /// The factor's line in a record (`UserRecord.serialized`), newline included, and its
    /// `serial` line if it has a serial: `<keyword> <label, percent-encoded>`, then the kind's
    /// fields (TOTPLine.swift…).
    @_optimize(size)  // cold: not on a login's path
    func appendRecordLine(to out: inout [UInt8]) {
        out.append(contentsOf: bytes(kind.recordKeyword))
        out.append(ASCII.space)
        out += Percent.encode(label)
        switch data {
        case .totp(let t): t.appendRecordFields(created: created, to: &out)
        case .hotp(let h): h.appendRecordFields(created: created, to: &out)
        case .sms(let p): RecordFields.appendSent(p.number, created: created, to: &out)
        case .email(let e): RecordFields.appendSent(e.address, created: created, to: &out)
        }
        out.append(ASCII.newline)
        if !serial.isEmpty {  // a hardware token's serial: its own line (none: the record as before serials)
            out.append(literal: "serial ")
            out += Percent.encode(serial)
            out.append(ASCII.newline)
        }
    }

    /// A factor from its record line, split into `count` fields by `f` (field 0 is the keyword
    /// that named `kind`, field 1 the label). `version`: the record's format version.
    static func parseRecordLine(_ kind: FactorKind, _ line: ArraySlice<UInt8>, _ f: FieldSplitter, count: Int,
                                version: UInt64) throws(MFAError) -> Factor {
        let r = RecordFields(line: line, splitter: f, count: count, version: version)
        switch kind {
        case .totp: return try r.device(TOTPFactor.parseRecordFields(r))
        case .hotp: return try r.device(HOTPFactor.parseRecordFields(r))
        case .sms: return try r.sent { .sms(PhoneFactor(number: $0)) }
        case .email: return try r.sent { .email(EmailFactor(address: $0)) }
        }
    }
}

/// A factor line's fields, for the kinds' readers (TOTPLine.swift…): `count` fields split by `splitter`.
struct RecordFields {
    let line: ArraySlice<UInt8>
    let splitter: FieldSplitter
    let count: Int
    let version: UInt64

    /// Field `i` as a decimal number at most `limit`.
    func number(_ i: Int, limit: UInt64) -> UInt64? { parseDecimal(splitter.field(i, of: line), limit: limit) }

    /// The line has `fields` fields, which the record's version allows (`fields` 0: this kind
    /// has no line in this version).
    func expect(_ fields: Int) throws(MFAError) {
        guard fields > 0, count == fields else { throw .corruptRecord("factor line has wrong field count") }
    }

    /// The label (field 1), after the field count was checked.
    func label() throws(MFAError) -> [UInt8] {
        guard let label = Percent.decode(splitter.field(1, of: line)) else { throw .corruptRecord("bad factor label") }
        return label
    }

    /// A device's `<algorithm>` (field 2).
    func algorithm() throws(MFAError) -> HashAlgorithm {
        guard let a = HashAlgorithm(name: splitter.field(2, of: line)) else { throw .corruptRecord("bad algorithm") }
        return a
    }

    /// A device's key: its secret in Base32 (the last field), once its numbers were read.
    func key(_ algorithm: HashAlgorithm, digits: UInt64, period: UInt64) throws(MFAError) -> OTPKey {
        let secret: [UInt8]
        do throws(MFAError) { secret = try Base32.decode(splitter.field(count - 1, of: line)) } catch {
            throw .corruptRecord("bad factor secret")
        }
        do throws(MFAError) {
            return OTPKey(secret: secret, parameters: try OTPParameters(algorithm: algorithm, digits: Int(digits), period: period))
        } catch {
            throw .corruptRecord("factor out of range")
        }
    }

    /// A device's factor from what its kind read: its data checked, then the label's rules.
    func device(_ read: (label: [UInt8], created: Int64, data: FactorData)) throws(MFAError) -> Factor {
        do throws(MFAError) {
            try read.data.validate()
            return try Factor(label: read.label, created: read.created, data: read.data)
        } catch {
            throw .corruptRecord("factor out of range")
        }
    }

    /// `<algorithm> <digits>` of a device's key, written after the label.
    static func appendKeyHead(_ key: OTPKey, to out: inout [UInt8]) {
        out.append(ASCII.space)
        out += key.parameters.algorithm.nameBytes
        out.append(ASCII.space)
        out += decimalBytes(UInt64(key.parameters.digits))
    }

    /// ` <number>`: one of a device's numbers.
    static func appendNumber(_ n: UInt64, to out: inout [UInt8]) {
        out.append(ASCII.space)
        out += decimalBytes(n)
    }

    /// ` <secret, Base32>`: the end of a device's line.
    static func appendSecret(_ secret: [UInt8], to out: inout [UInt8]) {
        out.append(ASCII.space)
        out += Base32.encode(secret)
    }

    /// A sent kind's factor (SMS, email: `<created> <destination, percent-encoded>` after the
    /// label, version 2 only), its data made by `make` and checked with its label.
    func sent(_ make: ([UInt8]) -> FactorData) throws(MFAError) -> Factor {
        try expect(version == 2 ? 4 : 0)
        let label = try label()
        guard let created = number(2, limit: UInt64(Int64.max)),
              let destination = Percent.decode(splitter.field(3, of: line)) else { throw .corruptRecord("bad factor number") }
        let data = make(destination)
        do throws(MFAError) {
            try data.validate()
            return try Factor(label: label, created: Int64(created), data: data)
        } catch {
            throw .corruptRecord("bad factor destination")
        }
    }

    /// ` <created> <destination, percent-encoded>`: a sent kind's line after its label.
    static func appendSent(_ destination: [UInt8], created: Int64, to out: inout [UInt8]) {
        out.append(ASCII.space)
        out += decimalBytes(created)
        out.append(ASCII.space)
        out += Percent.encode(destination)
    }
}
