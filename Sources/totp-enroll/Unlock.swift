import ArgumentParser
import Glibc
import MFACore

/// `totp-enroll unlock --user NAME`: clears a lockout, including the hard lock after 100
/// consecutive failures that only an admin can lift. Root only.
struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Clear a user's failure count and lockout (root only).")

    @Option(help: ArgumentHelp("The user to unlock.", valueName: "NAME"))
    var user: String

    @Option(help: ArgumentHelp("Use this store directory instead of /var/lib/pam-totp.", valueName: "DIR"))
    var store: String?

    func run() throws {
        guard getuid() == 0 else { throw CLIError("unlock is for root only") }
        let context = try CallerContext(user: user, store: store)
        let before = try context.openStore().unlock(user: context.userName)
        let now = Int64(time(nil))
        let was = before.failures >= UserState.hardFailureCap ? "locked until unlocked"
            : before.lockedUntil > now ? "locked out for \(before.lockedUntil - now) more seconds" : "not locked"
        print("Unlocked \(context.userName): \(before.failures) consecutive failures cleared (was \(was)).")
    }
}
