import CLibc

// Small byte helpers shared by the parsers. Everything works on [UInt8]: the module runs in
// Embedded Swift, where String processing beyond ASCII would pull in Unicode tables.

// The parsers' generic helpers below are @inlinable: callers in other targets (the record
// parser, pam-totpd) get them specialised for their collection instead of a protocol call per
// byte (the record parse in pam-totpd cost 89,000 instructions a request that way).
@usableFromInline package enum ASCII {
    @usableFromInline package static let zero: UInt8 = 0x30, nine: UInt8 = 0x39
    @usableFromInline package static let space: UInt8 = 0x20, tab: UInt8 = 0x09, newline: UInt8 = 0x0A
    @usableFromInline package static let equals: UInt8 = 0x3D, percent: UInt8 = 0x25

    @inlinable package static func isDigit(_ b: UInt8) -> Bool { b >= zero && b <= nine }
}

/// The bytes of a literal. Literals stay in read-only data; an array is made only per call.
@inlinable @inline(__always)
package func bytes(_ s: StaticString) -> UnsafeBufferPointer<UInt8> {
    UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)
}

/// The bytes of a literal as an array (`Array("…".utf8)` would pull the String machinery,
/// ~9 KB of code, into the Embedded module).
public func literal(_ s: StaticString) -> [UInt8] { Array(bytes(s)) }

/// True when `a` holds exactly the bytes of the literal `s`.
@inlinable
package func equals(_ a: some Collection<UInt8>, _ s: StaticString) -> Bool {
    a.elementsEqual(bytes(s))
}

extension Array where Element == UInt8 {
    /// Appends the bytes of a literal.
    package mutating func append(literal s: StaticString) { append(contentsOf: bytes(s)) }
}

/// Parses an unsigned decimal without sign, spaces or leading '+'; nil on any other byte,
/// on empty input, or when the value would exceed `limit`.
@inlinable
package func parseDecimal(_ bytes: some Collection<UInt8>, limit: UInt64) -> UInt64? {
    if bytes.isEmpty || bytes.count > 20 { return nil }
    var value: UInt64 = 0
    for b in bytes {
        guard ASCII.isDigit(b) else { return nil }
        let (m, o1) = value.multipliedReportingOverflow(by: 10)
        let (s, o2) = m.addingReportingOverflow(UInt64(b &- ASCII.zero))
        if o1 || o2 || s > limit { return nil }
        value = s
    }
    return value
}

/// Decimal text of an unsigned value (no Foundation, no String(describing:)).
package func decimalBytes(_ value: UInt64) -> [UInt8] {
    if value == 0 { return [ASCII.zero] }
    var out: [UInt8] = []
    out.reserveCapacity(20)  // UInt64.max has 20 digits: one allocation
    var v = value
    while v > 0 {
        out.append(ASCII.zero &+ UInt8(truncatingIfNeeded: v % 10))
        v /= 10
    }
    out.reverse()
    return out
}

/// Decimal text of a signed value.
package func decimalBytes(_ value: Int64) -> [UInt8] {
    if value < 0 { return [0x2D] + decimalBytes(value.magnitude) }
    return decimalBytes(UInt64(value))
}

/// Splits on single spaces; empty fields (two spaces in a row) are kept so that the
/// caller's field-count check rejects them.
package func splitFields(_ line: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
    var fields: [ArraySlice<UInt8>] = []
    var start = line.startIndex
    var i = line.startIndex
    while i < line.endIndex {
        if line[i] == ASCII.space {
            fields.append(line[start..<i])
            start = i + 1
        }
        i += 1
    }
    fields.append(line[start..<line.endIndex])
    return fields
}

/// Equality of two byte strings whose running time depends only on their lengths.
public func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    if a.count != b.count { return false }
    var diff: UInt8 = 0
    for i in 0..<a.count { diff |= a[i] ^ b[i] }
    return diff == 0
}

