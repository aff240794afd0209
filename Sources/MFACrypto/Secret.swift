import MFASystem

/// Secret generation. The key length follows RFC 6238's advice of one digest length:
/// 160 bits for SHA-1, 256 for SHA-256, 512 for SHA-512.
public enum Secret {
    /// Fills a new key from `generator`; pass `SystemRandomNumberGenerator` (getrandom(2)) in
    /// production and a seeded generator in tests.
    @_optimize(size)  // cold: not on a login's path
    public static func generate<G: RandomNumberGenerator>(for algorithm: HashAlgorithm,
                                                          using generator: inout G) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(algorithm.recommendedSecretLength)
        while out.count < algorithm.recommendedSecretLength {
            var word = generator.next()
            for _ in 0..<8 where out.count < algorithm.recommendedSecretLength {
                out.append(UInt8(truncatingIfNeeded: word))
                word >>= 8
            }
        }
        return out
    }

    public static func generate(for algorithm: HashAlgorithm) -> [UInt8] {
        var rng = SystemRandomNumberGenerator()
        return generate(for: algorithm, using: &rng)
    }
}
