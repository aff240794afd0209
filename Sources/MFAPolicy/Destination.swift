import MFASystem

// Out-of-band factors (issue "Text-message and email codes"): where a code goes, how it is
// shown to users (masked), and the text pam-totpd sends. Pure functions on bytes: the
// destinations are checked when they come in (enrolment), the templates when the daemon
// reads its configuration; the masks and `render` take anything and always give printable text.

/// Where an out-of-band factor's codes go, and the hint that shows it without giving it away.
public enum Destination {
    /// E.164: "+" then at most 15 digits; we ask for at least 8 (no real number is shorter).
    public static let phoneDigitsRange = 8...15
    /// RFC 5321's limits: a path of 256 bytes with its angle brackets, a local part of 64.
    public static let maxEmailLength = 254
    public static let maxLocalPartLength = 64
    /// RFC 1035: a label of a host name is 1 to 63 bytes.
    public static let maxDomainLabelLength = 63

    /// An E.164 number: "+" then 8–15 ASCII digits, the first not "0". Anything else (spaces,
    /// dashes, brackets, a missing "+", other scripts' digits) throws `invalidParameters`
    /// with the expected form; the number itself is never echoed.
    @_optimize(size)  // cold: a login with a phone or address only
    public static func validatePhone(_ number: [UInt8]) throws(MFAError) {
        let digits = number.dropFirst()
        guard number.first == 0x2B, phoneDigitsRange.contains(digits.count),
              let first = digits.first, first != ASCII.zero, digits.allSatisfy(ASCII.isDigit) else {
            throw .invalidParameters(
                "a phone number must be in E.164 form: + then 8 to 15 digits, country code first (not 0), "
                    + "no spaces or punctuation (e.g. +15105551234)")
        }
    }

    /// An email address pam-totpd may hand to a mail program (PAM_TOTP_DESTINATION). Conservative on
    /// purpose (a sender is a program of the site's, often a shell script):
    /// - ASCII only, `local@domain`, exactly one "@", at most 254 bytes in all;
    /// - the local part: 1–64 bytes of RFC 5322 dot-atom text (letters, digits and
    ///   ``!#$%&'*+-/=?^_`{|}~``, dots between them: none leading, trailing or doubled), not
    ///   starting with "-" (it would be an option to sendmail), "|" or "/" (a program or a file
    ///   to some mailers);
    /// - the domain: two or more labels of 1–63 letters, digits and hyphens, none starting or
    ///   ending with a hyphen, the last not all digits (so no IP addresses);
    /// - no quoted local parts, IP literals, comments, spaces or control characters.
    /// Anything else throws `invalidParameters`; the address itself is never echoed.
    @_optimize(size)  // cold: a login with a phone or address only
    public static func validateEmail(_ address: [UInt8]) throws(MFAError) {
        guard address.count <= maxEmailLength else {
            throw .invalidParameters("an email address must be at most 254 characters")
        }
        guard let at = address.firstIndex(of: 0x40) else { throw emailForm }
        let local = address[..<at], domain = address[address.index(after: at)...]
        guard !domain.contains(0x40) else { throw emailForm }
        guard !local.isEmpty, local.count <= maxLocalPartLength else {
            throw .invalidParameters("the name before the @ of an email address must be 1 to 64 characters")
        }
        guard isDotAtom(local) else { throw emailForm }
        if let first = local.first, first == 0x2D || first == 0x7C || first == 0x2F {
            throw .invalidParameters("an email address must not start with -, | or /")
        }
        guard isHostName(domain) else {
            throw .invalidParameters(
                "the domain of an email address must be a host name such as example.com (no IP addresses)")
        }
    }

    /// The hint shown to users: "+", the first digit, "*" for every digit but the last four
    /// (+15105551234 -> +1******1234). Anything shorter than a valid number shows no first
    /// digit and keeps at least four characters hidden, so it never shows more than the last
    /// four (+12345 -> +****5). Shown bytes that are not ASCII digits become "?": the hint is
    /// always printable ASCII.
    @_optimize(size)  // cold: a login with a phone or address only
    public static func maskPhone(_ number: [UInt8]) -> [UInt8] {
        let digits = number.first == 0x2B ? number.dropFirst() : number[...]
        let n = digits.count
        // How many to show at the start and at the end; at least four (five when valid) hidden.
        let head = n >= phoneDigitsRange.lowerBound ? 1 : 0
        let tail = n >= phoneDigitsRange.lowerBound ? 4 : max(0, min(4, n &- 4))
        var out: [UInt8] = [0x2B]
        out.reserveCapacity(n &+ 1)
        var k = 0
        for c in digits {
            if k < head || k >= n &- tail {
                out.append(ASCII.isDigit(c) ? c : 0x3F)
            } else {
                out.append(0x2A)
            }
            k &+= 1
        }
        return out
    }

