import MFASystem

// Hash algorithm selection and the Merkle–Damgård plumbing shared by SHA-1, SHA-256 and SHA-512.
//
// Everything here is Embedded-Swift compatible (no Foundation, no existentials, no untyped throws)
// and never traps: lengths use wrapping arithmetic and every buffer index is bounded by a fixed
// block size.

/// The hash functions usable for HOTP/TOTP (RFC 4226 / RFC 6238) and HMAC.
public enum HashAlgorithm: Sendable, Equatable, Hashable {
    case sha1, sha256, sha512

    /// Digest size in bytes: 20, 32, 64.
    public var digestLength: Int {
        switch self {
        case .sha1: return 20
        case .sha256: return 32
        case .sha512: return 64
        }
    }

    /// Compression block size in bytes: 64, 64, 128.
    public var blockLength: Int {
        switch self {
        case .sha1: return 64
        case .sha256: return 64
        case .sha512: return 128
        }
    }

    /// The digest of `message`.
    public func hash(_ message: [UInt8]) -> [UInt8] {
        switch self {
        case .sha1: return SHA1.hash(message)
        case .sha256: return SHA256.hash(message)
        case .sha512: return SHA512.hash(message)
        }
    }
}

/// The chaining state of one Merkle–Damgård hash function. Used only as a generic constraint
/// (specialised at compile time), never as a type.
///
/// A block is always sixteen big-endian words: 16 × 32 bits = 64 bytes for SHA-1/SHA-256,
/// 16 × 64 bits = 128 bytes for SHA-512, and the length field is always the last two words
/// (64 or 128 bits). Blocks live in `InlineArray`s on the stack: no heap, no closures.
/// (`withUnsafeTemporaryAllocation` is deliberately avoided: with Swift 6.3.1 at -O its
/// non-inlined body closure was called under a typed-throws convention it did not implement,
/// and a garbage error register sent execution into an unrelated function.)
protocol MDHashState: Sendable {
    associatedtype Word: FixedWidthInteger & UnsignedInteger & BitwiseCopyable
    /// The standard initial hash value.
    static var initial: Self { get }
    /// Compresses one block. `block` is used as the message schedule and is overwritten.
    mutating func compress(_ block: inout InlineArray<16, Word>)
    /// Number of state words that form the digest: 5 for SHA-1, 8 for SHA-256/512.
    static var digestWords: Int { get }
    /// Writes the digest words into `block[0 ..< digestWords]`, leaving the rest untouched.
    func storeDigest(_ block: inout InlineArray<16, Word>)
}

extension MDHashState {
    /// Bytes per word: 4 or 8.
    @inline(__always)
    static var wordBytes: Int { Word.bitWidth &>> 3 }

    /// Block size in bytes: 64 or 128.
    @inline(__always)
    static var blockBytes: Int { 16 &* wordBytes }

    /// Reads one block of `blockBytes` bytes at `p` as big-endian words.
    @inline(__always)
    static func loadBlock(_ p: UnsafePointer<UInt8>) -> InlineArray<16, Word> {
        var block = InlineArray<16, Word>(repeating: 0)
        let raw = UnsafeRawPointer(p)
        for i in 0..<16 {
            block[i] = Word(bigEndian: raw.loadUnaligned(fromByteOffset: i &* wordBytes, as: Word.self))
        }
        return block
    }

    /// ORs `byte` into byte position `index` (0 ..< blockBytes) of a big-endian block.
    @inline(__always)
    static func setByte(_ block: inout InlineArray<16, Word>, _ index: Int, _ byte: UInt8) {
        let word = (index / wordBytes) & 15
        let shift = (wordBytes &- 1 &- (index % wordBytes)) &* 8
        block[unchecked: word] |= Word(byte) &<< shift  // word is masked to 0...15
    }

    /// Hashes `message` starting from `self`, where `prefixBytes` bytes (whole blocks) have already
    /// been compressed into `self`; pads with the total length and returns the digest.
    func finish(_ message: UnsafeBufferPointer<UInt8>, prefixBytes: Int) -> [UInt8] {
        finalState(message, prefixBytes: prefixBytes).digest()
    }

