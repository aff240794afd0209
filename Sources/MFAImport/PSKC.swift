import MFACrypto
import MFASystem

// Only totp-enroll imports PSKC files (import-pskc); the module never does.

/// The block ciphers a PSKC file may encrypt its values with (XML Encryption's CBC modes; the
/// IV is the first 16 bytes of the CipherValue, PKCS#7 padding).
public enum PSKCCipher: Sendable, Equatable {
    case aes128cbc, aes192cbc, aes256cbc

    public var keyLength: Int {
        switch self {
        case .aes128cbc: return 16
        case .aes192cbc: return 24
        case .aes256cbc: return 32
        }
    }

    init?(uri: [UInt8]) {
        if hasSuffix(uri, "#aes128-cbc") { self = .aes128cbc } else if hasSuffix(uri, "#aes192-cbc") { self = .aes192cbc } else if hasSuffix(uri, "#aes256-cbc") { self = .aes256cbc } else { return nil }
    }
}

/// AES-CBC decryption, supplied by the caller (totp-enroll links libcrypto; this library does
/// not). Returns the plaintext with the padding removed, nil if the padding is wrong.
public protocol PSKCDecryptor {
    func decrypt(_ cipher: PSKCCipher, key: [UInt8], iv: [UInt8], ciphertext: [UInt8]) -> [UInt8]?
}

/// An `<EncryptedValue>` (or `<MACKey>`): the cipher, IV || ciphertext, and its `<ValueMAC>`.
public struct PSKCEncryptedValue: Sendable, Equatable {
    public var cipher: PSKCCipher
    public var value: [UInt8]
    public var mac: [UInt8]?
}

/// A `<Secret>`, `<Counter>`, `<Time>` or `<TimeInterval>`: plain (the secret base64-decoded,
/// the numbers as their text) or encrypted.
public enum PSKCData: Sendable, Equatable {
    case plain([UInt8])
    case encrypted(PSKCEncryptedValue)
}

/// PBKDF2 as `<pkcs5:PBKDF2-params>` gives it.
public struct PSKCPBKDF2: Sendable, Equatable {
    public static let maxIterations: UInt64 = 10_000_000
    public var salt: [UInt8]
    public var iterations: Int
    public var keyLength: Int
    public var prf: HashAlgorithm
}

/// Where the file's encryption key comes from (`<EncryptionKey>`).
public enum PSKCProtection: Sendable, Equatable {
    /// No `<EncryptionKey>`.
    case none
    /// `<ds:KeyName>`: a key both sides already hold (given to totp-enroll in hex).
    case preSharedKey(name: [UInt8])
    /// `<DerivedKey>` with PBKDF2: the key is derived from a passphrase.
    case passphrase(PSKCPBKDF2)
}

public enum PSKCKind: Sendable, Equatable { case hotp, totp }

/// One `<Key>` of a `<KeyPackage>`, as written (nothing decrypted).
public struct PSKCKeyEntry: Sendable, Equatable {
    public var id: [UInt8]
    /// `<DeviceInfo><SerialNo>` of its package.
    public var serial: [UInt8]?
    public var algorithm: [UInt8]
    public var suite: [UInt8]?
    public var responseLength: [UInt8]?
    public var responseEncoding: [UInt8]?
    public var secret: PSKCData?
    public var counter: PSKCData?
    public var time: PSKCData?
    public var timeInterval: PSKCData?

    /// HOTP or TOTP by the Algorithm URI (`…:hotp`, `…#hotp`, `…:totp`, `…#totp`); nil for others.
    public var kind: PSKCKind? {
        if hasSuffix(algorithm, ":hotp") || hasSuffix(algorithm, "#hotp") { return .hotp }
        if hasSuffix(algorithm, ":totp") || hasSuffix(algorithm, "#totp") { return .totp }
        return nil
    }

    /// The key as messages name it: its serial number, else its Id (printable ASCII, bounded).
    public var shownName: Message {
        if let serial, !serial.isEmpty { return "serial " + printable(Array(serial.prefix(64))) }
        return "Key Id " + printable(Array(id.prefix(64)))
    }

    var values: [PSKCData] { [secret, counter, time, timeInterval].compactMap { $0 } }

    /// Overwrites a plain secret.
    public mutating func erase() {
        if case .plain(var bytes) = secret {
            secret = nil
            wipe(&bytes)
        }
    }
}

