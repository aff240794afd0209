import MFASystem

// SHA-256 and SHA-512 (FIPS 180-4 §6.2, §6.4).

/// The 32-byte SHA-256 digest of a message.
public enum SHA256 { public static func hash(_ message: [UInt8]) -> [UInt8] { SHA256State.oneShot(message) } }

/// The 64-byte SHA-512 digest of a message.
public enum SHA512 { public static func hash(_ message: [UInt8]) -> [UInt8] { SHA512State.oneShot(message) } }

/// SHA-512 round constants (FIPS 180-4 §4.2.3): the first 64 bits of the fractional parts of the
/// cube roots of the first 80 primes. SHA-256's (§4.2.2) are the first 32 bits of the first 64.
let sha512RoundConstants: InlineArray<80, UInt64> = [
    0x428A_2F98_D728_AE22, 0x7137_4491_23EF_65CD, 0xB5C0_FBCF_EC4D_3B2F, 0xE9B5_DBA5_8189_DBBC,
    0x3956_C25B_F348_B538, 0x59F1_11F1_B605_D019, 0x923F_82A4_AF19_4F9B, 0xAB1C_5ED5_DA6D_8118,
    0xD807_AA98_A303_0242, 0x1283_5B01_4570_6FBE, 0x2431_85BE_4EE4_B28C, 0x550C_7DC3_D5FF_B4E2,
    0x72BE_5D74_F27B_896F, 0x80DE_B1FE_3B16_96B1, 0x9BDC_06A7_25C7_1235, 0xC19B_F174_CF69_2694,
    0xE49B_69C1_9EF1_4AD2, 0xEFBE_4786_384F_25E3, 0x0FC1_9DC6_8B8C_D5B5, 0x240C_A1CC_77AC_9C65,
    0x2DE9_2C6F_592B_0275, 0x4A74_84AA_6EA6_E483, 0x5CB0_A9DC_BD41_FBD4, 0x76F9_88DA_8311_53B5,
    0x983E_5152_EE66_DFAB, 0xA831_C66D_2DB4_3210, 0xB003_27C8_98FB_213F, 0xBF59_7FC7_BEEF_0EE4,
    0xC6E0_0BF3_3DA8_8FC2, 0xD5A7_9147_930A_A725, 0x06CA_6351_E003_826F, 0x1429_2967_0A0E_6E70,
    0x27B7_0A85_46D2_2FFC, 0x2E1B_2138_5C26_C926, 0x4D2C_6DFC_5AC4_2AED, 0x5338_0D13_9D95_B3DF,
    0x650A_7354_8BAF_63DE, 0x766A_0ABB_3C77_B2A8, 0x81C2_C92E_47ED_AEE6, 0x9272_2C85_1482_353B,
    0xA2BF_E8A1_4CF1_0364, 0xA81A_664B_BC42_3001, 0xC24B_8B70_D0F8_9791, 0xC76C_51A3_0654_BE30,
    0xD192_E819_D6EF_5218, 0xD699_0624_5565_A910, 0xF40E_3585_5771_202A, 0x106A_A070_32BB_D1B8,
    0x19A4_C116_B8D2_D0C8, 0x1E37_6C08_5141_AB53, 0x2748_774C_DF8E_EB99, 0x34B0_BCB5_E19B_48A8,
    0x391C_0CB3_C5C9_5A63, 0x4ED8_AA4A_E341_8ACB, 0x5B9C_CA4F_7763_E373, 0x682E_6FF3_D6B2_B8A3,
    0x748F_82EE_5DEF_B2FC, 0x78A5_636F_4317_2F60, 0x84C8_7814_A1F0_AB72, 0x8CC7_0208_1A64_39EC,
    0x90BE_FFFA_2363_1E28, 0xA450_6CEB_DE82_BDE9, 0xBEF9_A3F7_B2C6_7915, 0xC671_78F2_E372_532B,
    0xCA27_3ECE_EA26_619C, 0xD186_B8C7_21C0_C207, 0xEADA_7DD6_CDE0_EB1E, 0xF57D_4F7F_EE6E_D178,
    0x06F0_67AA_7217_6FBA, 0x0A63_7DC5_A2C8_98A6, 0x113F_9804_BEF9_0DAE, 0x1B71_0B35_131C_471B,
    0x28DB_77F5_2304_7D84, 0x32CA_AB7B_40C7_2493, 0x3C9E_BE0A_15C9_BEBC, 0x431D_67C4_9C10_0D4C,
    0x4CC5_D4BE_CB3E_42B6, 0x597F_299C_FC65_7E2A, 0x5FCB_6FAB_3AD6_FAEC, 0x6C44_198C_4A47_5817,
]

