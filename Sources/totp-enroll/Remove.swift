import ArgumentParser
import Glibc
import MFACore

/// `totp-enroll remove LABEL`: deletes one factor. Anyone but root proves possession first with
/// a current code from any of their factors (which is then used up), and cannot remove their
/// last factor unless the site's pam_totp configuration allows users without one (nullok).
struct Remove: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove a factor (needs a current code from any factor, or root).")

    @Argument(help: "The label of the factor to remove (see `totp-enroll list`).")
    var label: String

    @Option(help: ArgumentHelp("Act for this user (root only).", valueName: "NAME"))
    var user: String?

    @Option(help: ArgumentHelp("A current code from any of your factors (asked for if omitted).", valueName: "CODE"))
    var code: String?

    @Option(help: ArgumentHelp("Use this store directory instead of /var/lib/pam-totp (root only).", valueName: "DIR"))
    var store: String?

    func run() throws {
        let context = try CallerContext(user: user, store: store)
        let access = try context.openStore()
        let isRoot = getuid() == 0
        var answer: [UInt8] = []
        if !isRoot {
            guard let text = code ?? promptLine("Current verification code: ") else {
                throw CLIError("no code entered; nothing was removed")
            }
            answer = Array(text.utf8).filter { $0 != 0x20 }
        }
        let siteAllowsNone = (try? ModuleOptions.load([]))?.nullok ?? false
        let remaining = try access.removeFactor(Array(label.utf8), user: context.userName, proof: isRoot ? nil : answer,
                                                mayRemoveLast: isRoot || siteAllowsNone)
        print("Removed factor \"\(label)\" from \(context.userName); \(remaining) factor\(remaining == 1 ? "" : "s") left.")
        if remaining == 0 { print("\(context.userName) has no factor now: their recovery codes were removed too.") }
    }
}

extension StoreAccess {
    /// Removes the factor under the user's lock. `proof` (nil for root) must be a current code
    /// of any factor at an unused step; it is recorded as used. Returns the number left.
    func removeFactor(_ label: [UInt8], user: String, proof: [UInt8]?, mayRemoveLast: Bool) throws -> Int {
        let name = Array(user.utf8)
        do {
            return try store.withLock(user: name) { () throws(MFAError) -> Int in
                guard var record = try store.read(user: name), let index = record.factors.firstIndex(where: { $0.label == label }) else {
                    throw .invalidParameters("no factor with that label (see totp-enroll list)")
                }
                var state = try store.readState(user: name)
                if let proof {
                    var options = ModuleOptions()
                    options.maxFailures = 100
                    let outcome = try Authenticator.decide(record: record, state: &state, answer: proof, at: Int64(time(nil)),
                                                           verifier: try TOTPVerifier(), options: options) { (s) throws(MFAError) in
                        try store.writeStateLocked(user: name, state: s)
                    }
                    guard case .success = outcome else {
                        throw .invalidParameters("that code is not valid (or was already used, or the account is locked); nothing was removed")
                    }
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