/// A key ready to become a factor: everything checked, the secret in the clear.
public struct PSKCToken: Sendable, Equatable {
    public var kind: PSKCKind
    public var id: [UInt8]
    public var serial: [UInt8]?
    public var parameters: OTPParameters
    /// HOTP: the counter of the token's next code. nil for TOTP.
    public var counter: UInt64?
    public var secret: [UInt8]

    public mutating func erase() { wipe(&secret) }
}

/// The values of one key after the MACs were checked and the values decrypted; not yet
/// checked against what pam_totp supports.
public struct PSKCKeyValues: Sendable {
    public var secret: [UInt8]?
    public var counter: UInt64?
    public var time: UInt64?
    public var timeInterval: UInt64?

    public mutating func erase() { if secret != nil { wipe(&secret!) } }
}

/// An RFC 6030 Portable Symmetric Key Container, read strictly and without any cryptography
/// of its own beyond HMAC: decryption (AES-CBC) is the caller's `PSKCDecryptor`, and the key
/// from a passphrase (PBKDF2, `protection`) the caller derives too.
///
/// Encrypted files must carry a MAC (`<MACMethod>` and a `<ValueMAC>` on every encrypted
/// value): RFC 6030 section 6.1.1 makes it mandatory with CBC, and without it a changed
/// ciphertext would be imported as a wrong secret (a padding oracle aside). Every MAC in the
/// file is checked before any value is decrypted; one mismatch and nothing is decrypted.
/// A MAC covers its own encrypted value only: a `.plain` value (a vendor's plain `<Counter>`)
/// and the key's attributes are covered by none, and import-pskc says so per key.
///
/// Errors are `invalidParameters` with a message that names the key (serial or Key Id) and
/// never contains a secret.
public struct PSKCContainer: Sendable {
    public static let maxSize = XMLReader.maxSize

    public var protection: PSKCProtection = .none
    /// `<MACMethod Algorithm=…>`; nil without one.
    public var macAlgorithm: HashAlgorithm?
    /// `<MACMethod><MACKey>`; nil: the MAC key is the encryption key (early PSKC drafts, as
    /// python-pskc reads them).
    public var macKey: PSKCEncryptedValue?
    public var keys: [PSKCKeyEntry] = []

    /// True when any value (or the MAC key) is encrypted.
    public var isEncrypted: Bool {
        macKey != nil || keys.contains { $0.values.contains { if case .encrypted = $0 { return true }; return false } }
    }

    public init(parsing bytes: [UInt8]) throws(MFAError) {
        var root = try XMLReader.parse(bytes)
        defer { root.erase() }
        guard equals(root.name, "KeyContainer") else { throw .invalidParameters("not a PSKC file: the root element is not KeyContainer") }
        if let version = root.attribute("Version"), !equals(version, "1.0") {
            throw .invalidParameters("PSKC version other than 1.0")
        }
        if let enc = try root.single("EncryptionKey") { protection = try Self.protection(enc) }
        if let method = try root.single("MACMethod") {
            guard let uri = method.attribute("Algorithm") else { throw .invalidParameters("MACMethod has no Algorithm") }
            guard let algorithm = Self.hmac(uri) else {
                throw .invalidParameters("the MAC algorithm is not supported (hmac-sha1, hmac-sha256, hmac-sha512)")
            }
            macAlgorithm = algorithm
            if let key = try method.single("MACKey") { macKey = try Self.encrypted(key, mac: nil, what: "the MAC key") }
        }
        for package in root.children("KeyPackage") {
            let serial = try package.singlePath("DeviceInfo", "SerialNo").map { $0.trimmedText }
            for key in package.children("Key") {
                guard keys.count < 10_000 else { throw .invalidParameters("more than 10000 keys") }
                var entry = PSKCKeyEntry(id: key.attribute("Id") ?? [], serial: serial, algorithm: key.attribute("Algorithm") ?? [])
                if let p = try key.single("AlgorithmParameters") {
                    entry.suite = try p.single("Suite").map { $0.trimmedText }
                    if let format = try p.single("ResponseFormat") {
                        entry.responseLength = format.attribute("Length")
                        entry.responseEncoding = format.attribute("Encoding")
                    }
                }
                if let data = try key.single("Data") {
                    do throws(MFAError) {
                        entry.secret = try data.single("Secret").map { e throws(MFAError) in try Self.data(e, base64: true) }
                        entry.counter = try data.single("Counter").map { e throws(MFAError) in try Self.data(e, base64: false) }
                        entry.time = try data.single("Time").map { e throws(MFAError) in try Self.data(e, base64: false) }
                        entry.timeInterval = try data.single("TimeInterval").map { e throws(MFAError) in try Self.data(e, base64: false) }
                    } catch {
                        if case .invalidParameters(let why) = error { throw .invalidParameters(entry.shownName + ": " + why) }
                        throw error
                    }
                }
                keys.append(entry)
            }
        }
    }

