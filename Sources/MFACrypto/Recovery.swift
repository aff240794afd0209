import MFASystem

/// PBKDF2 (RFC 8018 §5.2) with HMAC-SHA-256, one 32-byte block: what recovery codes are
/// stored as. The password is the code's digits; the salt is per user.
public func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int) -> [UInt8] {
    let key = HMACKey(algorithm: .sha256, key: password)
    var u = key.authenticate(salt + [0, 0, 0, 1])
    var out = u
    var i = 1
    while i < iterations {
        u = key.authenticate(u)
        for j in 0..<min(out.count, u.count) { out[j] ^= u[j] }
        i += 1
    }
    return out
}

/// A user's recovery codes as stored: one salt and iteration count for the set, and the
/// PBKDF2 hash of each code. A random set id ties the "used" bits in the state file to this
/// set, so a regenerated set starts with every code unused.
public struct RecoverySet: Equatable, Sendable {
    public static let maxCodes = 32
    public static let defaultIterations = 10_000
    public static let iterationRange: ClosedRange<UInt64> = 1_000...100_000  // bounds the work inside sshd
    public static let codeDigits = 12

    public var id: UInt64
    public var iterations: Int
    public var salt: [UInt8]
    public var hashes: [[UInt8]]

    public init(id: UInt64, iterations: Int, salt: [UInt8], hashes: [[UInt8]]) {
        self.id = id
        self.iterations = iterations
        self.salt = salt
        self.hashes = hashes
    }

    /// Generates `count` codes of `codeDigits` digits. Returns the codes (to show once) and the
    /// set to store. Digits come from `generator` by rejection sampling (no modulo bias).
    @_optimize(size)  // cold: not on a login's path
    public static func generate<G: RandomNumberGenerator>(count: Int = 10, iterations: Int = defaultIterations,
                                                          using generator: inout G) -> (codes: [[UInt8]], set: RecoverySet) {
        var salt: [UInt8] = []
        for _ in 0..<2 {
            var w = generator.next()
            for _ in 0..<8 { salt.append(UInt8(truncatingIfNeeded: w)); w >>= 8 }
        }
        var codes: [[UInt8]] = []
        var hashes: [[UInt8]] = []
        for _ in 0..<max(1, min(count, maxCodes)) {
            var code: [UInt8] = []
            while code.count < codeDigits {
                let byte = UInt8(truncatingIfNeeded: generator.next())
                if byte < 250 { code.append(ASCII.zero &+ byte % 10) }
            }
            codes.append(code)
            hashes.append(pbkdf2SHA256(password: code, salt: salt, iterations: iterations))
        }
        return (codes, RecoverySet(id: generator.next(), iterations: iterations, salt: salt, hashes: hashes))
    }

    /// A set holding `codes` (at most `maxCodes`; digits only): one random 16-byte salt,
    /// PBKDF2-HMAC-SHA-256 with `iterations`, a random non-zero set id (so the state's "used"
    /// bits start empty). For codes made elsewhere, e.g. google-authenticator's scratch codes.
    @_optimize(size)  // cold: not on a login's path
    public static func hashing<G: RandomNumberGenerator>(codes: [[UInt8]], iterations: Int = defaultIterations,
                                                         using generator: inout G) -> RecoverySet {
        var salt: [UInt8] = []
        for _ in 0..<2 {
            var w = generator.next()
            for _ in 0..<8 { salt.append(UInt8(truncatingIfNeeded: w)); w >>= 8 }
        }
        var hashes: [[UInt8]] = []
        for code in codes.prefix(maxCodes) { hashes.append(pbkdf2SHA256(password: code, salt: salt, iterations: iterations)) }
        var id: UInt64 = 0
        while id == 0 { id = generator.next() }
        return RecoverySet(id: id, iterations: iterations, salt: salt, hashes: hashes)
    }

    /// The digits of an answer that has the shape of a recovery code: 8–32 digits, with
    /// optional '-' or ' ' between groups (8 for scratch codes imported from
    /// google-authenticator; ours have 12). Nil for anything else. An 8-digit answer is tried
    /// as a TOTP code first and as a recovery code only if no factor matched.
    public static func normalize(_ answer: [UInt8]) -> [UInt8]? {
        // Fewer than 8 bytes can never hold 8 digits (an app's code): no allocation for it.
        guard answer.count >= 8 else { return nil }
        var digits: [UInt8] = []
        digits.reserveCapacity(answer.count)
        for c in answer {
            if c == 0x2D || c == ASCII.space { continue }
            guard ASCII.isDigit(c) else { return nil }
            digits.append(c)
        }
        return digits.count >= 8 && digits.count <= 32 ? digits : nil
    }

    /// A throwaway set with one code nobody can type (its hash is all zeros): checked instead
    /// of a user's set when there is none, so an answer costs the same either way. Computed,
    /// not a stored global (it would be allocated on every load of the module).
    package static var decoy: RecoverySet {
        RecoverySet(id: 0, iterations: defaultIterations, salt: [UInt8](repeating: 0, count: 16),
                    hashes: [[UInt8](repeating: 0, count: 32)])
    }

    /// True when `code` is one of this set's codes and already used (bits of `used`): an
    /// import of codes this set holds must not make used ones work again.
    public func isUsed(_ code: [UInt8], used: UInt32) -> Bool {
        let h = pbkdf2SHA256(password: code, salt: salt, iterations: iterations)
        var hit = false
        for (i, stored) in hashes.enumerated() where i < 32 && (used >> UInt32(i)) & 1 == 1 {
            if constantTimeEqual(h, stored) { hit = true }
        }
        return hit
    }

    /// The index of the unused code that `digits` matches, or nil. Computes the hash once and
    /// compares it with every stored hash in constant time.
    public func match(_ digits: [UInt8], used: UInt32) -> Int? {
        let h = pbkdf2SHA256(password: digits, salt: salt, iterations: iterations)
        var found: Int? = nil
        for (i, stored) in hashes.enumerated() {
            let isUsed = i < 32 && (used >> UInt32(i)) & 1 == 1
            if constantTimeEqual(h, stored) && !isUsed && found == nil { found = i }
        }
        return found
    }
}
