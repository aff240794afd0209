import CLibc
import MFACrypto
import MFASystem

/// One enrolled factor: its label, when it was enrolled, a hardware token's serial, and its
/// kind's payload (`FactorData`: each kind holds only what it needs; FactorKind.swift and
/// the kinds' own files hold everything that differs by kind).
public struct Factor: Equatable, Sendable {
    public static let maxLabelLength = 64

    public var label: [UInt8]
    /// Unix time of enrolment.
    public var created: Int64
    /// A hardware token's serial number (import-pskc: its PSKC SerialNo, else its Key Id);
    /// empty: none. Not a secret; a stored one is what a label may be (`validate(label:)`).
    public var serial: [UInt8] = []
    public var data: FactorData

    public var kind: FactorKind { data.kind }
    /// A device's secret and code parameters (TOTP, HOTP), nil for a kind whose codes are sent.
    public var otpKey: OTPKey? { data.otpKey }
    /// A sent kind's destination (an E.164 number, an email address), nil for the others.
    /// Shown masked to everyone but root.
    public var destination: [UInt8]? { data.destination }
    /// The channel a sent kind's codes go over, nil for a kind whose codes are typed.
    public var channel: Channel? { kind.channel }

    /// A factor of `data`, with its label checked (`validate(label:)`). The data is not checked
    /// here: a new one is by `validateNew`, one read back by its reader (a status may show a
    /// device without its secret, or a masked destination).
    public init(label: [UInt8], created: Int64, serial: [UInt8] = [], data: FactorData) throws(MFAError) {
        try Factor.validate(label: label)
        (self.label, self.created, self.serial, self.data) = (label, created, serial, data)
    }

    /// The destination as users see it: `+1******1234`, `a***@example.com` (empty for the
    /// kinds without one).
    @_optimize(size)  // cold: a login with a phone or address only
    public var maskedDestination: [UInt8] { data.masked }

    /// This factor as a status shows it: no secret.
    public var withoutSecret: Factor {
        var f = self
        f.data = data.withoutSecret
        return f
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

    /// What a new serial may be: what a new label may be (1–64 bytes of printable text).
    @_optimize(size)  // cold: not on a login's path
    public static func validateNew(serial: [UInt8]) throws(MFAError) {
        do throws(MFAError) { try validateNew(label: serial) } catch {
            throw .invalidParameters("a serial number must be 1 to 64 bytes of printable text")
        }
    }

    /// What every store checks before it saves a new factor: its label, and its serial if it has one.
    @_optimize(size)  // cold: not on a login's path
    public func validateNew() throws(MFAError) {
        try Factor.validateNew(label: label)
        if !serial.isEmpty {
            // A serial is a hardware token's: a phone or an address has none (its record line
            // could not hold one, and the record would no longer read back).
            guard otpKey != nil else { throw .invalidParameters("only a device has a serial number") }
            try Factor.validateNew(serial: serial)
        }
        try data.validate()
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
/// serial <serial number, percent-encoded>           (optional, right after a factor line: that factor's)
/// recovery <set id, 16 hex> <PBKDF2 iterations> <salt, hex>
/// recovery-code <PBKDF2-HMAC-SHA-256 of the code, 64 hex>        (one line per code)
/// ```
/// `account` binds the record to the account it was enrolled for (a reused name with another
/// uid is not enrolled) and names this record's lifetime (the state file remembers it, so a
/// state left over from a purged record is never applied to a new one). Version 1 (no account
/// line, factor lines without the enrolled step) is still read; every write is version 2.
/// A `serial` line (a hardware token's serial number, 1–64 bytes, what a label may be) follows
/// only a factor line and at most once per factor; a factor without one is written as before
/// (no line), so a record without serials reads and writes exactly as it did before they existed.
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
}

extension UserRecord {
    /// Zeroes every factor's secret where it is stored: through the array's own buffer, which
    /// every copy of this record shares, so the bytes are gone before that buffer is freed,
    /// whichever copy is released last. Only for a record nothing will read a secret of again.
    public func wipeSecretsInPlace() {
        for factor in factors {
            guard let secret = factor.otpKey?.secret else { continue }
            secret.withUnsafeBufferPointer { bytes in
                guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
                clibc_wipe(UnsafeMutableRawPointer(mutating: base), bytes.count)
            }
        }
    }
}
