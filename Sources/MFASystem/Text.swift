// Text from users is data, never terminal control: labels and names are checked with
// `isPrintableText` when they come in, and everything read back from a store goes through
// `escapedForTerminal` before it reaches a terminal or a log.
//
// Bytes only: Embedded Swift has no Unicode tables, and a String would repair invalid UTF-8
// (U+FFFD) instead of showing what is really there. No lookup tables either: a global array
// would be allocated again on every load of the module and never freed.

/// True when `bytes` is well-formed UTF-8 whose every code point prints as itself: no
/// terminal controls, no invisible formatting that reorders or hides text. The empty string is
/// printable (length limits are the caller's). Rejected:
/// - malformed UTF-8: stray continuation bytes, C0/C1/F5–FF lead bytes, overlong forms,
///   UTF-16 surrogates (U+D800–U+DFFF), code points above U+10FFFF, truncated sequences;
/// - controls (Unicode category Cc): U+0000–U+001F (C0, tab and newline included), U+007F
///   (DEL), U+0080–U+009F (C1; U+009B is CSI and U+0085 is NEL on many terminals);
/// - line and paragraph separators (Zl, Zp): U+2028, U+2029;
/// - format characters (Cf, Unicode 15.1), which are invisible, reorder text or hide it:
///   U+00AD soft hyphen; U+0600–U+0605, U+06DD, U+070F, U+0890–U+0891, U+08E2 (Arabic and
///   Syriac number signs and marks); U+061C Arabic letter mark; U+180E Mongolian vowel
///   separator; U+200B–U+200F (zero-width space, non-joiner, joiner — so emoji ZWJ sequences
///   are refused — and the LRM/RLM marks); U+202A–U+202E (bidi embeddings and overrides);
///   U+2060–U+2064 (word joiner, invisible operators); U+2066–U+2069 (bidi isolates);
///   U+206A–U+206F (deprecated shaping controls); U+FEFF (BOM, zero-width no-break space);
///   U+FFF9–U+FFFB (interlinear annotation); U+110BD, U+110CD (Kaithi number signs);
///   U+13430–U+1343F (Egyptian hieroglyph format controls); U+1BCA0–U+1BCA3 (shorthand format
///   controls); U+1D173–U+1D17A (musical symbol format controls); U+E0001 and U+E0020–U+E007F
///   (tag characters: invisible ASCII look-alikes that can smuggle hidden text);
/// - noncharacters: U+FDD0–U+FDEF and the last two code points of every plane (U+xFFFE, U+xFFFF).
///
/// Allowed: everything else, including private-use and not yet assigned code points (they
/// print as a glyph or a box, they control nothing), combining marks, and variation selectors.
public func isPrintableText(_ bytes: [UInt8]) -> Bool {
    var i = 0
    while i < bytes.count {
        guard let decoded = UTF8Scalar.decode(bytes, at: i), UTF8Scalar.isPrintable(decoded.scalar) else {
            return false
        }
        i &+= decoded.length
    }
    return true
}

/// `bytes` made safe to print, and unambiguous: printable text (see `isPrintableText`) is kept
/// as it is, except the backslash, which becomes `\\`. Everything else becomes a visible
/// escape of printable ASCII:
/// - a byte that is not part of well-formed UTF-8 becomes `\xHH` (two lower-case hex digits),
///   one escape per byte: an invalid sequence never swallows the valid text after it;
/// - a rejected code point below U+0080 (C0 controls, DEL) becomes `\xHH` too (`\x1b`, `\x7f`);
/// - a rejected code point from U+0080 on (C1 controls, separators, format characters,
///   noncharacters) becomes `\u{HHHH}` (upper-case hex, at least four digits: `\u{009B}`,
///   `\u{202E}`, `\u{E0041}`), so a C1 control sent as valid UTF-8 (C2 9B) reads differently
///   from a raw 0x9B byte (`\x9b`).
/// The output is always printable text, and the input can be recovered from it: `\\`, `\xHH`
/// and `\u{...}` are the only backslash sequences it contains.
public func escapedForTerminal(_ bytes: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count)
    var i = 0
    while i < bytes.count {
        let byte = bytes[i]
        guard let decoded = UTF8Scalar.decode(bytes, at: i) else {
            TextEscape.appendByte(byte, to: &out)
            i &+= 1
            continue
        }
        let scalar = decoded.scalar, length = decoded.length
        if scalar == 0x5C {  // '\'
            out.append(0x5C)
            out.append(0x5C)
        } else if !UTF8Scalar.isPrintable(scalar) {
            if scalar < 0x80 {
                TextEscape.appendByte(byte, to: &out)
            } else {
                TextEscape.appendScalar(scalar, to: &out)
            }
        } else {
            var k = 0
            while k < length {
                let j = i &+ k
                if j < bytes.count { out.append(bytes[j]) }
                k &+= 1
            }
        }
        i &+= length
    }
    return out
}