    /// Overwrites the plain secrets of every key (encrypted ones are useless without the key).
    public mutating func erase() {
        for i in keys.indices { keys[i].erase() }
    }

    // MARK: - Reading

    static func protection(_ enc: XMLElementNode) throws(MFAError) -> PSKCProtection {
        if let derived = try enc.single("DerivedKey") {
            guard let method = try derived.single("KeyDerivationMethod"), let uri = method.attribute("Algorithm"), hasSuffix(uri, "#pbkdf2") else {
                throw .invalidParameters("the key derivation is not PBKDF2 (the only one supported)")
            }
            guard let params = try method.single("PBKDF2-params") else { throw .invalidParameters("PBKDF2 without PBKDF2-params") }
            guard let saltText = try params.singlePath("Salt", "Specified")?.trimmedText, let salt = base64Decode(saltText), !salt.isEmpty else {
                throw .invalidParameters("PBKDF2 without a salt (Salt/Specified, base64)")
            }
            guard let count = try params.single("IterationCount")?.trimmedText,
                  let iterations = parseDecimal(count, limit: PSKCPBKDF2.maxIterations), iterations > 0 else {
                throw .invalidParameters("PBKDF2's IterationCount is missing or not 1 to 10000000")
            }
            var keyLength = 16
            if let text = try params.single("KeyLength")?.trimmedText {
                guard let n = parseDecimal(text, limit: 32), n == 16 || n == 24 || n == 32 else {
                    throw .invalidParameters("PBKDF2's KeyLength must be 16, 24 or 32")
                }
                keyLength = Int(n)
            }
            var prf = HashAlgorithm.sha1
            if let p = try params.single("PRF") {
                let uri = p.attribute("Algorithm") ?? p.trimmedText
                if !uri.isEmpty {
                    guard let h = hmac(uri) else { throw .invalidParameters("PBKDF2's PRF is not supported (hmac-sha1, hmac-sha256, hmac-sha512)") }
                    prf = h
                }
            }
            return .passphrase(PSKCPBKDF2(salt: salt, iterations: Int(iterations), keyLength: keyLength, prf: prf))
        }
        if let name = try enc.single("KeyName") { return .preSharedKey(name: name.trimmedText) }
        // An empty EncryptionKey (python-pskc writes one for a pre-shared key without a name).
        guard enc.children.isEmpty else {
            throw .invalidParameters("the EncryptionKey is neither a KeyName (pre-shared key) nor a DerivedKey (passphrase); not supported")
        }
        return .preSharedKey(name: [])
    }

    static func data(_ e: XMLElementNode, base64: Bool) throws(MFAError) -> PSKCData {
        let name: Message = equals(e.name, "Secret") ? "the secret" : "the " + Message(Array(e.name.prefix(32)))
        if let plain = try e.single("PlainValue") {
            guard try e.single("EncryptedValue") == nil else { throw .invalidParameters(name + " is both plain and encrypted") }
            guard base64 else { return .plain(plain.trimmedText) }
            guard let bytes = base64Decode(plain.text) else { throw .invalidParameters(name + " is not valid base64") }
            return .plain(bytes)
        }
        if let encrypted = try e.single("EncryptedValue") {
            var mac: [UInt8]? = nil
            if let m = try e.single("ValueMAC") {
                guard let bytes = base64Decode(m.text) else { throw .invalidParameters(name + "'s ValueMAC is not valid base64") }
                mac = bytes
            }
            return .encrypted(try Self.encrypted(encrypted, mac: mac, what: name))
        }
        throw .invalidParameters(name + " has neither a PlainValue nor an EncryptedValue")
    }

    static func encrypted(_ e: XMLElementNode, mac: [UInt8]?, what: Message) throws(MFAError) -> PSKCEncryptedValue {
        guard let uri = try e.single("EncryptionMethod")?.attribute("Algorithm") else {
            throw .invalidParameters(what + " has no EncryptionMethod")
        }
        guard let cipher = PSKCCipher(uri: uri) else {
            throw .invalidParameters(what + " is encrypted with an unsupported algorithm (aes128-cbc, aes192-cbc, aes256-cbc)")
        }
        guard let text = try e.singlePath("CipherData", "CipherValue")?.text, let value = base64Decode(text) else {
            throw .invalidParameters(what + " has no valid CipherData/CipherValue")
        }
        guard value.count >= 32, value.count % 16 == 0 else {
            throw .invalidParameters(what + "'s CipherValue is not an IV and whole AES blocks")
        }
        return PSKCEncryptedValue(cipher: cipher, value: value, mac: mac)
    }

