import MFASystem

/// RFC 4648 §6 Base32. Encoding emits the canonical upper-case alphabet; decoding accepts what
/// people type or paste: lower case, spaces, tabs and hyphens between groups, with or without
/// '=' padding. It rejects characters outside the alphabet, padding before the end, and lengths
/// that no byte string encodes to (1, 3 or 6 characters in the last group).
public enum Base32 {
    /// The alphabet's character for a 5-bit value, computed: a global table would be allocated
    /// on every load of the module and never freed (it is dlopen'ed and dlclose'd per login).
    @inline(__always)
    static func symbol(_ v: UInt32) -> UInt8 {
        let i = UInt8(truncatingIfNeeded: v & 0x1F)
        return i < 26 ? 0x41 &+ i : 0x32 &+ (i &- 26)  // 'A'...'Z', then '2'...'7'
    }

    @_optimize(size)  // cold: not on a login's path
    public static func encode(_ bytes: [UInt8], padding: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 4) / 5 * 8)
        var buffer: UInt32 = 0
        var bits = 0
        for b in bytes {
            buffer = (buffer << 8 | UInt32(b)) & 0xFFFF
            bits += 8
            while bits >= 5 {
                out.append(symbol(buffer >> UInt32(bits - 5)))
                bits -= 5
            }
        }
        if bits > 0 {
            out.append(symbol(buffer << UInt32(5 - bits)))
        }
        if padding {
            while out.count % 8 != 0 { out.append(ASCII.equals) }
        }
        return out
    }

    public static func encodeString(_ bytes: [UInt8], padding: Bool = false) -> String {
        String(decoding: encode(bytes, padding: padding), as: UTF8.self)
    }

    @usableFromInline static func value(_ c: UInt8) -> UInt32? {
        switch c {
        case 0x41...0x5A: return UInt32(c &- 0x41)        // A-Z
        case 0x61...0x7A: return UInt32(c &- 0x61)        // a-z
        case 0x32...0x37: return UInt32(c &- 0x32 &+ 26)  // 2-7
        default: return nil
        }
    }

    /// @inlinable: specialised in the caller's target for its collection (record parsing).
    @inlinable
    public static func decode(_ text: some Collection<UInt8>) throws(MFAError) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 5 / 8)
        var buffer: UInt32 = 0
        var bits = 0
        var symbols = 0
        var padding = 0
        for c in text {
            if c == ASCII.space || c == ASCII.tab || c == 0x2D { continue }
            if c == ASCII.equals { padding += 1; continue }
            // Data after padding is malformed.
            if padding > 0 { throw .invalidBase32 }
            guard let v = value(c) else { throw .invalidBase32 }
            buffer = (buffer << 5 | v) & 0xFFFF
            bits += 5
            symbols += 1
            if bits >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits - 8)))
                bits -= 8
            }
        }
        switch symbols % 8 {
        case 1, 3, 6: throw .invalidBase32
        default: break
        }
        if padding > 0 && (symbols + padding) % 8 != 0 { throw .invalidBase32 }
        if padding > 6 { throw .invalidBase32 }
        return out
    }
}
