import XCTest
@testable import MFAPolicy
@testable import MFASystem

/// Out-of-band destinations (issue "Text-message and email codes"): E.164 numbers, email
/// addresses, their masked hints, and the message templates pam-totpd sends.
final class DestinationTests: XCTestCase {
    func b(_ s: String) -> [UInt8] { Array(s.utf8) }
    func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    /// The error's message, or nil when `body` did not throw.
    func thrown(_ body: () throws(MFAError) -> Void) -> MFAError? {
        do throws(MFAError) {
            try body()
            return nil
        } catch {
            return error
        }
    }

    func phoneError(_ s: String) -> String? {
        guard let e = thrown({ () throws(MFAError) in try Destination.validatePhone(b(s)) }) else { return nil }
        guard case .invalidParameters(let m) = e else { XCTFail("\(s): not invalidParameters: \(e)"); return "" }
        return m.string
    }

    func emailError(_ bytes: [UInt8]) -> String? {
        guard let e = thrown({ () throws(MFAError) in try Destination.validateEmail(bytes) }) else { return nil }
        guard case .invalidParameters(let m) = e else { XCTFail("not invalidParameters: \(e)"); return "" }
        return m.string
    }

    func emailError(_ s: String) -> String? { emailError(b(s)) }

    func templateError(_ s: String, needsCode: Bool = true) -> String? {
        templateError(b(s), needsCode: needsCode)
    }

    func templateError(_ bytes: [UInt8], needsCode: Bool = true) -> String? {
        guard let e = thrown({ () throws(MFAError) in _ = try MessageTemplate(bytes, needsCode: needsCode) }) else { return nil }
        guard case .invalidOption(let m) = e else { XCTFail("not invalidOption: \(e)"); return "" }
        return m.string
    }

    // MARK: - Phone numbers

    func testPhoneNumbersAccepted() {
        for n in ["+15105551234", "+12345678", "+123456789012345", "+447911123456", "+4930123456", "+99999999"] {
            XCTAssertNil(phoneError(n), n)
        }
    }

    func testPhoneNumbersRefusedWithTheExpectedForm() {
        let refused = [
            "", "+", "+1234567",  // 7 digits
            "+1234567890123456",  // 16 digits
            "+01234567890",  // leading 0
            "15105551234",  // no +
            "++15105551234", "+1 510 555 1234", "+1-510-555-1234", "+1(510)5551234", "+1.510.555.1234",
            " +15105551234", "+15105551234 ", "+15105551234\n", "+1510555123a", "+١٥١٠٥٥٥١٢٣٤",  // Arabic-Indic digits
            "+１５１０５５５１２３４",  // fullwidth digits
            "0015105551234", "+15105551234+", "tel:+15105551234",
        ]
        for n in refused {
            guard let m = phoneError(n) else { XCTFail("accepted: \(n.debugDescription)"); continue }
            XCTAssertTrue(m.contains("E.164"), m)
            XCTAssertTrue(m.contains("+ then 8 to 15 digits"), m)
            XCTAssertTrue(m.contains("+15105551234"), m)  // the example, never the input
        }
        XCTAssertFalse(phoneError("+19995550000")?.contains("19995550000") ?? false)
        // A NUL or a non-ASCII byte.
        XCTAssertNotNil(thrown({ () throws(MFAError) in try Destination.validatePhone([0x2B, 0x31, 0, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38]) }))
        XCTAssertNotNil(thrown({ () throws(MFAError) in try Destination.validatePhone([0x2B] + [UInt8](repeating: 0xB9, count: 10)) }))
    }

    func testPhoneBoundaries() {
        for n in 1...20 {
            let number = "+" + String(repeating: "7", count: n)
            XCTAssertEqual(phoneError(number) == nil, (8...15).contains(n), number)
        }
    }

    // MARK: - Email addresses

    func testEmailAddressesAccepted() {
        let accepted = [
            "alice@example.com", "a@b.co", "first.last@sub.example.org", "alice+mfa@example.com",
            "o'brien@example.ie", "x_y=z!#$%&*/?^`{}|~@example.com", "a-b@ex-ample.com", "ALICE@EXAMPLE.COM",
            "user@xn--bcher-kva.example", "user@123.example.com", "alice@example.c0m", "a@a1.b2",
        ]
        for a in accepted { XCTAssertNil(emailError(a), a) }
    }