    /// hmac-sha1/256/512 by the end of an algorithm URI or a bare name (`HMAC-SHA256`).
    static func hmac(_ uri: [UInt8]) -> HashAlgorithm? {
        let tail = uri.lastIndex(of: 0x23).map { Array(uri[($0 + 1)...]) } ?? uri
        let name = lowercased(tail).filter { $0 != 0x2D }  // hmac-sha-256 -> hmacsha256
        if equals(name, "hmacsha1") { return .sha1 }
        if equals(name, "hmacsha256") { return .sha256 }
        if equals(name, "hmacsha512") { return .sha512 }
        return nil
    }

    // MARK: - MACs and decryption

    /// The MAC key: `<MACKey>` decrypted with the encryption key, or the encryption key itself.
    func macKeyBytes(_ key: [UInt8], _ decryptor: some PSKCDecryptor) throws(MFAError) -> [UInt8] {
        guard let macKey else { return key }
        // The same error as a MAC that does not match: a different one for bad padding would
        // be a padding oracle on the pre-shared key.
        guard let plain = Self.decrypt(macKey, key: key, decryptor) else { throw Self.macFailure }
        return plain
    }

    static func decrypt(_ v: PSKCEncryptedValue, key: [UInt8], _ decryptor: some PSKCDecryptor) -> [UInt8]? {
        guard key.count == v.cipher.keyLength, v.value.count >= 32 else { return nil }
        return decryptor.decrypt(v.cipher, key: key, iv: Array(v.value.prefix(16)), ciphertext: Array(v.value.dropFirst(16)))
    }

    /// Checks the file's integrity, then decrypts the values of the keys at `indices` (all
    /// keys if nil). `encryptionKey` is the pre-shared key or the one derived from the
    /// passphrase; nil for a file without encryption. Every encrypted value of the whole file
    /// must carry a ValueMAC that matches (HMAC over IV || ciphertext with the MAC key) before
    /// anything is decrypted.
    public func decryptedValues(of indices: [Int]? = nil, encryptionKey: [UInt8]?,
                                decryptor: some PSKCDecryptor) throws(MFAError) -> [PSKCKeyValues] {
        let chosen = indices ?? Array(keys.indices)
        for i in chosen where !keys.indices.contains(i) { throw .invalidParameters("no such key") }
        // In an encrypted file a plain secret is covered by no MAC: anyone who could change the
        // file could have put it there (or put it before the encrypted one).
        if isEncrypted || protection != .none || macAlgorithm != nil {
            for i in chosen {
                if case .plain? = keys[i].secret {
                    throw .invalidParameters(keys[i].shownName + ": a plaintext secret in an encrypted file (no MAC covers it); nothing was imported")
                }
            }
        }
        var macKeyPlain: [UInt8] = []
        defer { wipe(&macKeyPlain) }
        if isEncrypted {
            guard let macAlgorithm else {
                throw .invalidParameters("the file is encrypted but has no MAC (MACMethod): its integrity cannot be checked; nothing was imported")
            }
            guard let encryptionKey else { throw .invalidParameters("the file is encrypted: a passphrase or a pre-shared key is needed") }
            for v in [macKey].compactMap({ $0 }) where v.cipher.keyLength != encryptionKey.count {
                throw .invalidParameters("the MAC key is encrypted for a key of another length than the one given")
            }
            macKeyPlain = try macKeyBytes(encryptionKey, decryptor)
            guard !macKeyPlain.isEmpty else { throw .invalidParameters("the MAC key is empty; nothing was imported") }
            let hmacKey = HMACKey(algorithm: macAlgorithm, key: macKeyPlain)
            for entry in keys {
                for case .encrypted(let v) in entry.values {
                    guard let mac = v.mac else {
                        throw .invalidParameters(entry.shownName + ": an encrypted value has no ValueMAC; nothing was imported")
                    }
                    guard constantTimeEqual(hmacKey.authenticate(v.value), mac) else { throw Self.macFailure }
                }
            }
        }
        var out: [PSKCKeyValues] = []
        do throws(MFAError) {
            for i in chosen {
                let entry = keys[i]
                out.append(PSKCKeyValues())
                let n = out.count - 1
                if let s = entry.secret { out[n].secret = try Self.value(s, entry, "the secret", encryptionKey, decryptor) }
                if let d = entry.counter { out[n].counter = try Self.integer(d, entry, "the Counter", encryptionKey, decryptor) }
                if let d = entry.time { out[n].time = try Self.integer(d, entry, "the Time", encryptionKey, decryptor) }
                if let d = entry.timeInterval { out[n].timeInterval = try Self.integer(d, entry, "the TimeInterval", encryptionKey, decryptor) }
            }
        } catch {
            for i in out.indices { out[i].erase() }
            throw error
        }
        return out
    }