/// Overwrites the bytes before the array is released (best effort: Swift may have copied it).
public func wipe(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { clibc_wipe($0.baseAddress, $0.count) }
    bytes.removeAll()
}

/// Overwrites the bytes where they are stored, through the buffer every copy of this array
/// shares (`wipe` would copy a shared buffer first and wipe the copy). Only for bytes nothing
/// will read again: a code that was sent.
public func wipeInPlace(_ bytes: [UInt8]) {
    bytes.withUnsafeBufferPointer { b in
        guard let base = b.baseAddress, !b.isEmpty else { return }
        clibc_wipe(UnsafeMutableRawPointer(mutating: base), b.count)
    }
}

@usableFromInline package enum Hex {
    /// The lower-case hex digit of a nibble (computed, not a global table: see Base32.symbol).
    @inline(__always)
    package static func digit(_ v: UInt8) -> UInt8 {
        let n = v & 0x0F
        return n < 10 ? ASCII.zero &+ n : 0x61 &+ (n &- 10)
    }

    package static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digit(b >> 4))
            out.append(digit(b))
        }
        return out
    }

    @inlinable package static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c &- 0x30
        case 0x61...0x66: return c &- 0x61 &+ 10
        case 0x41...0x46: return c &- 0x41 &+ 10
        default: return nil
        }
    }

    @inlinable package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        if text.count % 2 != 0 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count / 2)
        var high: UInt8? = nil
        for c in text {
            guard let n = nibble(c) else { return nil }
            if let h = high {
                out.append(h << 4 | n)
                high = nil
            } else {
                high = n
            }
        }
        return out
    }
}

/// RFC 3986 percent-encoding: everything but unreserved characters becomes %XX.
package enum Percent {
    package static func isUnreserved(_ c: UInt8) -> Bool {
        switch c {
        case 0x41...0x5A, 0x61...0x7A, 0x30...0x39, 0x2D, 0x2E, 0x5F, 0x7E: return true
        default: return false
        }
    }

    package static func encode(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        for c in bytes {
            if isUnreserved(c) {
                out.append(c)
            } else {
                out.append(ASCII.percent)
                out.append(upper(Hex.digit(c >> 4)))
                out.append(upper(Hex.digit(c)))
            }
        }
        return out
    }

    package static func upper(_ c: UInt8) -> UInt8 { c >= 0x61 && c <= 0x7A ? c &- 0x20 : c }

    /// Strict decoding: '%' must be followed by two hex digits.
    @inlinable package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)  // never longer than the text: one allocation
        var it = text.makeIterator()
        while let c = it.next() {
            if c != ASCII.percent { out.append(c); continue }
            guard let h = it.next(), let l = it.next(),
                  let hn = Hex.nibble(h), let ln = Hex.nibble(l) else { return nil }
            out.append(hn << 4 | ln)
        }
        return out
    }
}

/// Decimal text of a signed value with its sign: "+3", "-2", "0" (a drift in steps).
public func signedDecimal(_ value: Int64) -> [UInt8] {
    value > 0 ? [0x2B] + decimalBytes(UInt64(value)) : decimalBytes(value)
}

/// A decimal number as a message ("42", "-1").
public func decimal<T: BinaryInteger>(_ value: T) -> Message {
    if value == 0 { return "0" }
    var digits: [UInt8] = []
    var v = value.magnitude
    while v > 0 { digits.append(0x30 &+ UInt8(truncatingIfNeeded: v % 10)); v /= 10 }
    if value < 0 { digits.append(0x2D) }
    return Message(digits.reversed())
}

/// This host's name (the issuer an app shows, `%h` in a sent code's text), at most 64 bytes;
/// "localhost" if it has none. One copy for the module and pam-totpd.
public func hostName() -> [UInt8] {
    var buffer = [CChar](repeating: 0, count: 256)
    guard clibc_hostname(&buffer, 255) == 0 else { return literal("localhost") }
    let name = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return name.isEmpty ? literal("localhost") : Array(name.prefix(64))
}