/// Strict UTF-8 (RFC 3629; Unicode's table of well-formed byte sequences).
package enum UTF8Scalar {
    /// The code point starting at `bytes[index]` and its length in bytes, or nil when the bytes
    /// there do not begin a well-formed sequence (or `index` is out of range).
    package static func decode(_ bytes: [UInt8], at index: Int) -> (scalar: UInt32, length: Int)? {
        guard index >= 0, index < bytes.count else { return nil }
        let lead = bytes[index]
        // The allowed range of the second byte narrows for E0, ED, F0 and F4: that is what
        // excludes overlong forms, surrogates and code points above U+10FFFF.
        let length: Int, initial: UInt32, low: UInt8, high: UInt8
        switch lead {
        case 0x00...0x7F: return (UInt32(lead), 1)
        case 0xC2...0xDF: length = 2; initial = UInt32(lead & 0x1F); low = 0x80; high = 0xBF
        case 0xE0: length = 3; initial = 0; low = 0xA0; high = 0xBF
        case 0xE1...0xEC, 0xEE...0xEF: length = 3; initial = UInt32(lead & 0x0F); low = 0x80; high = 0xBF
        case 0xED: length = 3; initial = 0x0D; low = 0x80; high = 0x9F
        case 0xF0: length = 4; initial = 0; low = 0x90; high = 0xBF
        case 0xF1...0xF3: length = 4; initial = UInt32(lead & 0x07); low = 0x80; high = 0xBF
        case 0xF4: length = 4; initial = 4; low = 0x80; high = 0x8F
        default: return nil  // 80–BF continuation, C0/C1 overlong leads, F5–FF
        }
        guard bytes.count &- index >= length else { return nil }
        var scalar = initial
        var k = 1
        while k < length {
            let b = bytes[index &+ k]
            let (lo, hi): (UInt8, UInt8) = k == 1 ? (low, high) : (0x80, 0xBF)
            guard b >= lo, b <= hi else { return nil }
            scalar = scalar &<< 6 | UInt32(b & 0x3F)
            k &+= 1
        }
        return (scalar, length)
    }

    /// False for the code points `isPrintableText` rejects (all of them listed there).
    package static func isPrintable(_ c: UInt32) -> Bool {
        switch c {
        case 0x00...0x1F, 0x7F...0x9F, 0xAD: return false
        case 0x0600...0x0605, 0x061C, 0x06DD, 0x070F, 0x0890...0x0891, 0x08E2: return false
        case 0x180E, 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x2064, 0x2066...0x206F: return false
        case 0xFDD0...0xFDEF, 0xFEFF, 0xFFF9...0xFFFB: return false
        case 0x110BD, 0x110CD, 0x13430...0x1343F, 0x1BCA0...0x1BCA3, 0x1D173...0x1D17A: return false
        case 0xE0001, 0xE0020...0xE007F: return false
        case 0xD800...0xDFFF, 0x110000...: return false  // never decoded; here for completeness
        default: return c & 0xFFFE != 0xFFFE  // U+xFFFE and U+xFFFF of every plane
        }
    }
}

package enum TextEscape {
    /// One hex digit, upper or lower case (computed: no table).
    package static func hexDigit(_ n: UInt32, upper: Bool) -> UInt8 {
        let v = UInt8(truncatingIfNeeded: n & 0x0F)
        return v < 10 ? 0x30 &+ v : (upper ? 0x41 : 0x61) &+ (v &- 10)
    }

    /// `\xHH`.
    package static func appendByte(_ b: UInt8, to out: inout [UInt8]) {
        out.append(0x5C)
        out.append(0x78)
        out.append(hexDigit(UInt32(b) &>> 4, upper: false))
        out.append(hexDigit(UInt32(b), upper: false))
    }

    /// `\u{HHHH}`, at least four upper-case hex digits, no more than the value needs.
    package static func appendScalar(_ c: UInt32, to out: inout [UInt8]) {
        out.append(0x5C)
        out.append(0x75)
        out.append(0x7B)
        var digits = 4
        while digits < 8 && c &>> UInt32(digits &* 4) != 0 { digits &+= 1 }
        var shift = digits &* 4
        while shift > 0 {
            shift &-= 4
            out.append(hexDigit(c &>> UInt32(shift), upper: true))
        }
        out.append(0x7D)
    }
}

package func trimmed(_ bytes: [UInt8]) -> [UInt8] {
    var s = bytes[...]
    while let f = s.first, f == ASCII.space || f == ASCII.tab || f == 0x0D { s = s.dropFirst() }
    while let l = s.last, l == ASCII.space || l == ASCII.tab || l == 0x0D { s = s.dropLast() }
    return Array(s)
}

/// Text safe to put in a log line: printable ASCII kept, everything else as '?', at most 128
/// bytes. For user names and arguments, never for secrets (those are never logged at all).
public func printable(_ bytes: [UInt8]) -> Message {
    var out: [UInt8] = []
    out.reserveCapacity(min(bytes.count, 128) + 3)  // one allocation (a log line per login)
    for c in bytes.prefix(128) { out.append(c >= 0x20 && c < 0x7F ? c : 0x3F) }
    if bytes.count > 128 { out += [0x2E, 0x2E, 0x2E] }
    return Message(out)
}
