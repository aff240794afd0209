import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll remove LABEL`: deletes one factor. Anyone but root re-authenticates first
/// (password, and a current code from any factor), and can never remove their own last
/// factor; root can (that is how an admin takes a user off two-factor logins).
struct Remove: Command {
    static let name = "remove"
    static let abstract = "Remove a factor (needs a current code from any factor, or root; never your own last factor)."
    static let specs: [ArgumentSpec] = [.argument("label", "The label of the factor to remove (see `totp-enroll list`).")]
        + TargetOptions.specs + [.option("--code", "CODE", "A current code from any of your factors (asked for if omitted).")]

    let label: String
    let target: TargetOptions
    let code: String?

    init(_ arguments: Arguments) throws(CommandError) {
        label = try arguments.required("label")
        target = TargetOptions(arguments)
        code = arguments.string("--code")
    }

    func run() throws(CommandError) {
        let context = try target.context()
        let store = try context.openStore()
        let isRoot = getuid() == 0
        // Checked before the password and a code are spent.
        let status = try storeCall { () throws(MFAError) in try store.status(user: context.user) }
        guard let record = status?.record, record.factor(labelled: Array(label.utf8)) != nil else {
            throw CLIError("\(context.userName) has no factor named \"\(shown(label))\" (see totp-enroll list)")
        }
        if record.factors.count == 1 && !isRoot {
            throw CLIError("\"\(shown(label))\" is your last factor: enrol another one first (only root can remove a user's last factor)")
        }
        try Proof.require(context, store: store, code: code)
        let remaining = try storeCall { () throws(MFAError) in
            try store.removeFactor(user: context.user, accountUID: context.uid, label: Array(label.utf8), mayRemoveLast: isRoot)
        }
        Audit.log("removed factor \"\(Audit.safe(label))\"", context: context)
        print("Removed factor \"\(shown(label))\" from \(context.userName); \(remaining) factor\(remaining == 1 ? "" : "s") left.")
        if remaining == 0 { print("\(context.userName) has no factor now: their recovery codes were removed too.") }
    }
}
