import ArgumentParser
import Glibc
import MFAAdmin
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll code`: prints the current code for a secret, like `oathtool --totp`.
struct Code: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the TOTP code for a secret (like oathtool --totp).")

    @Option(help: ArgumentHelp("The Base32 secret, or - to read it from standard input.", valueName: "BASE32"))
    var secret: String

    @Option(help: ArgumentHelp("Unix time to compute the code for (default: now).", valueName: "UNIX_SECONDS"))
    var time: Int64?

    @OptionGroup var otp: OTPOptions

    func run() throws {
        try Privilege.dropPermanently()  // nothing here touches the store
        let key = try readSecret(secret)
        let now = time ?? Int64(Glibc.time(nil))
        do {
            let code = try TOTP.code(secret: key, parameters: try otp.parameters(), at: now)
            print(String(decoding: code, as: UTF8.self))
        } catch let e as MFAError {
            throw CLIError(e)
        }
    }
}
