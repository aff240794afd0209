// SHA-256 and SHA-512 (FIPS 180-4 §6.2, §6.4).

public enum SHA256 {
    /// The 32-byte SHA-256 digest of `message`.
    public static func hash(_ message: [UInt8]) -> [UInt8] {
        SHA256State.oneShot(message)
    }
}

public enum SHA512 {
    /// The 64-byte SHA-512 digest of `message`.
    public static func hash(_ message: [UInt8]) -> [UInt8] {
        SHA512State.oneShot(message)
    }
}

/// SHA-256 round constants (FIPS 180-4 §4.2.2).
let sha256RoundConstants: InlineArray<64, UInt32> = [
    0x428A_2F98, 0x7137_4491, 0xB5C0_FBCF, 0xE9B5_DBA5,
    0x3956_C25B, 0x59F1_11F1, 0x923F_82A4, 0xAB1C_5ED5,
    0xD807_AA98, 0x1283_5B01, 0x2431_85BE, 0x550C_7DC3,
    0x72BE_5D74, 0x80DE_B1FE, 0x9BDC_06A7, 0xC19B_F174,
    0xE49B_69C1, 0xEFBE_4786, 0x0FC1_9DC6, 0x240C_A1CC,
    0x2DE9_2C6F, 0x4A74_84AA, 0x5CB0_A9DC, 0x76F9_88DA,
    0x983E_5152, 0xA831_C66D, 0xB003_27C8, 0xBF59_7FC7,
    0xC6E0_0BF3, 0xD5A7_9147, 0x06CA_6351, 0x1429_2967,
    0x27B7_0A85, 0x2E1B_2138, 0x4D2C_6DFC, 0x5338_0D13,
    0x650A_7354, 0x766A_0ABB, 0x81C2_C92E, 0x9272_2C85,
    0xA2BF_E8A1, 0xA81A_664B, 0xC24B_8B70, 0xC76C_51A3,
    0xD192_E819, 0xD699_0624, 0xF40E_3585, 0x106A_A070,
    0x19A4_C116, 0x1E37_6C08, 0x2748_774C, 0x34B0_BCB5,
    0x391C_0CB3, 0x4ED8_AA4A, 0x5B9C_CA4F, 0x682E_6FF3,
    0x748F_82EE, 0x78A5_636F, 0x84C8_7814, 0x8CC7_0208,
    0x90BE_FFFA, 0xA450_6CEB, 0xBEF9_A3F7, 0xC671_78F2,
]

/// SHA-512 round constants (FIPS 180-4 §4.2.3).
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

/// SHA-256 chaining state: eight 32-bit words.
struct SHA256State: MDHashState {
    typealias Word = UInt32
    var h0: UInt32
    var h1: UInt32
    var h2: UInt32
    var h3: UInt32
    var h4: UInt32
    var h5: UInt32
    var h6: UInt32
    var h7: UInt32

    static var initial: SHA256State {
        SHA256State(
            h0: 0x6A09_E667, h1: 0xBB67_AE85, h2: 0x3C6E_F372, h3: 0xA54F_F53A,
            h4: 0x510E_527F, h5: 0x9B05_688C, h6: 0x1F83_D9AB, h7: 0x5BE0_CD19)
    }

