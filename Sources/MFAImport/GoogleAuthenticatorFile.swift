import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// Only totp-enroll imports these files; the module never does (MFAImport is not in its build).

/// A `~/.google_authenticator` file (google-authenticator-libpam's FILEFORMAT): line 1 the
/// Base32 secret; option lines `" NAME [args]`; scratch codes, eight digits each. Parsed
/// strictly: any line that is none of these is an error naming its number (but not its
/// contents, which could be a code or the secret). Blank lines are allowed, as the module
/// skips them; a trailing '\r' is tolerated.
///
/// Errors are `invalidParameters` with a message that names the line ("line 3: ...") and never
/// contains the secret or a code; the caller prefixes the file's name.
public struct GoogleAuthenticatorFile: Sendable {
    public static let maxSize = 64 * 1024  // what pam_google_authenticator itself accepts
    public static let defaultStepSize: UInt64 = 30
    public static let defaultWindowSize = 3
    public static let hotpRefusal: Message =
        "HOTP-mode files cannot be imported: pam_totp supports TOTP only; re-enrol the user with totp-enroll"

    public var secret: [UInt8] = []
    public var totp = false
    public var stepSize: UInt64?
    public var windowSize: Int?
    public var disallowReuse = false
    /// The time steps listed after DISALLOW_REUSE: codes already used.
    public var usedSteps: [UInt64] = []
    public var rateLimit: (attempts: Int, interval: Int)?
    public var timeSkew: Int64?
    public var resettingTimeSkew = false
    public var scratchCodes: [[UInt8]] = []

    /// The options this parser knows, in the order of the bits of `seen`.
    static let optionNames: [[UInt8]] = [
        literal("TOTP_AUTH"), literal("STEP_SIZE"), literal("WINDOW_SIZE"), literal("DISALLOW_REUSE"),
        literal("RATE_LIMIT"), literal("TIME_SKEW"), literal("RESETTING_TIME_SKEW"),
    ]
    static let hotpCounter = literal("HOTP_COUNTER")
    static let quote: UInt8 = 0x22

    public init(parsing bytes: [UInt8]) throws(MFAError) {
        guard !bytes.isEmpty else { throw .invalidParameters("the file is empty") }
        guard bytes.count <= Self.maxSize else {
            throw .invalidParameters("the file is larger than 64 KiB; not a google-authenticator file")
        }
        guard !bytes.contains(0) else {
            throw .invalidParameters("the file contains a NUL byte; not a google-authenticator file")
        }
        var lines = bytes.split(separator: ASCII.newline, omittingEmptySubsequences: false).map { line -> ArraySlice<UInt8> in
            line.last == 0x0D ? line.dropLast() : line
        }
        if bytes.last == ASCII.newline { lines.removeLast() }

        // The mode first: an HOTP file gets the one line that says why, whatever else is in it.
        for line in lines.dropFirst() where Self.optionName(line)?.elementsEqual(Self.hotpCounter) == true {
            throw .invalidParameters(Self.hotpRefusal)
        }

        guard let first = lines.first, !first.isEmpty else {
            throw Self.fail(1, "no secret (the first line must be the Base32 secret)")
        }
        do throws(MFAError) { secret = try Base32.decode(first) } catch { throw Self.fail(1, "the secret is not valid Base32") }
        guard secret.count >= 10 else {
            wipe(&secret)
            throw Self.fail(1, "the secret is shorter than 80 bits; enrol a new one with totp-enroll")
        }
        guard secret.count <= 128 else { wipe(&secret); throw Self.fail(1, "the secret is longer than 1024 bits") }

        var seen: UInt32 = 0  // one bit per entry of optionNames
        var number = 1
        for line in lines.dropFirst() {
            number += 1
            if line.allSatisfy({ $0 == ASCII.space || $0 == ASCII.tab }) { continue }
            if line.first == Self.quote {
                do throws(MFAError) { try parseOption(line, seen: &seen) } catch {
                    erase()
                    if case .invalidParameters(let why) = error { throw Self.fail(number, why) }
                    throw error
                }
                continue
            }
            guard line.count == 8, line.allSatisfy(ASCII.isDigit), line.first != ASCII.zero else {
                erase()
                throw Self.fail(number, "neither an option (\" NAME) nor a scratch code (8 digits)")
            }
            guard scratchCodes.count < RecoverySet.maxCodes else {
                erase()
                let max = Message(decimalBytes(UInt64(RecoverySet.maxCodes)))
                throw Self.fail(number, "more than " + max + " scratch codes; pam_totp keeps at most " + max)
            }
            scratchCodes.append(Array(line))
        }
        guard totp else {
            erase()
            throw .invalidParameters(
                "no TOTP_AUTH line: google-authenticator did not use this secret for time-based codes; enrol the user with totp-enroll")
        }
    }