/// What tells SHA-256 from SHA-512 (FIPS 180-4 §4.1.2–4.1.3, §5.3): the word, the rounds and
/// their constants, the initial value and the rotation and shift amounts. `SHA2State` is the
/// one compression function; each use is specialised for its variant at compile time.
protocol SHA2Variant: Sendable {
    associatedtype Word: FixedWidthInteger & UnsignedInteger & BitwiseCopyable & Sendable
    static var rounds: Int { get }
    static func constant(_ t: Int) -> Word
    static var initial: InlineArray<8, Word> { get }
    /// Σ0, Σ1 (three rotations each), σ0, σ1 (two rotations and a shift each).
    static var bigSigma0: (Word, Word, Word) { get }
    static var bigSigma1: (Word, Word, Word) { get }
    static var smallSigma0: (Word, Word, Word) { get }
    static var smallSigma1: (Word, Word, Word) { get }
}

enum SHA256Variant: SHA2Variant {
    static var rounds: Int { 64 }
    @inline(__always) static func constant(_ t: Int) -> UInt32 { UInt32(truncatingIfNeeded: sha512RoundConstants[t] &>> 32) }
    /// The first 32 bits of SHA-512's (both are the square roots of the first 8 primes, §5.3.3).
    static var initial: InlineArray<8, UInt32> {
        let wide = SHA512Variant.initial
        var out = InlineArray<8, UInt32>(repeating: 0)
        for i in 0..<8 { out[unchecked: i] = UInt32(truncatingIfNeeded: wide[unchecked: i] &>> 32) }
        return out
    }
    static var bigSigma0: (UInt32, UInt32, UInt32) { (2, 13, 22) }
    static var bigSigma1: (UInt32, UInt32, UInt32) { (6, 11, 25) }
    static var smallSigma0: (UInt32, UInt32, UInt32) { (7, 18, 3) }
    static var smallSigma1: (UInt32, UInt32, UInt32) { (17, 19, 10) }
}

enum SHA512Variant: SHA2Variant {
    static var rounds: Int { 80 }
    @inline(__always) static func constant(_ t: Int) -> UInt64 { sha512RoundConstants[t] }
    static var initial: InlineArray<8, UInt64> {
        [0x6A09_E667_F3BC_C908, 0xBB67_AE85_84CA_A73B, 0x3C6E_F372_FE94_F82B, 0xA54F_F53A_5F1D_36F1,
         0x510E_527F_ADE6_82D1, 0x9B05_688C_2B3E_6C1F, 0x1F83_D9AB_FB41_BD6B, 0x5BE0_CD19_137E_2179]
    }
    static var bigSigma0: (UInt64, UInt64, UInt64) { (28, 34, 39) }
    static var bigSigma1: (UInt64, UInt64, UInt64) { (14, 18, 41) }
    static var smallSigma0: (UInt64, UInt64, UInt64) { (1, 8, 7) }
    static var smallSigma1: (UInt64, UInt64, UInt64) { (19, 61, 6) }
}

typealias SHA256State = SHA2State<SHA256Variant>
typealias SHA512State = SHA2State<SHA512Variant>

