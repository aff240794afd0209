import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

@main
enum TOTPEnroll {
    static let program = Program(
        name: "totp-enroll",
        abstract: "Enrol and manage TOTP second factors for pam_totp.",
        discussion: """
            Without a subcommand, runs `enroll`: generates a secret, shows it as a QR code, \
            and saves the factor only after you type a valid code from your authenticator app.
            """,
        root: Subcommand(Enroll.self), rootIsSubcommand: true,
        subcommands: [Subcommand(Enroll.self), Subcommand(AddHOTP.self), Subcommand(AddPhone.self), Subcommand(AddEmail.self), Subcommand(Code.self), Subcommand(List.self),
                      Subcommand(Status.self), Subcommand(Remove.self), Subcommand(RecoveryCodes.self),
                      Subcommand(ImportGoogleAuthenticator.self), Subcommand(ImportPSKC.self), Subcommand(Unlock.self),
                      Subcommand(Purge.self), Subcommand(AuditTrail.self), Subcommand(Policy.self), Subcommand(Check.self)],
        optionsBeforeSubcommand: ["--config", "--store", "--user"])

    static func main() {
        Privilege.sanitize()
        program.main(processArguments().dropFirst().map { String(decoding: $0, as: UTF8.self) })
    }
}

/// One clear line on stderr and a non-zero exit: every command of totp-enroll throws this one
/// type (typed throws, as Embedded Swift needs).
typealias CLIError = CommandError

extension CommandError {
    init(_ description: String) { self = .failure(description) }
    init(_ error: MFAError) { self = .failure(Self.text(error)) }

    static func text(_ error: MFAError) -> String { describe(error, for: .user).string }
}

extension HashAlgorithm {
    /// `--algorithm`: sha1 (the default), sha256 or sha512.
    static func option(_ arguments: Arguments) throws(CommandError) -> HashAlgorithm {
        guard let name = try arguments.choice("--algorithm", ["sha1", "sha256", "sha512"]) else { return .sha1 }
        return HashAlgorithm(name: Array(name.utf8)) ?? .sha1
    }
    static let spec = ArgumentSpec.option("--algorithm", "algorithm", "HMAC algorithm: sha1, sha256 or sha512.")
}

/// `--digits`: 6 (the default), 7 or 8.
func digitsOption(_ arguments: Arguments) throws(CommandError) -> Int {
    let digits = try arguments.integer("--digits", Int.self) ?? 6
    guard OTPParameters.digitsRange.contains(digits) else { throw .usage("--digits must be 6, 7 or 8") }
    return digits
}
let digitsSpec = ArgumentSpec.option("--digits", "digits", "Code length: 6, 7 or 8 digits.")

/// The OTP parameters shared by `enroll` and `code`.
struct OTPOptions {
    static let specs = [HashAlgorithm.spec, digitsSpec, .option("--period", "period", "Time step in seconds (1-3600).")]

    var algorithm: HashAlgorithm
    var digits: Int
    var period: UInt64

    init(_ arguments: Arguments) throws(CommandError) {
        algorithm = try HashAlgorithm.option(arguments)
        digits = try digitsOption(arguments)
        period = try arguments.integer("--period", UInt64.self) ?? 30
        guard OTPParameters.periodRange.contains(period) else { throw .usage("--period must be 1 to 3600") }
    }

    func parameters() throws(CommandError) -> OTPParameters {
        do { return try OTPParameters(algorithm: algorithm, digits: digits, period: period) } catch { throw CLIError(error) }
    }
}

/// Reads a secret given as `--secret B32`, or from standard input with `--secret -` (which
/// keeps it out of the process list).
func readSecret(_ argument: String) throws(CommandError) -> [UInt8] {
    var text = argument
    if argument == "-" {
        guard let line = readStandardInputLine() else { throw CLIError("no secret on standard input") }
        text = line
    }
    let bytes: [UInt8]
    do { bytes = try Base32.decode(Array(text.utf8)) } catch { throw CLIError(error) }
    guard bytes.count >= 10 else { throw CLIError("the secret is too short: at least 80 bits (16 Base32 characters)") }
    guard bytes.count <= 128 else { throw CLIError("the secret is too long: at most 1024 bits") }
    return bytes
}
