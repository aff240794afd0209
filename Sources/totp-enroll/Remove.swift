import ArgumentParser
import Glibc
import MFACore

/// `totp-enroll remove LABEL`: deletes one factor. Anyone but root re-authenticates first
/// (password and a current code from any factor, through the PAM service totp-enroll), and
/// cannot remove their last factor unless the site's pam_totp configuration has nullok.
struct Remove: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove a factor (needs a current code from any factor, or root).")

    @Argument(help: "The label of the factor to remove (see `totp-enroll list`).")
    var label: String

    @OptionGroup var target: TargetOptions

    @Option(help: ArgumentHelp("A current code from any of your factors (asked for if omitted).", valueName: "CODE"))
    var code: String?

    func run() throws {
        let context = try target.context()
        // Not root: the PAM service totp-enroll asks for the password and a current code
        // (pam_totp), and `--code` answers the code prompt.
        try Privilege.reauthenticate(user: context.userName, code: code)
        let access = try context.openStore()
        let siteAllowsNone = (try? ModuleOptions.load([]))?.nullok ?? false
        let remaining = try access.removeFactor(Array(label.utf8), user: context.userName,
                                                mayRemoveLast: getuid() == 0 || siteAllowsNone)
        print("Removed factor \"\(label)\" from \(context.userName); \(remaining) factor\(remaining == 1 ? "" : "s") left.")
        if remaining == 0 { print("\(context.userName) has no factor now: their recovery codes were removed too.") }
    }
}

extension StoreAccess {
    /// Removes the factor under the user's lock; returns the number left.
    func removeFactor(_ label: [UInt8], user: String, mayRemoveLast: Bool) throws -> Int {
        let name = Array(user.utf8)
        do {
            return try store.withLock(user: name) { () throws(MFAError) -> Int in
                guard var record = try store.read(user: name), let index = record.factors.firstIndex(where: { $0.label == label }) else {
                    throw .invalidParameters("no factor with that label (see totp-enroll list)")
                }
                guard record.factors.count > 1 || mayRemoveLast else {
                    throw .invalidParameters("this is your last factor and logins here require one; enrol another first, or ask root")
                }
                record.factors.remove(at: index)
                if record.factors.isEmpty {
                    try store.removeLocked(user: name)
                } else {
                    try store.writeLocked(user: name, record: record)
                }
                return record.factors.count
            }
        } catch { throw CLIError(error) }
    }
}
