import Foundation
import TestSupport
import XCTest
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// Labels are printable text on input; anything read back from a store is escaped on output
/// (security review, finding 6).
final class TextTests: XCTestCase {
    func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
    func text(_ b: [UInt8]) -> String { String(decoding: b, as: UTF8.self) }

    /// The UTF-8 of one code point (surrogates excluded by the caller).
    func utf8(_ cp: UInt32) -> [UInt8] {
        guard let scalar = Unicode.Scalar(cp) else { return [] }
        return Array(String(Character(scalar)).utf8)
    }

    /// The review's label, `--name $'\xc2\x9b2J…\u202e'`: C1 CSI as UTF-8 ("clear screen"),
    /// an ellipsis, then a right-to-left override. Refused on input; shown escaped.
    func testTheReviewersLabel() {
        let label: [UInt8] = [0xC2, 0x9B, 0x32, 0x4A, 0xE2, 0x80, 0xA6, 0xE2, 0x80, 0xAE]
        XCTAssertFalse(isPrintableText(label))
        XCTAssertEqual(text(escapedForTerminal(label)), #"\u{009B}2J…\u{202E}"#)
        // The same with a raw 8-bit CSI byte and ESC-based sequences, and a realistic spoof.
        XCTAssertEqual(text(escapedForTerminal([0x9B, 0x32, 0x4A])), #"\x9b2J"#)
        XCTAssertEqual(text(escapedForTerminal(bytes("\u{1B}[2J\u{1B}]0;owned\u{07}"))), #"\x1b[2J\x1b]0;owned\x07"#)
        let spoof = bytes("phone\u{202E}gnp.exe")
        XCTAssertFalse(isPrintableText(spoof))
        XCTAssertEqual(text(escapedForTerminal(spoof)), #"phone\u{202E}gnp.exe"#)
        XCTAssertFalse(escapedForTerminal(label).contains(0x9B))
    }

    func testPrintableTextIsKept() {
        for s in ["", "phone", "YubiKey 5 NFC", "Téléphone de Zoë", "手机", "телефон", "📱 work", "a\\b",
                  "e\u{301}", "\u{FE0F}", "\u{FFFD}", "\u{D7FF}", "\u{E000}", "\u{10FFFD}", "~!@#$%^&*()_+{}|:\"<>?"] {
            XCTAssertTrue(isPrintableText(bytes(s)), s)
            if !s.contains("\\") { XCTAssertEqual(escapedForTerminal(bytes(s)), bytes(s), s) }
        }
        XCTAssertEqual(text(escapedForTerminal(bytes(#"a\b"#))), #"a\\b"#, "the backslash itself is escaped")
        XCTAssertEqual(text(escapedForTerminal(bytes(#"\x41"#))), #"\\x41"#, "text that looks like an escape stays distinct")
    }

    /// Every code point the doc comment lists is refused, and escaped as \u{...} (or \xHH
    /// below U+0080); the code points just outside each range are not.
    func testEveryListedCodePointIsRejected() {
        let ranges: [ClosedRange<UInt32>] = [
            0x00...0x1F, 0x7F...0x9F, 0xAD...0xAD, 0x0600...0x0605, 0x061C...0x061C, 0x06DD...0x06DD,
            0x070F...0x070F, 0x0890...0x0891, 0x08E2...0x08E2, 0x180E...0x180E, 0x200B...0x200F,
            0x2028...0x2029, 0x202A...0x202E, 0x2060...0x2064, 0x2066...0x2069, 0x206A...0x206F,
            0xFDD0...0xFDEF, 0xFEFF...0xFEFF, 0xFFF9...0xFFFB, 0xFFFE...0xFFFF, 0x110BD...0x110BD,
            0x110CD...0x110CD, 0x13430...0x1343F, 0x1BCA0...0x1BCA3, 0x1D173...0x1D17A, 0xE0001...0xE0001,
            0xE0020...0xE007F,
        ] + (1...16).map { UInt32($0) << 16 | 0xFFFE...UInt32($0) << 16 | 0xFFFF }
        var rejected = Set<UInt32>()
        for range in ranges {
            for cp in range {
                rejected.insert(cp)
                let encoded = utf8(cp)
                XCTAssertFalse(isPrintableText(encoded), String(cp, radix: 16))
                XCTAssertFalse(isPrintableText(bytes("ok") + encoded + bytes("ok")), String(cp, radix: 16))
                let expected = cp < 0x80 ? String(format: "\\x%02x", cp) : String(format: "\\u{%04X}", cp)
                XCTAssertEqual(text(escapedForTerminal(encoded)), expected)
                XCTAssertEqual(text(escapedForTerminal(bytes("a") + encoded + bytes("b"))), "a" + expected + "b")
            }
        }
        for range in ranges {
            for cp in [range.lowerBound &- 1, range.upperBound &+ 1] where !rejected.contains(cp) && cp <= 0x10FFFF {
                if (0xD800...0xDFFF).contains(cp) { continue }
                XCTAssertTrue(isPrintableText(utf8(cp)), "U+\(String(cp, radix: 16)) is printable")
            }
        }
        // Spot checks of the ones the review named.
        for (cp, shown) in [(0x202E, #"\u{202E}"#), (0x2066, #"\u{2066}"#), (0xFEFF, #"\u{FEFF}"#),
                            (0x9B, #"\u{009B}"#), (0x85, #"\u{0085}"#), (0xE0041, #"\u{E0041}"#), (0x10FFFF, #"\u{10FFFF}"#)] {
            XCTAssertEqual(text(escapedForTerminal(utf8(UInt32(cp)))), shown)
        }
    }

    /// Malformed UTF-8: each offending byte becomes \xHH; valid text after it is kept.
    func testInvalidUTF8() {
        let cases: [([UInt8], String)] = [
            ([0x80], #"\x80"#), ([0xBF, 0x41], #"\xbfA"#),                                  // stray continuation
            ([0xC0, 0x80], #"\xc0\x80"#), ([0xC1, 0xBF], #"\xc1\xbf"#),                      // overlong 2-byte
            ([0xE0, 0x80, 0x80], #"\xe0\x80\x80"#), ([0xE0, 0x9F, 0xBF], #"\xe0\x9f\xbf"#),  // overlong 3-byte
            ([0xF0, 0x80, 0x80, 0x80], #"\xf0\x80\x80\x80"#), ([0xF0, 0x8F, 0xBF, 0xBF], #"\xf0\x8f\xbf\xbf"#),
            ([0xED, 0xA0, 0x80], #"\xed\xa0\x80"#), ([0xED, 0xBF, 0xBF], #"\xed\xbf\xbf"#),  // surrogates
            ([0xED, 0xA0, 0xBD, 0xED, 0xB2, 0xA9], #"\xed\xa0\xbd\xed\xb2\xa9"#),            // CESU-8 pair
            ([0xF4, 0x90, 0x80, 0x80], #"\xf4\x90\x80\x80"#),                                // U+110000
            ([0xF5, 0x80, 0x80, 0x80], #"\xf5\x80\x80\x80"#), ([0xF8, 0x88, 0x80, 0x80, 0x80], #"\xf8\x88\x80\x80\x80"#),
            ([0xFE], #"\xfe"#), ([0xFF], #"\xff"#),
            ([0xC3], #"\xc3"#), ([0xE2, 0x82], #"\xe2\x82"#), ([0xF0, 0x9F, 0x93], #"\xf0\x9f\x93"#),  // truncated at end
            ([0xE2, 0x82, 0x41], #"\xe2\x82A"#), ([0xF0, 0x9F, 0x93, 0x20], #"\xf0\x9f\x93 "#),        // truncated, then text
            ([0xF0, 0xE2, 0x82, 0xAC], #"\xf0€"#), ([0xC3, 0xC3, 0xA9], #"\xc3é"#),                  // valid text after
            ([0xC2, 0x9B], #"\u{009B}"#), ([0x9B], #"\x9b"#),                               // C1 as UTF-8 vs raw byte
        ]
        for (input, shown) in cases {
            let valid = String(validating: input, as: UTF8.self) != nil
            XCTAssertFalse(isPrintableText(input), hex(input))
            XCTAssertEqual(text(escapedForTerminal(input)), shown, hex(input))
            if input != [0xC2, 0x9B] { XCTAssertFalse(valid, "the case is malformed by Swift's decoder too: \(hex(input))") }
        }
        // Boundaries that are well-formed.
        for ok: [UInt8] in [[0xC2, 0xA0], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80],
                             [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBD]] {
            XCTAssertTrue(isPrintableText(ok), hex(ok))
            XCTAssertEqual(escapedForTerminal(ok), ok, hex(ok))
        }
    }

    /// Every code point, against Swift's own UTF-8 decoder and Python's Unicode database:
    /// what we refuse is exactly Cc, Cf, Zl and Zp plus noncharacters (and the format controls
    /// a Python built on an older Unicode does not know yet).
    func testAgreesWithUnicodeDatabaseOnEveryCodePoint() throws {
        let py = try runCommand(["python3", "-c", """
            import unicodedata
            print(unicodedata.unidata_version)
            for cp in range(0x110000):
                if unicodedata.category(chr(cp)) in ('Cc', 'Cf', 'Zl', 'Zp'): print(cp)
            """])
        XCTAssertEqual(py.status, 0, py.stderr)
        var lines = py.stdout.split(separator: "\n")
        let version = lines.isEmpty ? "" : String(lines.removeFirst())
        let controls = Set(lines.compactMap { UInt32($0) })
        XCTAssertGreaterThan(controls.count, 200, "python listed the controls (Unicode \(version))")
        let noncharacter: (UInt32) -> Bool = { (0xFDD0...0xFDEF).contains($0) || $0 & 0xFFFE == 0xFFFE }
        let newerThanPython: ClosedRange<UInt32> = 0x13439...0x1343F  // Cf since Unicode 15.0
        for cp in UInt32(0)...0x10FFFF where !(0xD800...0xDFFF).contains(cp) {
            let encoded = utf8(cp)
            let decoded = UTF8Scalar.decode(encoded, at: 0)
            XCTAssertTrue(decoded?.scalar == cp && decoded?.length == encoded.count, "decode U+\(String(cp, radix: 16))")
            let printable = isPrintableText(encoded)
            let expected = !(controls.contains(cp) || noncharacter(cp) || newerThanPython.contains(cp))
            if printable != expected {
                XCTFail("U+\(String(cp, radix: 16)): printable \(printable), Unicode \(version) says \(expected)")
            }
        }
    }

    /// Undoes `escapedForTerminal`; nil on any sequence it cannot have produced.
    func unescape(_ e: [UInt8]) -> [UInt8]? {
        var out: [UInt8] = []
        var i = 0
        func hexValue(_ b: UInt8) -> UInt32? { Hex.nibble(b).map(UInt32.init) }
        while i < e.count {
            guard e[i] == 0x5C else { out.append(e[i]); i += 1; continue }
            guard i + 1 < e.count else { return nil }
            switch e[i + 1] {
            case 0x5C: out.append(0x5C); i += 2
            case 0x78:
                guard i + 3 < e.count, let h = hexValue(e[i + 2]), let l = hexValue(e[i + 3]) else { return nil }
                out.append(UInt8(h << 4 | l)); i += 4
            case 0x75:
                guard i + 2 < e.count, e[i + 2] == 0x7B, let close = e[(i + 3)...].firstIndex(of: 0x7D) else { return nil }
                var v: UInt32 = 0
                for b in e[(i + 3)..<close] { guard let d = hexValue(b) else { return nil }; v = v << 4 | d }
                out += utf8(v); i = close + 1
            default: return nil
            }
        }
        return out
    }

    /// Random bytes (and random mixes of tricky fragments): the output is always printable
    /// (ASCII without controls, or printable UTF-8) and gives back the input exactly.
    func testRandomBytesAlwaysEscapeToPrintableText() {
        var rng = SplitMix64(seed: 0x7E57)
        let fragments: [[UInt8]] = [[0xC2, 0x9B], [0x1B, 0x5B], [0xE2, 0x80, 0xAE], [0xE2, 0x81, 0xA6], [0xEF, 0xBB, 0xBF],
                                    [0xF3, 0xA0, 0x81, 0x81], [0xED, 0xA0, 0x80], [0x5C], [0x5C, 0x78], [0xF0, 0x9F, 0x93, 0xB1],
                                    [0xC3, 0xA9], [0xE6, 0x89, 0x8B], [0x41], [0x20], [0x0A], [0x00], [0x7F], [0x9B], [0xFF]]
        for round in 0..<5000 {
            var input: [UInt8] = []
            for _ in 0..<Int.random(in: 0...40, using: &rng) {
                if round % 2 == 0 {
                    input.append(UInt8.random(in: 0...255, using: &rng))
                } else {
                    input += fragments[Int.random(in: 0..<fragments.count, using: &rng)]
                }
            }
            let escaped = escapedForTerminal(input)
            XCTAssertTrue(isPrintableText(escaped), hex(input))
            XCTAssertTrue(escaped.allSatisfy { $0 >= 0x20 && $0 != 0x7F }, hex(input))
            XCTAssertNotNil(String(validating: escaped, as: UTF8.self), hex(input))
            XCTAssertEqual(unescape(escaped), input, "unambiguous: \(hex(input))")
            if isPrintableText(input) {
                XCTAssertNotNil(String(validating: input, as: UTF8.self), hex(input))
                if !input.contains(0x5C) { XCTAssertEqual(escaped, input) }
            }
        }
    }

    /// "locked out for a while" said nothing of when (a new admin's trial): the lockout's end, in UTC.
    func testUTCTextOfALockoutsEnd() {
        XCTAssertEqual(String(decoding: ModuleOptions.utcText(0), as: UTF8.self), "1970-01-01 00:00:00 UTC")
        XCTAssertEqual(String(decoding: ModuleOptions.utcText(1_795_489_186), as: UTF8.self), "2026-11-24 02:59:46 UTC")
        XCTAssertEqual(String(decoding: ModuleOptions.utcText(951_782_400), as: UTF8.self), "2000-02-29 00:00:00 UTC")
        XCTAssertEqual(String(decoding: ModuleOptions.utcText(253_402_300_799), as: UTF8.self), "9999-12-31 23:59:59 UTC")
        XCTAssertEqual(String(decoding: ModuleOptions.utcText(Int64.max), as: UTF8.self), "a time out of range")
        XCTAssertEqual(String(decoding: ModuleOptions.utcText(-1), as: UTF8.self), "a time out of range")
        let line = DaemonService<Store>.logText(.wrongCode(replayed: false, failures: 10, lockedUntil: 1_795_489_186))
        XCTAssertEqual(line.string, "wrong code (10 consecutive failures); locked out until 2026-11-24 02:59:46 UTC")
        XCTAssertEqual(DaemonService<Store>.logText(.lockedOut(until: 1_795_489_186, permanent: false)).string,
                       "denied: locked out until 2026-11-24 02:59:46 UTC")
    }
}
