import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll enroll`: generate (or take) a secret, show it, and save the factor only after
/// a valid code proves the authenticator has it.
struct Enroll: Command {
    static let name = "enroll"
    static let abstract = "Enrol a new TOTP factor (the default subcommand)."
    static let discussion = """
        Prints the QR code, the Base32 key and the otpauth:// URI, then asks for a code \
        from your authenticator app (3 tries). The factor is saved only after a valid code.
        """
    static let specs = NewFactorOptions.specs + OTPOptions.specs

    let new: NewFactorOptions
    let otp: OTPOptions

    init(_ arguments: Arguments) throws(CommandError) {
        new = try NewFactorOptions(arguments)
        otp = try OTPOptions(arguments)
    }

    func run() throws(CommandError) {
        let parameters = try otp.parameters()
        if parameters != .default {
            warn("note: Google Authenticator, Authy and Microsoft Authenticator ignore non-default algorithm, digits and period; use an app that honours them")
        }
        try new.enrol(.totp(parameters))
    }
}

/// `totp-enroll add-hotp`: a counter-based factor (RFC 4226) from a hardware token or an app,
/// saved only after the code for its counter proves the token has the secret.
struct AddHOTP: Command {
    static let name = "add-hotp"
    static let abstract = "Enrol a counter-based (HOTP) factor: a hardware token or an app in HOTP mode."
    static let discussion = """
        Give the token's secret with --secret (or let one be generated and shown as an \
        otpauth://hotp/ URI for an app), then the code the token shows for --counter (its \
        next button press; 0 for a new token). The factor is saved only after that code, \
        with the token's counter past it: that code never logs in.
        """
    static let specs = NewFactorOptions.specs + [
        HashAlgorithm.spec, digitsSpec,
        .option("--counter", "N", "The counter of the code you will type (the token's next one; 0 for a new token)."),
    ]

    let new: NewFactorOptions
    let algorithm: HashAlgorithm
    let digits: Int
    let counter: UInt64

    init(_ arguments: Arguments) throws(CommandError) {
        new = try NewFactorOptions(arguments)
        algorithm = try HashAlgorithm.option(arguments)
        digits = try digitsOption(arguments)
        counter = try arguments.integer("--counter", UInt64.self) ?? 0
        guard counter < HOTPWindow.maxCounter else { throw .usage("--counter must be below 2^48") }
    }

    func run() throws(CommandError) {
        let parameters: OTPParameters
        do { parameters = try OTPParameters(algorithm: algorithm, digits: digits, period: OTPParameters.default.period) } catch { throw CLIError(error) }
        try new.enrol(.hotp(parameters, counter: counter))
    }
}

/// What a new factor is, and how the code that proves it is checked.
enum NewFactorKind {
    /// Time-based: a code of the window around now.
    case totp(OTPParameters)
    /// Counter-based: the code of `counter` exactly; saved with the counter past it.
    case hotp(OTPParameters, counter: UInt64)

    var parameters: OTPParameters {
        switch self {
        case .totp(let p), .hotp(let p, _): return p
        }
    }

    var prompt: String {
        switch self {
        case .totp: return "Verification code from your app: "
        case .hotp(_, let counter): return "Code for counter \(counter) from your token: "
        }
    }

    /// The factor `answer` proves (its step or counter recorded as used), nil if it proves none.
    func factor(answer: [UInt8], key: [UInt8], label: String, at now: Int64) throws(CommandError) -> Factor? {
        let hmacKey = HMACKey(algorithm: parameters.algorithm, key: key)
        do throws(MFAError) {
            switch self {
            case .totp(let p):
                guard let step = try TOTPVerifier().verify(answer: answer, key: hmacKey, parameters: p, at: now) else { return nil }
                return try Factor(label: Array(label.utf8), parameters: p, created: now, enrolledStep: step, secret: key)
            case .hotp(let p, let counter):
                guard constantTimeEqual(answer, HOTP.code(key: hmacKey, counter: counter, digits: p.digits)) else { return nil }
                return try Factor(kind: .hotp, label: Array(label.utf8), parameters: p, created: now, counter: counter + 1, secret: key)
            }
        } catch { throw CLIError(error) }
    }
}

/// The options every new factor takes (`enroll`, `add-hotp`), and the enrolment they share:
/// checks, proof of the caller, the secret shown, the code that proves it, one commit.
struct NewFactorOptions {
    static let maxTries = 3
    static let deadlineSeconds: Int64 = 300

    static let specs = TargetOptions.specs + FactorNameOptions.specs + [
        .option("--secret", "BASE32", "Use this Base32 secret instead of generating one; - reads it from standard input."),
        .option("--code", "CODE", "Finish with this code instead of asking for one."),
    ] + SecretDisplayOptions.specs

    let target: TargetOptions
    let naming: FactorNameOptions
    let secret: String?
    let code: String?
    let display: SecretDisplayOptions

    init(_ arguments: Arguments) throws(CommandError) {
        target = TargetOptions(arguments)
        naming = try FactorNameOptions(arguments)
        secret = arguments.string("--secret")
        code = arguments.string("--code")
        display = try SecretDisplayOptions(arguments)
        if display.quiet {
            guard secret != nil else { throw .usage("--quiet needs --secret: a generated key would never be shown") }
            guard display.files.isEmpty else { throw .usage("--quiet writes no secret: leave out --qr-svg and --qr-png") }
        }
    }

    func enrol(_ kind: NewFactorKind) throws(CommandError) {
        let context = try target.context()
        let store = try context.openStore()
        let host = hostNameString()
        let label = naming.label(user: context.userName, host: host)
        var given = try secret.map(readSecret)
        defer { if given != nil { wipe(&given!) } }

        // Everything that can be checked is checked before the password and a code are spent
        // (docs/ARCHITECTURE.md, section 4): the label, the secret, the QR files.
        try checkEnrollable(store, context, label: label, secret: given)
        for path in display.files { try probeNewFileAsCaller(path) }

        // Not root: prove who you are (password, and a current code if you already have a
        // factor) before any secret is generated or shown.
        try Proof.require(context, store: store, code: nil)
        var key = given ?? Secret.generate(for: kind.parameters.algorithm)
        defer { wipe(&key) }
        let started = Int64(time(nil))

        var uri = naming.uri(user: context.userName, host: host, secret: key, parameters: kind.parameters)
        if case .hotp(_, let counter) = kind { uri.counter = counter }
        try display.show(uri, key: key)
        try confirmAndSave(kind, key: key, label: label, started: started, store: store, context: context)
    }

    /// Asks for a code (3 tries, or --code once) within `deadlineSeconds` of `started`; the
    /// first that verifies saves the factor with the step or counter that proved it, in one commit.
    func confirmAndSave(_ kind: NewFactorKind, key: [UInt8], label: String, started: Int64,
                        store: EnrolStore, context: CallerContext) throws(CommandError) {
        for attempt in 1...Self.maxTries {
            let answer: String
            if let code {
                answer = code
            } else {
                guard let line = promptLine(kind.prompt) else {
                    throw CLIError("no code entered; nothing was saved")
                }
                answer = line
            }
            let now = Int64(time(nil))
            guard now - started <= Self.deadlineSeconds else {
                throw CLIError("enrolment took longer than \(Self.deadlineSeconds / 60) minutes; nothing was saved, run totp-enroll again")
            }
            let digitsOnly = Array(answer.utf8).filter { $0 != 0x20 }
            if let factor = try kind.factor(answer: digitsOnly, key: key, label: label, at: now) {
                // One commit: the factor and the step that proved it (that code cannot log in).
                try storeCall { () throws(MFAError) in try store.enroll(user: context.user, accountUID: context.uid, factor: factor) }
                Audit.log("enrolled factor \"\(Audit.safe(label))\"", context: context)
                print("Enrolled factor \"\(shown(label))\" for \(context.userName).")
                if !display.quiet && code == nil { try offerRecoveryCodes(store: store, context: context) }
                return
            }
            if code != nil || attempt == Self.maxTries { break }
            if case .hotp = kind {
                warn("that code is not the one for this counter; check --counter and try again (\(Self.maxTries - attempt) left)")
            } else {
                warn("that code is not valid; check the time on your phone and try again (\(Self.maxTries - attempt) left)")
            }
        }
        throw CLIError("the code did not verify; nothing was saved")
    }

    /// After an interactive enrolment: a user without recovery codes is offered a set (the
    /// same proof covers it: the password, and a code if they had a factor, plus the new code).
    func offerRecoveryCodes(store: EnrolStore, context: CallerContext) throws(CommandError) {
        guard let status = try? store.status(user: context.user), status.record.recovery == nil else { return }
        fflush(nil)
        guard let answer = promptLine("You have no recovery codes (each logs you in once if you lose your phone). Make 10 now? [Y/n] "),
              !answer.lowercased().hasPrefix("n") else {
            print("No recovery codes made; run totp-enroll recovery-codes any time.")
            return
        }
        try issueRecoveryCodes(store: store, context: context, replacing: false)
    }
}

/// `--name` and `--issuer` of `enroll`: what the factor is called in `list`, in logs and in the app.
struct FactorNameOptions {
    static let specs: [ArgumentSpec] = [
        .option("--name", "LABEL", "A name for this factor, shown by `list` and in logs (default USER@HOST)."),
        .option("--issuer", "TEXT", "Issuer shown by the authenticator app (default: this host's name)."),
    ]

    let name: String?
    let issuer: String?

    init(_ arguments: Arguments) throws(CommandError) {
        name = try newFactorName(arguments)
        issuer = arguments.string("--issuer")
    }

    /// The factor's label: --name, else USER@HOST.
    func label(user: String, host: String) -> String { name ?? user + "@" + host }

    /// The account shown by the app names the factor too (`alice (phone)`), so two factors of
    /// one user are told apart; the default label (USER@HOST) is shown as it is.
    func uri(user: String, host: String, secret: [UInt8], parameters: OTPParameters) -> OTPAuthURI {
        let account = name.map { user + " (" + $0 + ")" } ?? label(user: user, host: host)
        return OTPAuthURI(issuer: Array((issuer ?? host).utf8), account: Array(account.utf8),
                          secret: secret, parameters: parameters)
    }
}

/// `--qr`, `--quiet`, `--qr-svg` and `--qr-png` of `enroll`: how the new secret is shown.
struct SecretDisplayOptions {
    static let specs: [ArgumentSpec] = [
        .option("--qr", "qr", "How to show the QR code in the terminal: utf8 (half blocks) or ansi (two cells a module), both in explicit black on white, readable on light and dark terminals; none."),
        .flag("--quiet", "Print no secret (no QR code, key or URI) and offer no recovery codes: for scripts that give --secret and --code."),
        .option("--qr-svg", "FILE", "Also write the QR code to this new SVG file (never overwritten)."),
        .option("--qr-png", "FILE", "Also write the QR code to this new PNG file (never overwritten)."),
    ]

    let qr: QRStyle
    let quiet: Bool
    let qrSVG: String?
    let qrPNG: String?

    init(_ arguments: Arguments) throws(CommandError) {
        qr = try arguments.choice("--qr", QRStyle.allCases.map { $0.rawValue }).flatMap(QRStyle.init(rawValue:)) ?? .utf8
        quiet = arguments.flag("--quiet")
        qrSVG = arguments.string("--qr-svg")
        qrPNG = arguments.string("--qr-png")
    }

    /// The QR files asked for, SVG first.
    var files: [String] { [qrSVG, qrPNG].compactMap { $0 } }

    /// Shows the new factor: the QR files first (as the caller: if one cannot be written, the
    /// key is not shown), the QR code in the terminal, the key and the URI; nothing if --quiet.
    func show(_ uri: OTPAuthURI, key: [UInt8]) throws(CommandError) {
        if !quiet && (qr != .none || qrSVG != nil || qrPNG != nil) {
            let matrix = try QRMatrix(uri.string)
            // docs/ARCHITECTURE.md, section 4.3.
            if let qrSVG { try writeFileAsCaller(qrSVG, Array(svg(matrix).utf8)) }
            if let qrPNG { try writeFileAsCaller(qrPNG, png(matrix: matrix)) }
            for path in files {
                print("Wrote the QR code to \(shown(path)); it holds the secret key, delete it once scanned.")
            }
            if qr == .utf8 { print(renderUTF8(matrix)) }
            if qr == .ansi { print(renderANSI(matrix)) }
        }
        if !quiet {
            print("Key:  \(groupedKey(key))")
            print("URI:  \(uri.string)")
            print("")
        }
        fflush(nil)
    }

    func groupedKey(_ key: [UInt8]) -> String {
        let text = Base32.encodeString(key)
        var out = ""
        for (i, c) in text.enumerated() {
            if i > 0 && i % 4 == 0 { out += " " }
            out.append(c)
        }
        return out
    }
}

func hostNameString() -> String { String(decoding: hostName(), as: UTF8.self) }

/// `--name LABEL` of a command that makes factors: checked as every new factor's label is.
func newFactorName(_ arguments: Arguments) throws(CommandError) -> String? {
    guard let name = arguments.string("--name") else { return nil }
    do { try Factor.validateNew(label: Array(name.utf8)) } catch { throw .usage(CLIError.text(error)) }
    return name
}

func warn(_ text: String) {
    writeStderr(text + "\n")
}

/// Asks on stderr, reads a line from stdin; nil on end of input.
func promptLine(_ text: String) -> String? {
    writeStderr(text)
    return readStandardInputLine()
}

/// One line of standard input without its "\n" (or "\r\n"); nil at end of input before any
/// byte. Read a byte at a time (no read-ahead: the next line stays for the next reader) and at
/// most 64 KiB kept (the rest of a longer line is read and dropped). Embedded Swift has no
/// `readLine`.
func readStandardInputLine() -> String? {
    var line: [UInt8] = []
    var byte: UInt8 = 0
    var sawAny = false
    var ended = false  // by a newline, not by the end of input
    while true {
        let n = read(0, &byte, 1)
        if n < 0 && clibc_errno() == EINTR { continue }
        guard n == 1 else { break }
        sawAny = true
        if byte == 0x0A { ended = true; break }
        if line.count < 65536 { line.append(byte) }
    }
    guard sawAny else { return nil }
    if ended && line.last == 0x0D { line.removeLast() }  // "\r\n", as readLine; a lone final "\r" stays
    return String(decoding: line, as: UTF8.self)
}

func writeStderr(_ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        if n <= 0 { if n < 0 && clibc_errno() == EINTR { continue }; return }
        offset += n
    }
}
