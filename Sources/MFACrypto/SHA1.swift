import MFASystem

// SHA-1 (FIPS 180-4 §6.1). Needed because RFC 6238 TOTP defaults to HMAC-SHA-1 and every
// authenticator app supports it; HMAC-SHA-1 remains sound as a PRF even though SHA-1 collisions
// are practical.

public enum SHA1 {
    /// The 20-byte SHA-1 digest of `message`.
    public static func hash(_ message: [UInt8]) -> [UInt8] {
        SHA1State.oneShot(message)
    }
}

/// SHA-1 chaining state: five 32-bit words.
struct SHA1State: MDHashState {
    typealias Word = UInt32
    var h0: UInt32
    var h1: UInt32
    var h2: UInt32
    var h3: UInt32
    var h4: UInt32

    static var initial: SHA1State {
        SHA1State(h0: 0x6745_2301, h1: 0xEFCD_AB89, h2: 0x98BA_DCFE, h3: 0x1032_5476, h4: 0xC3D2_E1F0)
    }
    @_optimize(speed)
    // function-length: exempt (a hash's unrolled compression: 80 rounds written out)
    mutating func compress(_ w: inout InlineArray<16, UInt32>) {
        var a = h0, b = h1, c = h2, d = h3, e = h4

        // W[t]: the block words for t < 16, then the rolling in-place schedule
        // W[t] = ROTL1(W[t-3] ^ W[t-8] ^ W[t-14] ^ W[t-16]), indices mod 16.
        @inline(__always)
        func word(_ t: Int, _ expand: Bool) -> UInt32 {
            if !expand { return w[unchecked: t & 15] }
            let v = hashRotateLeft(
                w[unchecked: (t &+ 13) & 15] ^ w[unchecked: (t &+ 8) & 15] ^ w[unchecked: (t &+ 2) & 15] ^ w[unchecked: t & 15], 1)
            w[unchecked: t & 15] = v
            return v
        }

        // One round with the variables renamed instead of shifted: e += ROTL5(a) + f(b,c,d) + K + W;
        // b = ROTL30(b). `phase` (0–3, constant after inlining) selects f and K.
        @inline(__always)
        func round(
            _ a: UInt32, _ b: inout UInt32, _ c: UInt32, _ d: UInt32, _ e: inout UInt32,
            _ t: Int, _ phase: Int, _ expand: Bool
        ) {
            let f: UInt32
            let k: UInt32
            switch phase {
            case 0: f = d ^ (b & (c ^ d)); k = 0x5A82_7999        // Ch
            case 1: f = b ^ c ^ d; k = 0x6ED9_EBA1                // Parity
            case 2: f = (b & c) | (d & (b | c)); k = 0x8F1B_BCDC  // Maj
            default: f = b ^ c ^ d; k = 0xCA62_C1D6               // Parity
            }
            e = e &+ hashRotateLeft(a, 5) &+ f &+ k &+ word(t, expand)
            b = hashRotateLeft(b, 30)
        }

        @inline(__always)
        func fiveRounds(_ t: Int, _ phase: Int, _ expand: Bool) {
            round(a, &b, c, d, &e, t, phase, expand)
            round(e, &a, b, c, &d, t &+ 1, phase, expand)
            round(d, &e, a, b, &c, t &+ 2, phase, expand)
            round(c, &d, e, a, &b, t &+ 3, phase, expand)
            round(b, &c, d, e, &a, t &+ 4, phase, expand)
        }

        fiveRounds(0, 0, false)
        fiveRounds(5, 0, false)
        fiveRounds(10, 0, false)
        // Round 15 uses W[15]; rounds 16-19 expand the schedule.
        round(a, &b, c, d, &e, 15, 0, false)
        round(e, &a, b, c, &d, 16, 0, true)
        round(d, &e, a, b, &c, 17, 0, true)
        round(c, &d, e, a, &b, 18, 0, true)
        round(b, &c, d, e, &a, 19, 0, true)
        // Written out so every index is a constant after inlining (no loop, no bounds checks).
        fiveRounds(20, 1, true); fiveRounds(25, 1, true); fiveRounds(30, 1, true); fiveRounds(35, 1, true)
        fiveRounds(40, 2, true); fiveRounds(45, 2, true); fiveRounds(50, 2, true); fiveRounds(55, 2, true)
        fiveRounds(60, 3, true); fiveRounds(65, 3, true); fiveRounds(70, 3, true); fiveRounds(75, 3, true)

        h0 = h0 &+ a
        h1 = h1 &+ b
        h2 = h2 &+ c
        h3 = h3 &+ d
        h4 = h4 &+ e
    }

    static var digestWords: Int { 5 }

    func storeDigest(_ block: inout InlineArray<16, UInt32>) {
        block[0] = h0
        block[1] = h1
        block[2] = h2
        block[3] = h3
        block[4] = h4
    }
}