    func testEmailAddressesRefused() {
        let refused = [
            "", "@", "alice", "alice@", "@example.com", "alice@example", "alice@.example.com",
            "alice@example.com.", "alice@example..com", "alice@-example.com", "alice@example-.com",
            "alice@exa_mple.com", "alice@example.123", "alice@[192.0.2.1]", "alice@192.0.2.1",
            "-alice@example.com", "-oQ/tmp/x@example.com", "|/bin/sh@example.com", "/etc/passwd@example.com",
            "al..ice@example.com", ".alice@example.com", "alice.@example.com",
            "al ice@example.com", " alice@example.com", "alice@example.com ", "alice@exa mple.com",
            "\"alice\"@example.com", "\"al ice\"@example.com", "alice(comment)@example.com", "alice@example.com(c)",
            "alice@bob@example.com", "alice@@example.com", "<alice@example.com>", "alice@example.com\n",
            "alice\n@example.com", "alice,bob@example.com", "alice;x@example.com", "alice\\x@example.com",
            "ålice@example.com", "alice@exämple.com", "alice@例え.jp",
        ]
        for a in refused {
            guard let m = emailError(a) else { XCTFail("accepted: \(a.debugDescription)"); continue }
            XCTAssertFalse(m.isEmpty, a)
            XCTAssertTrue(m.contains("email address"), m)
        }
        XCTAssertEqual(emailError("alice"), "an email address must look like name@example.com: ASCII letters, digits and . _ + - in the name, no spaces, quotes or brackets")
        XCTAssertEqual(emailError("-f@example.com"), "an email address must not start with -, | or /")
        XCTAssertTrue(emailError("alice@localhost")?.contains("example.com") ?? false)
        XCTAssertNotNil(emailError([0x61, 0, 0x40, 0x62, 0x2E, 0x63]))
        XCTAssertNotNil(emailError([0x61, 0x40, 0x62, 0x2E, 0xC3, 0xA9]))
    }

    func testEmailLengthLimits() {
        let domain = "@example.com"
        XCTAssertNil(emailError(String(repeating: "a", count: 64) + domain))
        XCTAssertTrue(emailError(String(repeating: "a", count: 65) + domain)?.contains("1 to 64") ?? false)
        // Totals of 254 and 255: a 64-byte local part, "@", then labels.
        let local = String(repeating: "l", count: 64)
        func address(total: Int) -> String {
            var labels: [String] = []
            var remaining = total - 65  // the domain's length
            while remaining > 0 {
                let n = min(63, remaining - (labels.isEmpty ? 0 : 1))
                labels.append(String(repeating: "d", count: n))
                remaining -= n + (labels.count > 1 ? 1 : 0)
            }
            return local + "@" + labels.joined(separator: ".")
        }
        let a254 = address(total: 254), a255 = address(total: 255)
        XCTAssertEqual(a254.utf8.count, 254)
        XCTAssertEqual(a255.utf8.count, 255)
        XCTAssertNil(emailError(a254))
        XCTAssertEqual(emailError(a255), "an email address must be at most 254 characters")
        // A 63-byte label is the longest.
        XCTAssertNil(emailError("a@" + String(repeating: "x", count: 63) + ".com"))
        XCTAssertNotNil(emailError("a@" + String(repeating: "x", count: 64) + ".com"))
        XCTAssertNotNil(emailError("a@example." + String(repeating: "x", count: 64)))
    }

    // MARK: - Masks

    func testMaskPhone() {
        XCTAssertEqual(text(Destination.maskPhone(b("+15105551234"))), "+1******1234")
        XCTAssertEqual(text(Destination.maskPhone(b("+12345678"))), "+1***5678")  // 8 digits
        XCTAssertEqual(text(Destination.maskPhone(b("+123456789012345"))), "+1**********2345")  // 15
        XCTAssertEqual(text(Destination.maskPhone(b("+447911123456"))), "+4*******3456")
        // Too short for a number: no first digit, at least four hidden.
        XCTAssertEqual(text(Destination.maskPhone(b("+1234567"))), "+****567")
        XCTAssertEqual(text(Destination.maskPhone(b("+12345"))), "+****5")
        XCTAssertEqual(text(Destination.maskPhone(b("+1234"))), "+****")
        XCTAssertEqual(text(Destination.maskPhone(b("+1"))), "+*")
        XCTAssertEqual(text(Destination.maskPhone([])), "+")
        // Not digits: shown as '?'; the output is printable ASCII whatever comes in.
        XCTAssertEqual(text(Destination.maskPhone(b("+1510555\n\u{1B}[2"))), "+1******???2")
        let odd = Destination.maskPhone([0x2B, 0xFF, 0, 0x9B, 0x31, 0x32, 0x33, 0x34, 0x35, 0x0A])
        XCTAssertTrue(odd.allSatisfy { $0 >= 0x20 && $0 < 0x7F })
        for n in 0...20 {
            let digits = (0..<n).map { _ in UInt8.random(in: 0x30...0x39) }
            let masked = Destination.maskPhone([0x2B] + digits)
            XCTAssertEqual(masked.count, n + 1)
            let shown = masked.dropFirst().filter { $0 != 0x2A }.count
            if n >= 8 {
                XCTAssertEqual(shown, 5)
                XCTAssertEqual(masked[1], digits[0])
                XCTAssertEqual(Array(masked.suffix(4)), Array(digits.suffix(4)))
            } else {
                XCTAssertLessThanOrEqual(shown, max(0, n - 4), "\(n)")  // at least four hidden
            }
        }
    }