    /// The state after hashing `message` (continuing after `prefixBytes` already-compressed
    /// bytes) including the final padding: its words are the digest.
    @_optimize(speed)
    func finalState(_ message: UnsafeBufferPointer<UInt8>, prefixBytes: Int) -> Self {
        var state = self
        let blockBytes = Self.blockBytes
        let count = message.count
        let fullBlocks = count / blockBytes
        let tailStart = fullBlocks &* blockBytes
        let tail = count &- tailStart  // 0 ..< blockBytes

        var block = InlineArray<16, Word>(repeating: 0)
        if let base = message.baseAddress {
            var offset = 0
            for _ in 0..<fullBlocks {
                block = Self.loadBlock(base + offset)
                state.compress(&block)
                offset = offset &+ blockBytes
            }
            for i in 0..<16 { block[i] = 0 }
            for i in 0..<tail {
                Self.setByte(&block, i, base[tailStart &+ i])
            }
        } else {
            for i in 0..<16 { block[i] = 0 }
        }
        Self.setByte(&block, tail, 0x80)

        // The message length in bits, as two words: 64 bits for SHA-1/256, 128 bits for SHA-512
        // (whose high word is `bytes >> 61`). Wrapping arithmetic: lengths are taken modulo 2^64
        // bytes, which no real message reaches.
        let totalBytes = UInt64(truncatingIfNeeded: prefixBytes) &+ UInt64(truncatingIfNeeded: count)
        let bitsLow = totalBytes &<< 3
        let lengthHigh: Word
        let lengthLow: Word
        if Word.bitWidth >= 64 {
            lengthHigh = Word(truncatingIfNeeded: totalBytes &>> 61)
            lengthLow = Word(truncatingIfNeeded: bitsLow)
        } else {
            lengthHigh = Word(truncatingIfNeeded: bitsLow &>> 32)
            lengthLow = Word(truncatingIfNeeded: bitsLow)
        }

        // The 0x80 byte and the two length words must fit after the tail; otherwise one more block.
        if tail < 14 &* Self.wordBytes {
            block[14] = lengthHigh
            block[15] = lengthLow
            state.compress(&block)
        } else {
            state.compress(&block)
            for i in 0..<14 { block[i] = 0 }
            block[14] = lengthHigh
            block[15] = lengthLow
            state.compress(&block)
        }
        return state
    }

    /// Hashes the digest of `digestState` starting from `self`, after one compressed block:
    /// the outer hash of HMAC. The digest (at most 8 words) always fits in one padded block, so
    /// this is a single compression, with no byte conversion and no allocation but the result.
    func finishWithDigest(of digestState: Self) -> [UInt8] {
        finishedState(of: digestState).digest()
    }

    /// The outer state of an HMAC after it absorbed the inner digest: its words are the MAC.
    @_optimize(speed)
    func finishedState(of digestState: Self) -> Self {
        var state = self
        var block = InlineArray<16, Word>(repeating: 0)
        digestState.storeDigest(&block)
        let digestBytes = Self.digestWords &* Self.wordBytes
        Self.setByte(&block, digestBytes, 0x80)
        let bits = UInt64(truncatingIfNeeded: Self.blockBytes &+ digestBytes) &<< 3
        if Word.bitWidth < 64 {
            block[14] = Word(truncatingIfNeeded: bits &>> 32)
        }
        block[15] = Word(truncatingIfNeeded: bits)
        state.compress(&block)
        return state
    }

    /// RFC 4226 dynamic truncation of the digest in this state's words, without building the
    /// digest as an array (HOTP runs it 11 times per login): the low nibble of the last byte
    /// picks four bytes, of which the low 31 bits are the value.
    @_optimize(speed)
    func dynamicTruncation() -> UInt32 {
        var words = InlineArray<16, Word>(repeating: 0)
        storeDigest(&words)
        let wordBytes = Self.wordBytes
        let count = Self.digestWords &* wordBytes  // 20, 32 or 64
        @inline(__always) func byte(_ i: Int) -> UInt32 {
            let shift = (wordBytes &- 1 &- (i % wordBytes)) &* 8
            return UInt32(truncatingIfNeeded: words[(i / wordBytes) & 15] &>> shift) & 0xFF
        }
        let offset = Int(byte(count &- 1) & 0x0F)  // at most 15: offset + 3 < count
        return (byte(offset) & 0x7F) << 24 | byte(offset &+ 1) << 16 | byte(offset &+ 2) << 8 | byte(offset &+ 3)
    }

    /// The digest bytes (big-endian state words).
    func digest() -> [UInt8] {
        var words = InlineArray<16, Word>(repeating: 0)
        storeDigest(&words)
        let count = Self.digestWords &* Self.wordBytes
        var out = [UInt8](repeating: 0, count: count)
        for i in 0..<count {
            let shift = (Self.wordBytes &- 1 &- (i % Self.wordBytes)) &* 8
            out[i] = UInt8(truncatingIfNeeded: words[(i / Self.wordBytes) & 15] &>> shift)
        }
        return out
    }

    /// Hashes a whole message from the initial state.
    static func oneShot(_ message: [UInt8]) -> [UInt8] {
        message.withUnsafeBufferPointer { Self.initial.finish($0, prefixBytes: 0) }
    }
}

// MARK: - Byte helpers

@inline(__always)
func hashRotateLeft(_ x: UInt32, _ n: UInt32) -> UInt32 { (x &<< n) | (x &>> (32 &- n)) }

