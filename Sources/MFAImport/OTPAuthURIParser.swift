import MFACrypto
import MFAPolicy
import MFASystem

// Reading otpauth:// URIs is for totp-enroll alone (`--uri` imports): the module only writes them
// (enrolment at first login), so the parser is not built into it.
extension OTPAuthURI {
    /// Parses a TOTP or HOTP URI as produced above or by other tools (parameters in any order,
    /// issuer from the label prefix or the `issuer` parameter; an HOTP URI must give its counter).
    public init(parsing uri: [UInt8]) throws(MFAError) {
        let prefix = literal("otpauth://totp/")
        let hotp = uri.count > prefix.count && Array(uri[0..<prefix.count]).lowercasedASCII() == literal("otpauth://hotp/")
        guard uri.count > prefix.count, hotp || Array(uri[0..<prefix.count]).lowercasedASCII() == prefix else {
            throw .invalidParameters("not an otpauth://totp/ or otpauth://hotp/ URI")
        }
        let rest = uri[prefix.count...]
        let q = rest.firstIndex(of: 0x3F) ?? rest.endIndex
        var (issuer, account) = try Self.label(rest[rest.startIndex..<q])
        var secret: [UInt8]? = nil
        var algorithm = HashAlgorithm.sha1
        var digits = 6
        var period: UInt64 = 30
        var counter: UInt64? = nil
        if q < rest.endIndex {
            for pair in rest[(q + 1)...].split(separator: 0x26) {
                let eq = pair.firstIndex(of: ASCII.equals) ?? pair.endIndex
                let key = Array(pair[pair.startIndex..<eq]).lowercasedASCII()
                let rawValue = eq < pair.endIndex ? pair[(eq + 1)...] : pair[pair.endIndex...]
                guard let value = Percent.decode(rawValue) else {
                    throw .invalidParameters("bad percent-encoding in parameter")
                }
                switch key {
                case literal("secret"): secret = try Base32.decode(value)
                case literal("issuer"): issuer = value
                case literal("algorithm"):
                    guard let a = HashAlgorithm(name: value) else { throw .invalidParameters("unknown algorithm") }
                    algorithm = a
                case literal("digits"):
                    guard let d = parseDecimal(value, limit: 8) else { throw .invalidParameters("bad digits") }
                    digits = Int(d)
                case literal("period"):
                    guard let p = parseDecimal(value, limit: 3600) else { throw .invalidParameters("bad period") }
                    period = p
                case literal("counter"):
                    guard let c = parseDecimal(value, limit: UInt64.max) else { throw .invalidParameters("bad counter") }
                    counter = c
                default: break  // unknown parameters (image, color, ...) are ignored, as apps do
                }
            }
        }
        guard let s = secret, !s.isEmpty else { throw .invalidParameters("URI has no secret") }
        if hotp && counter == nil { throw .invalidParameters("an otpauth://hotp/ URI needs its counter") }
        self.init(issuer: issuer, account: account, secret: s,
                  parameters: try OTPParameters(algorithm: algorithm, digits: digits, period: hotp ? 30 : period),
                  counter: hotp ? counter : nil)
    }

    /// The label, "issuer:account" or "account", decoded. The separator is the first literal
    /// ':', or else the first "%3A" (Key URI allows an encoded one); it is found before
    /// decoding, so an encoded colon inside the issuer (as `bytes` writes it) stays part of it.
    /// Leading spaces of the account are dropped.
    static func label(_ rawLabel: ArraySlice<UInt8>) throws(MFAError) -> (issuer: [UInt8], account: [UInt8]) {
        var rawIssuer = rawLabel[rawLabel.startIndex..<rawLabel.startIndex]
        var rawAccount = rawLabel
        if let colon = rawLabel.firstIndex(of: 0x3A) {
            rawIssuer = rawLabel[..<colon]
            rawAccount = rawLabel[(colon + 1)...]
        } else if let percent = Self.encodedColon(in: rawLabel) {
            rawIssuer = rawLabel[..<percent]
            rawAccount = rawLabel[(percent + 3)...]
        }
        guard let issuer = Percent.decode(rawIssuer), var account = Percent.decode(rawAccount) else {
            throw .invalidParameters("bad percent-encoding in label")
        }
        while account.first == ASCII.space { account.removeFirst() }
        return (issuer, account)
    }

    /// The index of the first "%3A" (either case) in `label`, or nil.
    static func encodedColon(in label: ArraySlice<UInt8>) -> Int? {
        var i = label.startIndex
        while i + 2 < label.endIndex {
            if label[i] == ASCII.percent && label[i + 1] == 0x33 && (label[i + 2] == 0x41 || label[i + 2] == 0x61) { return i }
            i += 1
        }
        return nil
    }
}

extension Array where Element == UInt8 {
    func lowercasedASCII() -> [UInt8] {
        map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
    }
}