    /// Every MAC failure, whichever value or the MAC key it was, says the same.
    static var macFailure: MFAError {
        .invalidParameters("the file's MAC does not verify (wrong passphrase or key, or the file was changed); nothing was imported")
    }

    static func value(_ d: PSKCData, _ entry: PSKCKeyEntry, _ what: Message, _ key: [UInt8]?,
                      _ decryptor: some PSKCDecryptor) throws(MFAError) -> [UInt8] {
        switch d {
        case .plain(let bytes): return bytes
        case .encrypted(let v):
            // The MACs were checked (a file with an encrypted value is never read without).
            guard let key, let plain = decrypt(v, key: key, decryptor) else {
                throw .invalidParameters(entry.shownName + ": " + what + " does not decrypt; nothing was imported")
            }
            return plain
        }
    }

    /// A number: decimal text (plain, or encrypted as python-pskc writes it), or encrypted as
    /// a big-endian integer of at most 8 bytes.
    static func integer(_ d: PSKCData, _ entry: PSKCKeyEntry, _ what: Message, _ key: [UInt8]?,
                        _ decryptor: some PSKCDecryptor) throws(MFAError) -> UInt64 {
        let bytes = try value(d, entry, what, key, decryptor)
        let bad = MFAError.invalidParameters(entry.shownName + ": " + what + " is not a number below 2^63")
        if case .plain = d {
            guard let v = parseDecimal(bytes, limit: UInt64(Int64.max)) else { throw bad }
            return v
        }
        // Encrypted: decimal text, else a big-endian integer, read as python-pskc reads them
        // (it writes the integer; bytes that are all ASCII digits are read as text by both).
        if !bytes.isEmpty, bytes.allSatisfy(ASCII.isDigit) {
            guard let v = parseDecimal(bytes, limit: UInt64(Int64.max)) else { throw bad }
            return v
        }
        guard !bytes.isEmpty, bytes.count <= 8 else { throw bad }
        var v: UInt64 = 0
        for b in bytes { v = v << 8 | UInt64(b) }
        guard v <= UInt64(Int64.max) else { throw bad }
        return v
    }

    // MARK: - What pam_totp can use

    /// The keys at `indices` as tokens pam_totp can enrol: MACs checked, values decrypted, and
    /// each checked (HOTP or TOTP; hash SHA-1, SHA-256 or SHA-512; 6 to 8 decimal digits; a
    /// counter for HOTP; a period of 1 to 3600 s and T0 = 0 for TOTP; a secret of 10 to 128
    /// bytes). The first key that fails names itself in the error; nothing is returned then.
    public func tokens(_ indices: [Int], encryptionKey: [UInt8]?, decryptor: some PSKCDecryptor) throws(MFAError) -> [PSKCToken] {
        for i in indices where !keys.indices.contains(i) { throw .invalidParameters("no such key") }
        // What can be checked without a secret is checked before any is decrypted.
        for i in indices { _ = try Self.parameters(keys[i]) }
        var values = try decryptedValues(of: indices, encryptionKey: encryptionKey, decryptor: decryptor)
        defer { for i in values.indices { values[i].erase() } }
        var out: [PSKCToken] = []
        do throws(MFAError) {
            for (n, i) in indices.enumerated() where n < values.count {
                out.append(try Self.token(keys[i], values[n]))
            }
        } catch {
            for i in out.indices { out[i].erase() }
            throw error
        }
        return out
    }