    @_optimize(speed)
    mutating func compress(_ w: inout InlineArray<16, UInt32>) {
        var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7

        // W[t]: the block words for t < 16, then the rolling in-place schedule
        // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16], indices mod 16.
        @inline(__always)
        func word(_ t: Int, _ expand: Bool) -> UInt32 {
            if !expand { return w[unchecked: t & 15] }
            let w15 = w[unchecked: (t &+ 1) & 15], w2 = w[unchecked: (t &+ 14) & 15]
            let v = w[unchecked: t & 15] &+ (hashRotateRight(w15, 7) ^ hashRotateRight(w15, 18) ^ (w15 &>> 3)) &+ w[unchecked: (t &+ 9) & 15] &+ (hashRotateRight(w2, 17) ^ hashRotateRight(w2, 19) ^ (w2 &>> 10))
            w[unchecked: t & 15] = v
            return v
        }

        // One round with the variables renamed instead of shifted:
        // T1 = h + Σ1(e) + Ch(e,f,g) + K[t] + W[t]; d += T1; h = T1 + Σ0(a) + Maj(a,b,c).
        @inline(__always)
        func round(
            _ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: inout UInt32,
            _ e: UInt32, _ f: UInt32, _ g: UInt32, _ h: inout UInt32, _ t: Int, _ expand: Bool
        ) {
            let t1 = h &+ (hashRotateRight(e, 6) ^ hashRotateRight(e, 11) ^ hashRotateRight(e, 25)) &+ (g ^ (e & (f ^ g))) &+ sha256RoundConstants[t] &+ word(t, expand)
            d = d &+ t1
            h = t1 &+ (hashRotateRight(a, 2) ^ hashRotateRight(a, 13) ^ hashRotateRight(a, 22)) &+ ((a & b) | (c & (a | b)))
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
        while t < 64 {
            eightRounds(t, true)
            t = t &+ 8
        }

        h0 = h0 &+ a
        h1 = h1 &+ b
        h2 = h2 &+ c
        h3 = h3 &+ d
        h4 = h4 &+ e
        h5 = h5 &+ f
        h6 = h6 &+ g
        h7 = h7 &+ h
    }

    static var digestWords: Int { 8 }

    func storeDigest(_ block: inout InlineArray<16, UInt32>) {
        block[0] = h0
        block[1] = h1
        block[2] = h2
        block[3] = h3
        block[4] = h4
        block[5] = h5
        block[6] = h6
        block[7] = h7
    }
}

/// SHA-512 chaining state: eight 64-bit words.
struct SHA512State: MDHashState {
    typealias Word = UInt64
    var h0: UInt64
    var h1: UInt64
    var h2: UInt64
    var h3: UInt64
    var h4: UInt64
    var h5: UInt64
    var h6: UInt64
    var h7: UInt64

    static var initial: SHA512State {
        SHA512State(
            h0: 0x6A09_E667_F3BC_C908, h1: 0xBB67_AE85_84CA_A73B,
            h2: 0x3C6E_F372_FE94_F82B, h3: 0xA54F_F53A_5F1D_36F1,
            h4: 0x510E_527F_ADE6_82D1, h5: 0x9B05_688C_2B3E_6C1F,
            h6: 0x1F83_D9AB_FB41_BD6B, h7: 0x5BE0_CD19_137E_2179)
    }

    @_optimize(speed)
    mutating func compress(_ w: inout InlineArray<16, UInt64>) {
        var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7

        // W[t]: the block words for t < 16, then the rolling in-place schedule
        // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16], indices mod 16.
        @inline(__always)
        func word(_ t: Int, _ expand: Bool) -> UInt64 {
            if !expand { return w[unchecked: t & 15] }
            let w15 = w[unchecked: (t &+ 1) & 15], w2 = w[unchecked: (t &+ 14) & 15]
            let v = w[unchecked: t & 15] &+ (hashRotateRight(w15, 1) ^ hashRotateRight(w15, 8) ^ (w15 &>> 7)) &+ w[unchecked: (t &+ 9) & 15] &+ (hashRotateRight(w2, 19) ^ hashRotateRight(w2, 61) ^ (w2 &>> 6))
            w[unchecked: t & 15] = v
            return v
        }

        // One round with the variables renamed instead of shifted:
        // T1 = h + Σ1(e) + Ch(e,f,g) + K[t] + W[t]; d += T1; h = T1 + Σ0(a) + Maj(a,b,c).
        @inline(__always)
        func round(
            _ a: UInt64, _ b: UInt64, _ c: UInt64, _ d: inout UInt64,
            _ e: UInt64, _ f: UInt64, _ g: UInt64, _ h: inout UInt64, _ t: Int, _ expand: Bool
        ) {
            let t1 = h &+ (hashRotateRight(e, 14) ^ hashRotateRight(e, 18) ^ hashRotateRight(e, 41)) &+ (g ^ (e & (f ^ g))) &+ sha512RoundConstants[t] &+ word(t, expand)
            d = d &+ t1
            h = t1 &+ (hashRotateRight(a, 28) ^ hashRotateRight(a, 34) ^ hashRotateRight(a, 39)) &+ ((a & b) | (c & (a | b)))
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
        while t < 80 {
            eightRounds(t, true)
            t = t &+ 8
        }

        h0 = h0 &+ a
        h1 = h1 &+ b
        h2 = h2 &+ c
        h3 = h3 &+ d
        h4 = h4 &+ e
        h5 = h5 &+ f
        h6 = h6 &+ g
        h7 = h7 &+ h
    }

    static var digestWords: Int { 8 }

    func storeDigest(_ block: inout InlineArray<16, UInt64>) {
        block[0] = h0
        block[1] = h1
        block[2] = h2
        block[3] = h3
        block[4] = h4
        block[5] = h5
        block[6] = h6
        block[7] = h7
    }
}
