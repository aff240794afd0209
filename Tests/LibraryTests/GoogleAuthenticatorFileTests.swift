import XCTest
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// The `~/.google_authenticator` parser (`totp-enroll import-google-authenticator` uses it):
/// what google-authenticator writes is accepted, HOTP and malformed files are refused naming
/// the line, and no error message carries the secret or a code.
final class GoogleAuthenticatorFileTests: XCTestCase {
    let secretText = "JB4S64N2ATCOXFFXVVNHHLAFHM"  // 16 bytes

    func parse(_ text: String) throws(MFAError) -> GoogleAuthenticatorFile {
        try GoogleAuthenticatorFile(parsing: Array(text.utf8))
    }

    /// The refusal's message, checked for the secret and the codes in the input.
    func refusal(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        do throws(MFAError) {
            _ = try GoogleAuthenticatorFile(parsing: Array(text.utf8))
            XCTFail("accepted: \(text.debugDescription)", file: file, line: line)
            return ""
        } catch {
            guard case .invalidParameters(let m) = error else {
                XCTFail("wrong error \(error)", file: file, line: line)
                return ""
            }
            let s = m.string
            XCTAssertFalse(s.contains(secretText), "the secret leaked: \(s)", file: file, line: line)
            for code in ["87654321", "7654321", "01234567", "23456789"] {
                XCTAssertFalse(s.contains(code), "a code leaked: \(s)", file: file, line: line)
            }
            return s
        }
    }

    /// A file exactly as Debian's google-authenticator 20191231 writes it
    /// (`google-authenticator -t -d -f -r 3 -R 30 -w 3 -e 5 -q`).
    func testFileWrittenByGoogleAuthenticator() throws {
        let f = try parse("""
            \(secretText)
            " RATE_LIMIT 3 30
            " WINDOW_SIZE 3
            " DISALLOW_REUSE
            " TOTP_AUTH
            74548135
            49901196
            54305899
            16605452
            64339280

            """)
        XCTAssertEqual(f.secret, try Base32.decode(Array(secretText.utf8)))
        XCTAssertEqual(f.secret.count, 16)
        XCTAssertTrue(f.totp)
        XCTAssertNil(f.stepSize)
        XCTAssertEqual(f.windowSize, 3)
        XCTAssertTrue(f.disallowReuse)
        XCTAssertEqual(f.usedSteps, [])
        XCTAssertEqual(f.rateLimit?.attempts, 3)
        XCTAssertEqual(f.rateLimit?.interval, 30)
        XCTAssertNil(f.timeSkew)
        XCTAssertFalse(f.resettingTimeSkew)
        XCTAssertEqual(f.scratchCodes.map { String(decoding: $0, as: UTF8.self) },
                       ["74548135", "49901196", "54305899", "16605452", "64339280"])
    }

    /// Every option the module writes, with its state (used steps, rate-limit time stamps,
    /// skew pairs), CRLF line ends, blank lines, tabs, and no final newline.
    func testEveryOption() throws {
        var f = try parse(
            "\(secretText)\r\n\" STEP_SIZE 60\n\" WINDOW_SIZE 17\n\" RATE_LIMIT 5 120 1700000000 1700000001\n"
            + "\" DISALLOW_REUSE 56666666 56666668\n\" TIME_SKEW -2\n\" RESETTING_TIME_SKEW 56666666+1 56666667-2\n"
            + "\" TOTP_AUTH\t\n\n \t\n23456789\r\n98765432")
        XCTAssertTrue(f.totp)
        XCTAssertEqual(f.stepSize, 60)
        XCTAssertEqual(f.windowSize, 17)
        XCTAssertEqual(f.rateLimit?.attempts, 5)
        XCTAssertEqual(f.rateLimit?.interval, 120)
        XCTAssertTrue(f.disallowReuse)
        XCTAssertEqual(f.usedSteps, [56_666_666, 56_666_668])
        XCTAssertEqual(f.timeSkew, -2)
        XCTAssertTrue(f.resettingTimeSkew)
        XCTAssertEqual(f.scratchCodes, [Array("23456789".utf8), Array("98765432".utf8)])
        XCTAssertEqual(try parse("\(secretText)\n\" TIME_SKEW +3\n\" TOTP_AUTH\n").timeSkew, 3)
        XCTAssertEqual(try parse("\(secretText)\n\" TIME_SKEW 0\n\" TOTP_AUTH\n").timeSkew, 0)
        XCTAssertEqual(try parse("\(secretText)\n\" RESETTING_TIME_SKEW \n\" TOTP_AUTH\n").resettingTimeSkew, true)
        // The secret as the module accepts it too: lower case, padded.
        XCTAssertEqual(try parse("\(secretText.lowercased())======\n\" TOTP_AUTH\n").secret, f.secret)

        f.erase()
        XCTAssertEqual(f.secret, [])
        XCTAssertEqual(f.scratchCodes, [])
    }