    /// The kind, hash and digits of a key, or an error naming it.
    static func parameters(_ entry: PSKCKeyEntry) throws(MFAError) -> (PSKCKind, HashAlgorithm, Int) {
        let name = entry.shownName
        guard let kind = entry.kind else {
            throw .invalidParameters(name + ": the algorithm " + printable(Array(entry.algorithm.prefix(80)))
                                     + " is not supported (HOTP and TOTP are)")
        }
        var hash = HashAlgorithm.sha1
        if let suite = entry.suite, !suite.isEmpty {
            let plain = lowercased(suite).filter { $0 != 0x2D }
            if equals(plain, "sha1") || equals(plain, "hmacsha1") { hash = .sha1 } else if equals(plain, "sha256") || equals(plain, "hmacsha256") { hash = .sha256 } else if equals(plain, "sha512") || equals(plain, "hmacsha512") { hash = .sha512 } else {
                throw .invalidParameters(name + ": the hash " + printable(Array(suite.prefix(40))) + " is not supported (SHA-1, SHA-256, SHA-512)")
            }
        }
        var digits = 6
        if let length = entry.responseLength {
            guard let n = parseDecimal(length, limit: 100), OTPParameters.digitsRange.contains(Int(n)) else {
                throw .invalidParameters(name + ": codes of " + printable(Array(length.prefix(8))) + " digits are not supported (6, 7 or 8)")
            }
            digits = Int(n)
        }
        if let encoding = entry.responseEncoding, !equals(lowercased(encoding), "decimal") {
            throw .invalidParameters(name + ": only decimal codes are supported")
        }
        return (kind, hash, digits)
    }

    static func token(_ entry: PSKCKeyEntry, _ values: PSKCKeyValues) throws(MFAError) -> PSKCToken {
        let name = entry.shownName
        let (kind, hash, digits) = try parameters(entry)
        var period: UInt64 = 30
        var counter: UInt64? = nil
        switch kind {
        case .hotp:
            guard let c = values.counter else { throw .invalidParameters(name + ": an HOTP key without a Counter (the token's next count is needed)") }
            guard c < HOTPWindow.maxCounter else { throw .invalidParameters(name + ": the Counter is at or above 2^48") }
            counter = c
        case .totp:
            if let t = values.timeInterval {
                guard OTPParameters.periodRange.contains(t) else { throw .invalidParameters(name + ": the TimeInterval must be 1 to 3600 seconds") }
                period = t
            }
            if let t0 = values.time, t0 != 0 {
                throw .invalidParameters(name + ": a Time (T0) other than 0 is not supported")
            }
        }
        guard let secret = values.secret else { throw .invalidParameters(name + ": no secret") }
        guard secret.count >= 10 else { throw .invalidParameters(name + ": the secret is shorter than 80 bits (10 bytes)") }
        guard secret.count <= 128 else { throw .invalidParameters(name + ": the secret is longer than 1024 bits") }
        let parameters: OTPParameters
        do throws(MFAError) { parameters = try OTPParameters(algorithm: hash, digits: digits, period: period) } catch {
            throw .invalidParameters(name + ": unsupported parameters")
        }
        return PSKCToken(kind: kind, id: entry.id, serial: entry.serial, parameters: parameters, counter: counter, secret: secret)
    }
}

// MARK: - Helpers

func hasSuffix(_ text: [UInt8], _ suffix: StaticString) -> Bool {
    let s = lowercased(text)
    let t = bytes(suffix)
    guard s.count >= t.count else { return false }
    return s.suffix(t.count).elementsEqual(t)
}

func lowercased(_ bytes: [UInt8]) -> [UInt8] { bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 } }

/// Base64 (RFC 4648, standard alphabet) with XML white space anywhere; '=' padding optional
/// but only at the end. nil on anything else.
public func base64Decode(_ text: [UInt8]) -> [UInt8]? {
    var out: [UInt8] = []
    out.reserveCapacity(text.count / 4 * 3 + 3)
    var acc: UInt32 = 0
    var bits = 0
    var padding = 0
    for c in text {
        let v: UInt32
        switch c {
        case 0x41...0x5A: v = UInt32(c - 0x41)
        case 0x61...0x7A: v = UInt32(c - 0x61 + 26)
        case 0x30...0x39: v = UInt32(c - 0x30 + 52)
        case 0x2B: v = 62
        case 0x2F: v = 63
        case 0x3D: padding += 1; continue
        case 0x20, 0x09, 0x0A, 0x0D: continue
        default: return nil
        }
        guard padding == 0 else { return nil }
        acc = (acc << 6 | v) & 0xFFFFFF
        bits += 6
        if bits >= 8 {
            bits -= 8
            out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
        }
    }
    guard padding <= 2, bits < 6 else { return nil }  // 6 leftover bits: a lone character
    return out
}
