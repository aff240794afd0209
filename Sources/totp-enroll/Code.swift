import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll code`: prints the current code for a secret, like `oathtool --totp`.
struct Code: Command {
    static let name = "code"
    static let abstract = "Print the TOTP code for a secret (like oathtool --totp)."
    static let specs: [ArgumentSpec] = [
        .option("--secret", "BASE32", "The Base32 secret, or - to read it from standard input.", required: true),
        .option("--time", "UNIX_SECONDS", "Unix time to compute the code for (default: now)."),
    ] + OTPOptions.specs

    let secret: String
    let time: Int64?
    let otp: OTPOptions

    init(_ arguments: Arguments) throws(CommandError) {
        secret = try arguments.required("--secret")
        time = try arguments.integer("--time", Int64.self)
        otp = try OTPOptions(arguments)
    }

    func run() throws(CommandError) {
        try Privilege.dropPermanently()  // nothing here touches the store
        let key = try readSecret(secret)
        let now = time ?? Int64(CLibc.time(nil))
        let parameters = try otp.parameters()
        do throws(MFAError) {
            let code = try TOTP.code(secret: key, parameters: parameters, at: now)
            print(String(decoding: code, as: UTF8.self))
        } catch {
            throw CLIError(error)
        }
    }
}
