import ArgumentParser
import Glibc
import MFAAdmin
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll unlock --user NAME`: clears a lockout, including the hard lock after 100
/// consecutive failures that only an admin can lift. Root only.
struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Clear a user's failure count and lockout (root only).")

    @Option(help: ArgumentHelp("The user to unlock.", valueName: "NAME"))
    var user: String

    @OptionGroup var place: AdminPlaceOptions

    func run() throws {
        guard getuid() == 0 else { throw CLIError("unlock is for root only") }
        let context = try CallerContext(user: user, store: place.store, config: place.config)
        let now = Int64(time(nil))
        let store = try context.openStore()
        let before = try storeCall { () throws(MFAError) in try store.unlock(user: context.user, at: now) }
        if before.rebuilt { warn("the state of \(context.userName) was unreadable; it was rebuilt (codes up to now count as used)") }
        let was = before.failures >= UserState.hardFailureCap ? "locked until unlocked"
            : before.lockedUntil > now ? "locked out for \(before.lockedUntil - now) more seconds" : "not locked"
        Audit.log("unlocked (\(before.failures) failures cleared)", context: context)
        print("Unlocked \(context.userName): \(before.failures) consecutive failures cleared (was \(was)).")
    }
}

/// `totp-enroll purge --user NAME`: removes everything the store holds for a user — record,
/// state and lock file. Root only; run it when an account is deleted, so a new account that
/// reuses the name starts with nothing.
struct Purge: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove a user's record, state and lock file (root only; run it when deleting an account).")

    @Option(help: ArgumentHelp("The user to purge (the account may already be deleted).", valueName: "NAME"))
    var user: String

    @OptionGroup var place: AdminPlaceOptions

    func run() throws {
        guard getuid() == 0 else { throw CLIError("purge is for root only") }
        let context = try CallerContext(user: user, store: place.store, config: place.config, requireAccount: false)
        let store = try context.openStore()
        let existed = try storeCall { () throws(MFAError) in try store.purge(user: context.user) }
        if existed {
            Audit.log("purged the record, state and lock", context: context)
            print(store.isFleet ? "Purged \(shown(user)): factors, recovery codes and counters removed from the database."
                                : "Purged \(shown(user)): record, state and lock file removed.")
        } else {
            print("Nothing stored for \(shown(user)).")
        }
    }
}

/// `--store` and `--config` of the root-only commands that name a user with `--user NAME`.
struct AdminPlaceOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Use this store directory instead of /var/lib/pam-totp.", valueName: "DIR"))
    var store: String?

    @Option(help: ArgumentHelp("Read this configuration file instead of /etc/security/pam_totp.conf.", valueName: "FILE"))
    var config: String?
}