/// SHA-256/SHA-512 chaining state: eight words.
struct SHA2State<V: SHA2Variant>: MDHashState {
    typealias Word = V.Word
    var h: InlineArray<8, Word>

    static var initial: Self { Self(h: V.initial) }

    @inline(__always)
    static func rotr(_ x: Word, _ n: Word) -> Word { (x &>> n) | (x &<< (Word(Word.bitWidth) &- n)) }

    // Specialised here for both variants: a caller in another file that is compiled without
    // whole-module optimisation (the debug build the tests use) jumps to these, not to
    // generic code.
    @_specialize(where V == SHA256Variant)
    @_specialize(where V == SHA512Variant)
    @_optimize(speed)
    mutating func compress(_ w: inout InlineArray<16, Word>) {
        var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], h = self.h[7]

        // W[t]: the block words for t < 16, then the rolling in-place schedule
        // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16], indices mod 16.
        @inline(__always)
        func word(_ t: Int, _ expand: Bool) -> Word {
            if !expand { return w[unchecked: t & 15] }
            let w15 = w[unchecked: (t &+ 1) & 15], w2 = w[unchecked: (t &+ 14) & 15]
            let (r0, r1, s0) = V.smallSigma0, (q0, q1, s1) = V.smallSigma1
            let v = w[unchecked: t & 15] &+ (Self.rotr(w15, r0) ^ Self.rotr(w15, r1) ^ (w15 &>> s0)) &+ w[unchecked: (t &+ 9) & 15]
                &+ (Self.rotr(w2, q0) ^ Self.rotr(w2, q1) ^ (w2 &>> s1))
            w[unchecked: t & 15] = v
            return v
        }

        // One round with the variables renamed instead of shifted:
        // T1 = h + Σ1(e) + Ch(e,f,g) + K[t] + W[t]; d += T1; h = T1 + Σ0(a) + Maj(a,b,c).
        @inline(__always)
        func round(_ a: Word, _ b: Word, _ c: Word, _ d: inout Word,
                   _ e: Word, _ f: Word, _ g: Word, _ h: inout Word, _ t: Int, _ expand: Bool) {
            let (e0, e1, e2) = V.bigSigma1, (a0, a1, a2) = V.bigSigma0
            let t1 = h &+ (Self.rotr(e, e0) ^ Self.rotr(e, e1) ^ Self.rotr(e, e2)) &+ (g ^ (e & (f ^ g))) &+ V.constant(t) &+ word(t, expand)
            d = d &+ t1
            h = t1 &+ (Self.rotr(a, a0) ^ Self.rotr(a, a1) ^ Self.rotr(a, a2)) &+ ((a & b) | (c & (a | b)))
        }

        @inline(__always)
        func eightRounds(_ t: Int, _ expand: Bool) {
            round(a, b, c, &d, e, f, g, &h, t, expand)
            round(h, a, b, &c, d, e, f, &g, t &+ 1, expand)
            round(g, h, a, &b, c, d, e, &f, t &+ 2, expand)
            round(f, g, h, &a, b, c, d, &e, t &+ 3, expand)
            round(e, f, g, &h, a, b, c, &d, t &+ 4, expand)
            round(d, e, f, &g, h, a, b, &c, t &+ 5, expand)
            round(c, d, e, &f, g, h, a, &b, t &+ 6, expand)
            round(b, c, d, &e, f, g, h, &a, t &+ 7, expand)
        }

        eightRounds(0, false)
        eightRounds(8, false)
        var t = 16
        while t < V.rounds {
            eightRounds(t, true)
            t = t &+ 8
        }

        let sums: InlineArray<8, Word> = [a, b, c, d, e, f, g, h]
        for i in 0..<8 { self.h[unchecked: i] = self.h[unchecked: i] &+ sums[unchecked: i] }
    }

    static var digestWords: Int { 8 }

    func storeDigest(_ block: inout InlineArray<16, Word>) {
        for i in 0..<8 { block[unchecked: i] = h[unchecked: i] }
    }
}