    /// The hint shown to users: the first character of the local part, "***", "@domain"
    /// (alice@example.com -> a***@example.com). Always printable text: a first byte that is not
    /// printable ASCII shows as "?", and the domain goes through `escapedForTerminal` (a valid
    /// address's domain is unchanged). Without an "@": "***".
    @_optimize(size)  // cold: a login with a phone or address only
    public static func maskEmail(_ address: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        guard let at = address.firstIndex(of: 0x40) else {
            out.append(literal: "***")
            return out
        }
        if let first = address.first, first != 0x40 {
            out.append(first > 0x20 && first < 0x7F && first != 0x5C ? first : 0x3F)
        }
        out.append(literal: "***@")
        out += escapedForTerminal(Array(address[address.index(after: at)...]))
        return out
    }

    static var emailForm: MFAError {
        .invalidParameters(
            "an email address must look like name@example.com: ASCII letters, digits and . _ + - in the name, "
                + "no spaces, quotes or brackets")
    }

    /// RFC 5322 `dot-atom-text`: atext, with single dots between runs of it.
    static func isDotAtom(_ s: ArraySlice<UInt8>) -> Bool {
        guard let first = s.first, let last = s.last, first != 0x2E, last != 0x2E else { return false }
        var previous: UInt8 = 0
        for c in s {
            if c == 0x2E {
                if previous == 0x2E { return false }
            } else if !isAtext(c) {
                return false
            }
            previous = c
        }
        return true
    }

    /// RFC 5322 `atext`: ALPHA / DIGIT / "!#$%&'*+-/=?^_`{|}~".
    static func isAtext(_ c: UInt8) -> Bool {
        switch c {
        case 0x41...0x5A, 0x61...0x7A, 0x30...0x39: return true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2F, 0x3D, 0x3F: return true
        case 0x5E, 0x5F, 0x60, 0x7B, 0x7C, 0x7D, 0x7E: return true
        default: return false
        }
    }

    /// A host name (RFC 1123): two or more labels of 1–63 letters, digits and hyphens, none
    /// starting or ending with a hyphen; the last label not all digits.
    static func isHostName(_ s: ArraySlice<UInt8>) -> Bool {
        var labels = 0
        var length = 0, digitsOnly = true, previous: UInt8 = 0x2E
        for c in s {
            if c == 0x2E {
                guard length > 0, previous != 0x2D else { return false }
                labels &+= 1
                length = 0
                digitsOnly = true
            } else {
                let letter = (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                guard letter || ASCII.isDigit(c) || c == 0x2D else { return false }
                if c == 0x2D && length == 0 { return false }
                length &+= 1
                guard length <= maxDomainLabelLength else { return false }
                if !ASCII.isDigit(c) { digitsOnly = false }
            }
            previous = c
        }
        guard length > 0, previous != 0x2D, !digitsOnly else { return false }
        return labels &+ 1 >= 2
    }
}

/// A message template from pam-totpd's configuration (`sms_text`, `email_subject`,
/// `email_text`): "%c" the code, "%h" the host name, "%m" the minutes the code is valid, "%%"
/// a percent sign. One line of printable text (`isPrintableText`: no C0, DEL or C1 controls, no
/// invisible format characters, valid UTF-8), 1 to 512 bytes; any other "%" sequence or a
/// trailing lone "%" is refused, and so is a template without "%c" where the code must be
/// (`needsCode`). Errors are `invalidOption`, naming no setting: the caller adds which.
public struct MessageTemplate: Equatable, Sendable {
    public static let maxLength = 512

    /// The template as configured (checked).
    public let text: [UInt8]

