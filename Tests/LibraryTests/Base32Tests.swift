import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

final class Base32Tests: XCTestCase {
    /// RFC 4648 §10 test vectors.
    let vectors: [(String, String)] = [
        ("", ""), ("f", "MY======"), ("fo", "MZXQ===="), ("foo", "MZXW6==="),
        ("foob", "MZXW6YQ="), ("fooba", "MZXW6YTB"), ("foobar", "MZXW6YTBOI======"),
    ]

    func testRFC4648Vectors() throws {
        for (plain, encoded) in vectors {
            XCTAssertEqual(String(decoding: Base32.encode(Array(plain.utf8), padding: true), as: UTF8.self), encoded)
            XCTAssertEqual(try Base32.decode(Array(encoded.utf8)), Array(plain.utf8))
            // Without padding, lower case, and with spaces.
            let bare = encoded.replacingOccurrences(of: "=", with: "")
            XCTAssertEqual(String(decoding: Base32.encode(Array(plain.utf8)), as: UTF8.self), bare)
            XCTAssertEqual(try Base32.decode(Array(bare.lowercased().utf8)), Array(plain.utf8))
        }
        XCTAssertEqual(try Base32.decode(Array("mzxw 6ytb oi".utf8)), Array("foobar".utf8))
        XCTAssertEqual(try Base32.decode(Array("MZXW-6YTB-OI".utf8)), Array("foobar".utf8))
    }

    func testRoundTripsAndPythonAgree() throws {
        var rng = SplitMix64(seed: 4648)
        var lines: [String] = []
        var inputs: [[UInt8]] = []
        for n in 0...100 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let encoded = Base32.encode(bytes, padding: true)
            XCTAssertEqual(try Base32.decode(encoded), bytes)
            XCTAssertEqual(try Base32.decode(Base32.encode(bytes)), bytes)
            inputs.append(bytes)
            lines.append(hex(bytes))
        }
        let py = try runCommand(["python3", "-c", "import sys,base64\nfor l in sys.stdin.read().split('\\n'):\n print(base64.b32encode(bytes.fromhex(l)).decode())"],
                         input: lines.joined(separator: "\n"))
        XCTAssertEqual(py.status, 0, py.stderr)
        let theirs = py.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (i, bytes) in inputs.enumerated() {
            XCTAssertEqual(String(decoding: Base32.encode(bytes, padding: true), as: UTF8.self), theirs[i])
        }
    }

    func testMalformedInputIsRejected() {
        let bad = ["M", "MZX", "MZXW6Y", "MZ=XW6YTB", "MZXW6YTB1", "MZXW6YT0", "MZXW6YT8",
                   "MZXW6YTB!", "MY=======", "MY======A", "=", "MZ\u{0}XQ", "MZXQ=====", "é"]
        for s in bad {
            XCTAssertThrowsError(try Base32.decode(Array(s.utf8)), "\(s) must be rejected") { error in
                XCTAssertEqual(error as? MFAError, .invalidBase32)
            }
        }
    }
}