    func testHOTPFilesAreRefusedWhateverElseIsInThem() {
        let hotp = "HOTP-mode files cannot be imported: pam_totp supports TOTP only; re-enrol the user with totp-enroll"
        // As google-authenticator -c writes it.
        XCTAssertEqual(refusal("NPKQP34ZAQMZA3HCY7G5BCRMNA\n\" WINDOW_SIZE 3\n\" HOTP_COUNTER 1\n70306869\n87324602\n"), hotp)
        XCTAssertEqual(refusal("\(secretText)\n\" HOTP_COUNTER 1\n"), hotp)
        // Reported before any other problem, even one on an earlier line.
        XCTAssertEqual(refusal("!!\n\" FOO\n\" TOTP_AUTH\n\" HOTP_COUNTER 7\n"), hotp)
    }

    /// Each malformed file is refused naming its line (as the CLI's ImportTests check).
    func testMalformedLinesNameTheirLineNumber() {
        let s = secretText
        let cases: [(String, String)] = [
            ("\(s)\n\" TOTP_AUTH\n\" FOO_BAR 1\n", "line 3: unknown option FOO_BAR"),
            ("\(s)\n\" TOTP_AUTH\n87654321\n7654321\n", "line 4: neither an option (\" NAME) nor a scratch code (8 digits)"),
            ("\(s)\n\" WINDOW_SIZE 0\n\" TOTP_AUTH\n", "line 2: WINDOW_SIZE must be 1 to 100"),
            ("\(s)\n\" WINDOW_SIZE 3 4\n\" TOTP_AUTH\n", "line 2: WINDOW_SIZE needs one value, 1 to 100"),
            ("\(s)\n\" STEP_SIZE 61\n\" TOTP_AUTH\n", "line 2: STEP_SIZE must be 1 to 60 seconds"),
            ("\(s)\n\" STEP_SIZE\n\" TOTP_AUTH\n", "line 2: STEP_SIZE needs one value, 1 to 60"),
            ("\(s)\n\" TOTP_AUTH\n\" RATE_LIMIT 3\n", "line 3: RATE_LIMIT needs two values: attempts (1-100) and seconds (1-3600)"),
            ("\(s)\n\" TOTP_AUTH\n\" RATE_LIMIT 0 30\n", "line 3: RATE_LIMIT attempts must be 1 to 100"),
            ("\(s)\n\" TOTP_AUTH\n\" RATE_LIMIT 3 3601\n", "line 3: RATE_LIMIT seconds must be 1 to 3600"),
            ("\(s)\n\" TOTP_AUTH\n\" RATE_LIMIT 3 30 x\n", "line 3: RATE_LIMIT is followed by time stamps (numbers)"),
            ("\(s)\n\" TOTP_AUTH\n\" TOTP_AUTH\n", "line 3: TOTP_AUTH appears twice"),
            ("\(s)\n\" TOTP_AUTH 1\n", "line 2: TOTP_AUTH takes no value"),
            ("\(s)\n\" TOTP_AUTH\n\" DISALLOW_REUSE 1 -2\n", "line 3: DISALLOW_REUSE lists time steps (numbers)"),
            ("\(s)\n\" TOTP_AUTH\n\" DISALLOW_REUSE 4294967296\n", "line 3: DISALLOW_REUSE lists time steps (numbers)"),
            ("\(s)\n\" TOTP_AUTH\n\" TIME_SKEW\n", "line 3: TIME_SKEW needs one value"),
            ("\(s)\n\" TOTP_AUTH\n\" TIME_SKEW 1000001\n", "line 3: TIME_SKEW must be a number of steps"),
            ("\(s)\n\" TOTP_AUTH\n\" TIME_SKEW --1\n", "line 3: TIME_SKEW must be a number of steps"),
            ("\(s)\n\" TOTP_AUTH\n\" RESETTING_TIME_SKEW 5\n", "line 3: RESETTING_TIME_SKEW lists step+skew pairs"),
            ("\(s)\n\" TOTP_AUTH\n\" RESETTING_TIME_SKEW +5\n", "line 3: RESETTING_TIME_SKEW lists step+skew pairs"),
            ("\(s)\n\" TOTP_AUTH\n\" RESETTING_TIME_SKEW 5+\n", "line 3: RESETTING_TIME_SKEW lists step+skew pairs"),
            ("\(s)\n\" TOTP_AUTH\n\"\n", "line 3: an option line must start with '\" ' and a name"),
            ("\(s)\n\" TOTP_AUTH\n\"  X\n", "line 3: an option line must start with '\" ' and a name"),
            ("\(s)\n\" TOTP_AUTH\n\"X\n", "line 3: an option line must start with '\" ' and a name"),
            ("\(s)\n\" TOTP_AUTH\n\" \u{1}\u{7f}\n", "line 3: unknown option ??"),
            ("\(s)\n\" TOTP_AUTH\n\" " + String(repeating: "A", count: 40) + "\n", "line 3: unknown option " + String(repeating: "A", count: 32)),
            ("\(s)\n\" DISALLOW_REUSE\n", "no TOTP_AUTH line: google-authenticator did not use this secret for time-based codes; enrol the user with totp-enroll"),
            ("\(s)\n", "no TOTP_AUTH line"),
            ("\n\" TOTP_AUTH\n", "line 1: no secret (the first line must be the Base32 secret)"),
            ("\(s.lowercased())!\n\" TOTP_AUTH\n", "line 1: the secret is not valid Base32"),
            ("MZXW6YTBOI======\n\" TOTP_AUTH\n", "line 1: the secret is shorter than 80 bits; enrol a new one with totp-enroll"),
            (String(repeating: "A", count: 208) + "\n\" TOTP_AUTH\n", "line 1: the secret is longer than 1024 bits"),
        ]
        for (text, wanted) in cases {
            let message = refusal(text)
            XCTAssertTrue(message.hasPrefix(wanted), "wanted \(wanted.debugDescription), got \(message.debugDescription)")
        }
        // 128 bytes is the longest secret accepted.
        XCTAssertEqual(try? parse(String(repeating: "A", count: 205) + "\n\" TOTP_AUTH\n").secret.count, 128)
    }

