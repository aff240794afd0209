import MFASystem

// HMAC (RFC 2104) over SHA-1, SHA-256 and SHA-512.
//
// The key's inner (key ^ ipad) and outer (key ^ opad) blocks are compressed once in `init`, and
// only the resulting chaining states are kept, so each `authenticate` costs just the compressions
// of the message and of the inner digest (two for an 8-byte message with SHA-1/256), and the raw
// key is not retained.

/// An HMAC key with its pad states precomputed.
public struct HMACKey: Sendable {
    /// The hash function this key authenticates with.
    public let algorithm: HashAlgorithm
    private let pads: Pads

    private enum Pads: Sendable {
        case sha1(inner: SHA1State, outer: SHA1State)
        case sha256(inner: SHA256State, outer: SHA256State)
        case sha512(inner: SHA512State, outer: SHA512State)
    }

    /// Prepares `key` for `algorithm`. Keys longer than the block length are hashed first.
    public init(algorithm: HashAlgorithm, key: [UInt8]) {
        self.algorithm = algorithm
        switch algorithm {
        case .sha1:
            let (inner, outer) = hmacPadStates(SHA1State.self, key: key)
            pads = .sha1(inner: inner, outer: outer)
        case .sha256:
            let (inner, outer) = hmacPadStates(SHA256State.self, key: key)
            pads = .sha256(inner: inner, outer: outer)
        case .sha512:
            let (inner, outer) = hmacPadStates(SHA512State.self, key: key)
            pads = .sha512(inner: inner, outer: outer)
        }
    }

    /// HMAC(key, message); `algorithm.digestLength` bytes.
    public func authenticate(_ message: [UInt8]) -> [UInt8] {
        message.withUnsafeBufferPointer { authenticate(bytes: $0) }
    }

    /// HMAC(key, the counter as 8 big-endian bytes), as HOTP needs, without building an array.
    public func authenticate(counter: UInt64) -> [UInt8] {
        withUnsafeBytes(of: counter.bigEndian) { raw in
            raw.withMemoryRebound(to: UInt8.self) { authenticate(bytes: $0) }
        }
    }

    /// RFC 4226's dynamic truncation of HMAC(key, counter), without building the MAC.
    @_optimize(speed)
    public func truncatedHOTP(counter: UInt64) -> UInt32 {
        withUnsafeBytes(of: counter.bigEndian) { raw in
            raw.withMemoryRebound(to: UInt8.self) { message -> UInt32 in
                switch pads {
                case .sha1(let inner, let outer):
                    return outer.finishedState(of: inner.finalState(message, prefixBytes: SHA1State.blockBytes)).dynamicTruncation()
                case .sha256(let inner, let outer):
                    return outer.finishedState(of: inner.finalState(message, prefixBytes: SHA256State.blockBytes)).dynamicTruncation()
                case .sha512(let inner, let outer):
                    return outer.finishedState(of: inner.finalState(message, prefixBytes: SHA512State.blockBytes)).dynamicTruncation()
                }
            }
        }
    }

    @_optimize(speed)
    func authenticate(bytes message: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        switch pads {
        case .sha1(let inner, let outer):
            return hmacFinish(inner: inner, outer: outer, message: message)
        case .sha256(let inner, let outer):
            return hmacFinish(inner: inner, outer: outer, message: message)
        case .sha512(let inner, let outer):
            return hmacFinish(inner: inner, outer: outer, message: message)
        }
    }
}

/// One-shot HMAC(key, message) with `algorithm`.
public func hmac(_ algorithm: HashAlgorithm, key: [UInt8], message: [UInt8]) -> [UInt8] {
    HMACKey(algorithm: algorithm, key: key).authenticate(message)
}

/// The chaining states after compressing the block-sized (key ^ ipad) and (key ^ opad).
@_optimize(speed)
private func hmacPadStates<S: MDHashState>(_: S.Type, key: [UInt8]) -> (inner: S, outer: S) {
    var inner = S.initial
    var outer = S.initial
    let blockBytes = S.blockBytes

    // The effective key is at most one block long: the key itself, or the hash of a longer key
    // (20–64 bytes). It is zero-padded to a block of big-endian words.
    var effectiveKey = key.count > blockBytes ? S.oneShot(key) : key
    var keyBlock = InlineArray<16, S.Word>(repeating: 0)
    effectiveKey.withUnsafeBufferPointer { bytes in
        guard let base = bytes.baseAddress else { return }
        for i in 0..<min(bytes.count, blockBytes) {
            S.setByte(&keyBlock, i, base[i])
        }
    }
    // Best-effort wiping of the key copies below (the optimizer may drop dead stores; only the
    // pad states, from which the key cannot be recovered, are kept).
    if key.count > blockBytes {
        for i in 0..<effectiveKey.count { effectiveKey[i] = 0 }
    }

    let ipad = S.Word(truncatingIfNeeded: 0x3636_3636_3636_3636 as UInt64)
    let opad = S.Word(truncatingIfNeeded: 0x5C5C_5C5C_5C5C_5C5C as UInt64)
    var block = keyBlock
    for i in 0..<16 { block[i] ^= ipad }
    inner.compress(&block)
    block = keyBlock
    for i in 0..<16 { block[i] ^= opad }
    outer.compress(&block)
    for i in 0..<16 {
        block[i] = 0
        keyBlock[i] = 0
    }
    return (inner, outer)
}

/// H(opad-state || H(ipad-state || message)), each continuing after one compressed pad block.
private func hmacFinish<S: MDHashState>(inner: S, outer: S, message: UnsafeBufferPointer<UInt8>) -> [UInt8] {
    outer.finishWithDigest(of: inner.finalState(message, prefixBytes: S.blockBytes))
}