final class URITests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)

    func testDefaultsAreOmitted() {
        let uri = OTPAuthURI(issuer: Array("Example Co".utf8), account: Array("alice@example.com".utf8),
                             secret: secret, parameters: .default)
        XCTAssertEqual(uri.string,
                       "otpauth://totp/Example%20Co:alice%40example.com?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&issuer=Example%20Co")
    }

    func testNonDefaultsAndEncoding() throws {
        let p = try OTPParameters(algorithm: .sha512, digits: 8, period: 60)
        let uri = OTPAuthURI(issuer: Array("A&B=C/D?".utf8), account: Array("bob:x y".utf8), secret: secret, parameters: p)
        XCTAssertEqual(uri.string,
                       "otpauth://totp/A%26B%3DC%2FD%3F:bob%3Ax%20y?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&issuer=A%26B%3DC%2FD%3F&algorithm=SHA512&digits=8&period=60")
        let parsed = try OTPAuthURI(parsing: uri.bytes)
        XCTAssertEqual(parsed, uri)
        XCTAssertEqual(try OTPAuthURI(parsing: Array("otpauth://totp/Alice?secret=MZXW6YTBOI&algorithm=sha256&period=45".utf8)).parameters,
                       try OTPParameters(algorithm: .sha256, digits: 6, period: 45))
    }

    /// Colons and spaces in labels (found by the uri fuzz target: an issuer with a colon, from
    /// the issuer parameter, came back split at that colon). The separator is the first literal
    /// ':' (else the first %3A), found before decoding; an account never keeps leading spaces.
    func testColonsInIssuerAndAccountRoundTrip() throws {
        let values: [(String, String)] = [("a:b", "acct"), ("", "x:y"), ("", ":"), ("i:", ":a"), ("A&B", "bob:x y"), ("", "plain")]
        for (issuer, account) in values {
            let uri = OTPAuthURI(issuer: Array(issuer.utf8), account: Array(account.utf8), secret: secret, parameters: .default)
            XCTAssertEqual(try OTPAuthURI(parsing: uri.bytes), uri, uri.string)
        }
        XCTAssertEqual(OTPAuthURI(issuer: [], account: Array("x:y".utf8), secret: secret, parameters: .default).string,
                       "otpauth://totp/:x%3Ay?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ")
        let forms: [(String, String, String)] = [
            ("otpauth://totp/Example%3Aalice?secret=MZXW6YTBOI", "Example", "alice"),        // encoded separator
            ("otpauth://totp/ACME%20Co:%20%20john?secret=MZXW6YTBOI", "ACME Co", "john"),   // spaces after it
            ("otpauth://totp/a%3Ab:c%3Ad?secret=MZXW6YTBOI", "a:b", "c:d"),                // literal one first
            ("otpauth://totp/Example:alice?secret=MZXW6YTBOI&issuer=x%3Ay", "x:y", "alice"),
            ("otpauth://totp/%20bob?secret=MZXW6YTBOI&issuer=I", "I", "bob"),
        ]
        for (text, issuer, account) in forms {
            let uri = try OTPAuthURI(parsing: Array(text.utf8))
            XCTAssertEqual(uri.issuer, Array(issuer.utf8), text)
            XCTAssertEqual(uri.account, Array(account.utf8), text)
            XCTAssertEqual(try OTPAuthURI(parsing: uri.bytes), uri, text)
        }
    }

    func testMalformedURIsAreRejected() {
        for s in ["otpauth://hotp/x?secret=MZXW6YTBOI", "otpauth://totp/x", "otpauth://totp/x?secret=",
                  "otpauth://totp/%zz?secret=MZXW6YTBOI", "otpauth://totp/x?secret=MZXW6YTBOI&digits=9",
                  "otpauth://totp/x?secret=MZXW6YTBOI&algorithm=md5", "otpauth://totp/x?secret=1"] {
            XCTAssertThrowsError(try OTPAuthURI(parsing: Array(s.utf8)), s)
        }
    }
}

final class OptionsTests: XCTestCase {
    func parse(_ args: [String]) throws -> ModuleOptions {
        try ModuleOptions.parse(args.map { Array($0.utf8) })
    }

    func testDefaultsAndValues() throws {
        let d = try parse([])
        XCTAssertEqual(d.adjacentIntervals, 5)
        XCTAssertFalse(d.nullok)
        XCTAssertEqual(d.store, Array("/var/lib/pam-totp".utf8))
        let o = try parse(["adjacent_intervals=0", "nullok", "store=/tmp/x", "debug", "max_failures=3", "lockout=0",
                           "prompt=Code:"])
        XCTAssertEqual(o.maxFailures, 3)
        XCTAssertEqual(o.lockoutSeconds, 0)
        XCTAssertEqual(o.prompt, Array("Code:".utf8))
        XCTAssertEqual(o.adjacentIntervals, 0)
        XCTAssertTrue(o.nullok && o.debug)
        XCTAssertEqual(o.store, Array("/tmp/x".utf8))
        XCTAssertEqual(try parse(["adjacent_intervals=10"]).adjacentIntervals, 10)
    }

    func testUnknownAndOutOfRangeAreErrors() {
        for args in [["adjacent_intervals=11"], ["adjacent_intervals=-1"], ["adjacent_intervals="], ["adjacent_intervals"],
                     ["nullok=1"], ["store=relative"], ["store="], ["bogus"], ["NULLOK"], ["adjacent_intervals=99999999999999999999999"],
                     ["max_failures=0"], ["max_failures=101"], ["lockout=86401"], ["lockout=-5"], ["prompt="], ["debug=true"]] {
            XCTAssertThrowsError(try parse(args), "\(args)") { error in
                guard case .invalidOption = error as? MFAError else { return XCTFail("\(error)") }
            }
        }
    }
}