    /// Scratch codes: exactly eight digits, no leading zero, at most 32.
    func testScratchCodeRules() throws {
        let s = secretText + "\n\" TOTP_AUTH\n"
        for bad in ["01234567", "7654321", "876543210", "8765432a", "8765 4321", "87654321 ", "-8765432", "８7654321"] {
            XCTAssertTrue(refusal(s + bad + "\n").hasPrefix("line 3: neither an option"), bad)
        }
        let codes = (0..<32).map { String(10_000_000 + $0 * 2_000_000 + 1) }
        let f = try parse(s + codes.joined(separator: "\n") + "\n")
        XCTAssertEqual(f.scratchCodes.map { String(decoding: $0, as: UTF8.self) }, codes)
        XCTAssertEqual(refusal(s + codes.joined(separator: "\n") + "\n23456789\n"),
                       "line 35: more than 32 scratch codes; pam_totp keeps at most 32")
        // Blank lines between codes count for the line number.
        XCTAssertEqual(refusal(s + "23456789\n\n\n7654321\n"), "line 6: neither an option (\" NAME) nor a scratch code (8 digits)")
    }

    /// Empty, NUL and size bounds; arbitrary bytes never trap.
    func testSizeAndNULBounds() throws {
        XCTAssertEqual(refusal(""), "the file is empty")
        XCTAssertEqual(refusal("\(secretText)\n\" TOTP_AUTH\n\0"), "the file contains a NUL byte; not a google-authenticator file")
        XCTAssertEqual(refusal("\0"), "the file contains a NUL byte; not a google-authenticator file")

        // Exactly 64 KiB (blank lines after the options) is accepted; one byte more is not.
        let head = Array("\(secretText)\n\" TOTP_AUTH\n".utf8)
        let full = head + [UInt8](repeating: 0x0A, count: GoogleAuthenticatorFile.maxSize - head.count)
        XCTAssertEqual(full.count, 65_536)
        XCTAssertTrue(try GoogleAuthenticatorFile(parsing: full).totp)
        XCTAssertThrowsError(try GoogleAuthenticatorFile(parsing: full + [0x0A])) { error in
            XCTAssertEqual(error as? MFAError, .invalidParameters("the file is larger than 64 KiB; not a google-authenticator file"))
        }
        // A very long option line, many DISALLOW_REUSE steps, and lines of lone separators.
        let steps = (0..<5_000).map { String($0) }.joined(separator: " ")
        XCTAssertEqual(try parse("\(secretText)\n\" TOTP_AUTH\n\" DISALLOW_REUSE \(steps)\n").usedSteps.count, 5_000)
        for text in ["\n", "\r\n", "\r", "\"", "\" ", "\n\"", "\(secretText)\n\"\r\n", "\(secretText)\n\" \t\n\" TOTP_AUTH"] {
            _ = refusal(text)
        }
    }
}