    func testMaskEmail() {
        XCTAssertEqual(text(Destination.maskEmail(b("alice@example.com"))), "a***@example.com")
        XCTAssertEqual(text(Destination.maskEmail(b("a@b.co"))), "a***@b.co")
        XCTAssertEqual(text(Destination.maskEmail(b("Bob.Smith+mfa@mail.example.org"))), "B***@mail.example.org")
        XCTAssertEqual(text(Destination.maskEmail(b("no-at-sign"))), "***")
        XCTAssertEqual(text(Destination.maskEmail(b("@example.com"))), "***@example.com")
        XCTAssertEqual(text(Destination.maskEmail([])), "***")
        // Never a control character, whatever comes in.
        XCTAssertEqual(text(Destination.maskEmail(b("\u{1B}x@exa\u{1B}mple.com"))), #"?***@exa\x1bmple.com"#)
        XCTAssertEqual(text(Destination.maskEmail([0xC3, 0xA5, 0x40, 0x61])), "?***@a")
    }

    // MARK: - Templates

    func testTemplateEscapes() throws {
        let t = try MessageTemplate(b("%c is your code for %h (valid %m min, 100%% yours)"), needsCode: true)
        XCTAssertEqual(text(t.render(code: b("123456"), host: b("web1.example.com"), minutes: 5)),
                       "123456 is your code for web1.example.com (valid 5 min, 100% yours)")
        XCTAssertEqual(text(try MessageTemplate(b("%%c%c%%%h%m%%"), needsCode: true)
                            .render(code: b("42"), host: b("h"), minutes: 18_446_744_073_709_551_615)),
                       "%c42%h18446744073709551615%")
        XCTAssertEqual(text(try MessageTemplate(b("code %c, again %c"), needsCode: true).render(code: b("9"), host: [], minutes: 0)),
                       "code 9, again 9")
        XCTAssertEqual(text(try MessageTemplate(b("Code für %h: %c — gültig %m Minuten ✓"), needsCode: true)
                            .render(code: b("00012345"), host: b("host"), minutes: 10)),
                       "Code für host: 00012345 — gültig 10 Minuten ✓")
        // Values are data: a host name with control characters cannot add a line or a header.
        let rendered = try MessageTemplate(b("Subject for %h"), needsCode: false)
            .render(code: [], host: b("h\r\nBcc: x@evil.example"), minutes: 1)
        XCTAssertEqual(text(rendered), #"Subject for h\x0d\x0aBcc: x@evil.example"#)
        XCTAssertTrue(isPrintableText(rendered))
    }

    /// `render(into:)` grows its buffer once, to `renderedLength`, before the code is in it: a
    /// buffer that grows frees its old copy of the code unwiped (issue 36).
    func testRenderingReservesItsBufferBeforeTheCode() throws {
        let templates = ["%c is your code for %h (valid %m min, 100%% yours)", "%m%m%m%m %c %c %c %h%h", "%c", "x%%c%c%%"]
        for template in templates {
            let t = try MessageTemplate(b(template), needsCode: true)
            for (code, host, minutes) in [(b("123456"), b("web1.example.com"), UInt64(5)), (b("12345678"), b("h\u{1B}x"), UInt64.max),
                                          ([0x31, 0x0A, 0xFF], b("host"), UInt64(0))] {
                let whole = t.render(code: code, host: host, minutes: minutes)
                XCTAssertEqual(t.renderedLength(code: code, host: host, minutes: minutes), whole.count, template)
                var out = b("Subject: ")
                t.render(code: code, host: host, minutes: minutes, into: &out)
                XCTAssertEqual(out, b("Subject: ") + whole, template)
                XCTAssertGreaterThanOrEqual(out.capacity, out.count)
                // Reserved whole: the buffer the code went into is the one returned.
                var reserved: [UInt8] = []
                reserved.reserveCapacity(t.renderedLength(code: code, host: host, minutes: minutes))
                let before = reserved.withUnsafeBufferPointer { $0.baseAddress }
                t.render(code: code, host: host, minutes: minutes, into: &reserved)
                XCTAssertEqual(reserved.withUnsafeBufferPointer { $0.baseAddress }, before, "\(template): the buffer grew")
            }
        }
    }

    func testTemplatesRefused() {
        let escapes = "a message template may use only %c (the code), %h (the host name), %m (the minutes it is valid) and %% (a percent sign)"
        XCTAssertEqual(templateError("%c %x"), escapes)
        XCTAssertEqual(templateError("%c %C"), escapes)
        XCTAssertEqual(templateError("%c 100% sure"), escapes)
        XCTAssertEqual(templateError("%c %"), escapes)  // trailing lone %
        XCTAssertEqual(templateError("%c %%%"), escapes)
        XCTAssertEqual(templateError("%s %c"), escapes)
        XCTAssertEqual(templateError("%c%n", needsCode: false), escapes)
        let control = "a message template must be one line of printable text (no control characters)"
        XCTAssertEqual(templateError("%c\n"), control)
        XCTAssertEqual(templateError("%c\tx"), control)
        XCTAssertEqual(templateError("%c\u{1B}[2J"), control)
        XCTAssertEqual(templateError("%c\u{7F}"), control)
        XCTAssertEqual(templateError("%c\u{85}"), control)  // C1 NEL as UTF-8
        XCTAssertEqual(templateError("%c\u{202E}"), control)  // bidi override
        XCTAssertEqual(templateError(b("%c ") + [0xFF]), control)  // invalid UTF-8
        XCTAssertEqual(templateError(b("%c ") + [0xC3]), control)  // truncated
        XCTAssertEqual(templateError(b("%c ") + [0x9B]), control)  // raw C1 byte
        XCTAssertEqual(templateError("%c\u{0}"), control)
        // needsCode.
        XCTAssertEqual(templateError("Your code for %h"), "a message template must contain %c (the code)")
        XCTAssertEqual(templateError("%%c is not the code"), "a message template must contain %c (the code)")
        XCTAssertNil(templateError("Your code for %h", needsCode: false))
        XCTAssertNil(templateError("%c", needsCode: true))
        // Length: 1 to 512 bytes.
        let length = "a message template must be 1 to 512 bytes"
        XCTAssertEqual(templateError("", needsCode: false), length)
        XCTAssertEqual(templateError(""), length)
        XCTAssertNil(templateError("%c" + String(repeating: "x", count: 510)))
        XCTAssertEqual(templateError("%c" + String(repeating: "x", count: 511)), length)
        XCTAssertNil(templateError("%c" + String(repeating: "é", count: 255)))  // 2 + 510 bytes
        XCTAssertEqual(templateError("%c" + String(repeating: "é", count: 256)), length)
        // The setting's name is the caller's: describe() says it is configuration.
        guard let e = thrown({ () throws(MFAError) in _ = try MessageTemplate(b("x"), needsCode: true) }) else { return XCTFail() }
        XCTAssertEqual(describe(e, for: .log).string, "configuration error: a message template must contain %c (the code)")
    }

    func testDefaultTemplates() throws {
        for (t, needsCode) in [(MessageTemplate.defaultSMS, true), (.defaultEmailSubject, false), (.defaultEmailText, true)] {
            XCTAssertEqual(try MessageTemplate(t.text, needsCode: needsCode), t)
        }
        XCTAssertTrue(MessageTemplate.defaultSMS.text.count <= 160 - 8 - 60)  // one SMS with a long host name
        XCTAssertEqual(text(MessageTemplate.defaultSMS.render(code: b("123456"), host: b("web1"), minutes: 5)),
                       "123456 is your sign-in code for web1. It expires in 5 minutes.")
        XCTAssertEqual(text(MessageTemplate.defaultEmailSubject.render(code: b("123456"), host: b("web1"), minutes: 5)),
                       "Your sign-in code for web1")
        let body = text(MessageTemplate.defaultEmailText.render(code: b("654321"), host: b("web1"), minutes: 10))
        XCTAssertTrue(body.contains("654321"))
        XCTAssertTrue(body.contains("web1"))
        XCTAssertTrue(body.contains("10 minutes"))
        XCTAssertNotEqual(MessageTemplate.defaultSMS, MessageTemplate.defaultEmailText)
    }
}
