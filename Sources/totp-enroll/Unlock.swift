import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll unlock --user NAME`: clears a lockout, including the hard lock after 100
/// consecutive failures that only an admin can lift. Root only.
struct Unlock: NamedUserCommand {
    static let name = "unlock"
    static let abstract = "Clear a user's failure count and lockout (root only)."
    static let userHelp = "The user to unlock."

    let target: NamedUserOptions<Unlock>

    init(_ arguments: Arguments) throws(CommandError) { target = try NamedUserOptions(arguments) }

    func run() throws(CommandError) {
        let context = try target.context()
        let now = Int64(time(nil))
        let store = try context.openStore()
        let before = try storeCall { () throws(MFAError) in try store.unlock(user: context.user, at: now) }
        if before.rebuilt { warn("the state of \(context.userName) was unreadable; it was rebuilt (codes up to now count as used; "
                                    + "a hardware token's counter was lost with it: remove and add-hotp the token again)") }
        let was = before.failures >= UserState.hardFailureCap ? "locked until unlocked"
            : before.lockedUntil > now ? "locked out for \(before.lockedUntil - now) more seconds" : "not locked"
        Audit.log("unlocked (\(before.failures) failures cleared)", context: context)
        print("Unlocked \(context.userName): \(before.failures) consecutive failures cleared (was \(was)).")
    }
}

/// `totp-enroll purge --user NAME`: removes everything the store holds for a user — record,
/// state and lock file. Root only; run it when an account is deleted, so a new account that
/// reuses the name starts with nothing.
struct Purge: NamedUserCommand {
    static let name = "purge"
    static let abstract = "Remove a user's record, state and lock file (root only; run it when deleting an account)."
    static let userHelp = "The user to purge (the account may already be deleted)."
    static let requireAccount = false

    let target: NamedUserOptions<Purge>

    init(_ arguments: Arguments) throws(CommandError) { target = try NamedUserOptions(arguments) }

    func run() throws(CommandError) {
        let context = try target.context()
        let store = try context.openStore()
        let existed = try storeCall { () throws(MFAError) in try store.purge(user: context.user) }
        if existed {
            Audit.log("purged the record, state and lock", context: context)
            print(store.isFleet ? "Purged \(shown(target.user)): factors, recovery codes and counters removed from the database."
                                : "Purged \(shown(target.user)): record, state and lock file removed.")
        } else {
            print("Nothing stored for \(shown(target.user)).")
        }
    }
}

/// A root-only command that acts on one user named with `--user NAME` (`unlock`, `purge`).
protocol NamedUserCommand: Command {
    /// The help line of its `--user NAME`.
    static var userHelp: String { get }
    /// false: the account may already be deleted.
    static var requireAccount: Bool { get }
}

extension NamedUserCommand {
    static var requireAccount: Bool { true }
    static var specs: [ArgumentSpec] { NamedUserOptions<Self>.specs }
}

/// `--user NAME`, `--store DIR` and `--config FILE` of a `NamedUserCommand`.
struct NamedUserOptions<Command: NamedUserCommand> {
    static var specs: [ArgumentSpec] {
        [.option("--user", "NAME", Command.userHelp, required: true),
         .option("--store", "DIR", "Use this store directory instead of /var/lib/pam-totp."), ConfigFileOption.spec]
    }

    let user: String
    let store: String?
    let site: ConfigFileOption

    init(_ arguments: Arguments) throws(CommandError) {
        user = try arguments.required("--user")
        store = arguments.string("--store")
        site = ConfigFileOption(arguments)
    }

    /// Root only: the named user on the store.
    func context() throws(CommandError) -> CallerContext {
        try Command.requireRoot()
        return try CallerContext(user: user, store: store, config: site.config, requireAccount: Command.requireAccount)
    }
}