    static func fail(_ line: Int, _ why: Message) -> MFAError {
        .invalidParameters("line " + Message(decimalBytes(UInt64(line))) + ": " + why)
    }

    /// The option name of a `" NAME ...` line, or nil.
    static func optionName(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard line.count > 2, line.first == quote, line[line.startIndex + 1] == ASCII.space else { return nil }
        return line.dropFirst(2).prefix { $0 != ASCII.space && $0 != ASCII.tab }
    }

    /// A decimal of at most 19 digits (no sign) inside `range`.
    static func number(_ s: ArraySlice<UInt8>, _ range: ClosedRange<UInt64>, _ what: Message) throws(MFAError) -> UInt64 {
        guard s.count <= 19, let v = parseDecimal(s, limit: range.upperBound), range.contains(v) else {
            throw .invalidParameters(what)
        }
        return v
    }

    mutating func parseOption(_ line: ArraySlice<UInt8>, seen: inout UInt32) throws(MFAError) {
        guard let name = Self.optionName(line), !name.isEmpty else {
            throw .invalidParameters("an option line must start with '\" ' and a name")
        }
        let args = line.dropFirst(2 + name.count).split(whereSeparator: { $0 == ASCII.space || $0 == ASCII.tab })
        // The name as it may be printed: at most 32 bytes, printable ASCII only.
        let shown = Message(name.prefix(32).map { $0 >= 0x20 && $0 < 0x7F ? $0 : 0x3F })
        guard let index = Self.optionNames.firstIndex(where: { $0.elementsEqual(name) }) else {
            throw .invalidParameters("unknown option " + shown)
        }
        let bit = UInt32(1) << UInt32(index)
        guard seen & bit == 0 else { throw .invalidParameters(shown + " appears twice") }
        seen |= bit
        switch index {
        case 0:  // TOTP_AUTH
            guard args.isEmpty else { throw .invalidParameters("TOTP_AUTH takes no value") }
            totp = true
        case 1:  // STEP_SIZE
            guard args.count == 1 else { throw .invalidParameters("STEP_SIZE needs one value, 1 to 60") }
            stepSize = try Self.number(args[0], 1...60, "STEP_SIZE must be 1 to 60 seconds")
        case 2:  // WINDOW_SIZE
            guard args.count == 1 else { throw .invalidParameters("WINDOW_SIZE needs one value, 1 to 100") }
            windowSize = Int(try Self.number(args[0], 1...100, "WINDOW_SIZE must be 1 to 100"))
        case 3:  // DISALLOW_REUSE
            disallowReuse = true
            for a in args {
                usedSteps.append(try Self.number(a, 0...UInt64(UInt32.max), "DISALLOW_REUSE lists time steps (numbers)"))
            }
        case 4:  // RATE_LIMIT
            guard args.count >= 2 else {
                throw .invalidParameters("RATE_LIMIT needs two values: attempts (1-100) and seconds (1-3600)")
            }
            let attempts = try Self.number(args[0], 1...100, "RATE_LIMIT attempts must be 1 to 100")
            let interval = try Self.number(args[1], 1...3600, "RATE_LIMIT seconds must be 1 to 3600")
            for a in args.dropFirst(2) {
                _ = try Self.number(a, 0...UInt64(UInt32.max), "RATE_LIMIT is followed by time stamps (numbers)")
            }
            rateLimit = (Int(attempts), Int(interval))
        case 5:  // TIME_SKEW
            guard args.count == 1 else { throw .invalidParameters("TIME_SKEW needs one value") }
            let a = args[0]
            let negative = a.first == 0x2D
            let magnitude = try Self.number(negative || a.first == 0x2B ? a.dropFirst() : a, 0...1_000_000,
                                            "TIME_SKEW must be a number of steps")
            timeSkew = negative ? -Int64(magnitude) : Int64(magnitude)
        default:  // RESETTING_TIME_SKEW
            // Pairs "step+skew" or "step-skew" the module keeps while it learns a skew; dropped.
            for a in args {
                let what: Message = "RESETTING_TIME_SKEW lists step+skew pairs"
                guard let sign = a.firstIndex(where: { $0 == 0x2B || $0 == 0x2D }) else { throw .invalidParameters(what) }
                _ = try Self.number(a[..<sign], 0...UInt64(UInt32.max), what)
                _ = try Self.number(a[(sign + 1)...], 0...UInt64(Int32.max), what)
            }
            resettingTimeSkew = true
        }
    }

    /// Overwrites the secret and the codes.
    public mutating func erase() {
        wipe(&secret)
        for i in scratchCodes.indices { wipe(&scratchCodes[i]) }
        scratchCodes.removeAll()
    }
}