    public init(_ text: [UInt8], needsCode: Bool) throws(MFAError) {
        guard !text.isEmpty, text.count <= Self.maxLength else {
            throw .invalidOption("a message template must be 1 to 512 bytes")
        }
        guard isPrintableText(text) else {
            throw .invalidOption("a message template must be one line of printable text (no control characters)")
        }
        var hasCode = false, percent = false
        for c in text {
            if percent {
                switch c {
                case 0x63: hasCode = true  // c
                case 0x68, 0x6D, ASCII.percent: break  // h, m, %
                default: throw Self.escapes
                }
                percent = false
            } else if c == ASCII.percent {
                percent = true
            }
        }
        if percent { throw Self.escapes }
        if needsCode && !hasCode { throw .invalidOption("a message template must contain %c (the code)") }
        self.text = text
    }

    /// A template known to be valid (the defaults).
    init(checked text: [UInt8]) { self.text = text }

    /// The text with its escapes replaced. `code` and `host` go through `escapedForTerminal`,
    /// so the result is always printable text (a host name with a newline cannot add a mail
    /// header); digits and a host name are unchanged by it. The result holds the code: the
    /// caller wipes it.
    public func render(code: [UInt8], host: [UInt8], minutes: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        render(code: code, host: host, minutes: minutes, into: &out)
        return out
    }

    /// `render`'s bytes, `renderedLength` of them, appended to `out`. `out` is grown once,
    /// before any byte of the code is in it (a buffer that grows frees its old copy unwiped:
    /// issue 36), and no other copy of the code is made unless it needs escaping (never for
    /// digits; that copy is wiped).
    public func render(code: [UInt8], host: [UInt8], minutes: UInt64, into out: inout [UInt8]) {
        let plain = code.allSatisfy(ASCII.isDigit)
        var escapedCode = plain ? [] : escapedForTerminal(code)
        defer { wipe(&escapedCode) }
        let host = escapedForTerminal(host), minutesText = decimalBytes(minutes)
        let codeLength = plain ? code.count : escapedCode.count
        let needed = out.count &+ length(code: codeLength, host: host.count, minutes: minutesText.count)
        if out.capacity < needed { out.reserveCapacity(needed) }
        var percent = false
        for c in text {
            if percent {
                switch c {
                case 0x63: out.append(contentsOf: plain ? code : escapedCode)
                case 0x68: out.append(contentsOf: host)
                case 0x6D: out.append(contentsOf: minutesText)
                case ASCII.percent: out.append(ASCII.percent)
                default:  // never in a checked template
                    out.append(ASCII.percent)
                    out.append(c)
                }
                percent = false
            } else if c == ASCII.percent {
                percent = true
            } else {
                out.append(c)
            }
        }
        if percent { out.append(ASCII.percent) }  // never in a checked template
    }

    /// How many bytes `render` gives for these values (a caller putting several texts in one
    /// buffer reserves it whole first).
    public func renderedLength(code: [UInt8], host: [UInt8], minutes: UInt64) -> Int {
        var codeLength = code.count
        if !code.allSatisfy(ASCII.isDigit) {
            var escaped = escapedForTerminal(code)
            codeLength = escaped.count
            wipe(&escaped)
        }
        return length(code: codeLength, host: escapedForTerminal(host).count, minutes: decimalBytes(minutes).count)
    }

    func length(code: Int, host: Int, minutes: Int) -> Int {
        var n = 0, percent = false
        for c in text {
            if percent {
                switch c {
                case 0x63: n &+= code
                case 0x68: n &+= host
                case 0x6D: n &+= minutes
                case ASCII.percent: n &+= 1
                default: n &+= 2
                }
                percent = false
            } else if c == ASCII.percent {
                percent = true
            } else {
                n &+= 1
            }
        }
        return percent ? n &+ 1 : n
    }

    /// `sms_text` when the configuration has none.
    public static var defaultSMS: MessageTemplate {
        MessageTemplate(checked: literal("%c is your sign-in code for %h. It expires in %m minutes."))
    }

    /// `email_subject` when the configuration has none.
    public static var defaultEmailSubject: MessageTemplate {
        MessageTemplate(checked: literal("Your sign-in code for %h"))
    }

    /// `email_text` when the configuration has none.
    public static var defaultEmailText: MessageTemplate {
        MessageTemplate(checked: literal(
            "Your sign-in code for %h is %c. It expires in %m minutes. If you did not ask for it, tell your administrator."))
    }

    static var escapes: MFAError {
        .invalidOption("a message template may use only %c (the code), %h (the host name), %m (the minutes it is valid) and %% (a percent sign)")
    }
}
