import ArgumentParser
import Glibc
import MFACore

/// `totp-enroll recovery-codes`: a new set of single-use codes, shown once; only their salted
/// PBKDF2 hashes are stored. Replaces the previous set; the TOTP secrets are not touched.
struct RecoveryCodes: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recovery-codes",
        abstract: "Make 10 new single-use recovery codes (replacing any old ones) and show them once.")

    @OptionGroup var target: TargetOptions

    func run() throws {
        let context = try target.context()
        try Privilege.reauthenticate(user: context.userName, code: nil)
        let access = try context.openStore()
        var rng = SystemRandomNumberGenerator()
        let (codes, set) = RecoverySet.generate(count: 10, using: &rng)
        let replaced = try access.replaceRecovery(set, user: context.userName)
        print("Recovery codes for \(context.userName) — each works once at the \"Verification code:\" prompt.")
        print("Store them somewhere safe now: they are not shown again\(replaced ? "; the previous codes no longer work" : "").")
        print("")
        for code in codes {
            let s = String(decoding: code, as: UTF8.self)
            let a = s.prefix(4), b = s.dropFirst(4).prefix(4), c = s.dropFirst(8)
            print("    \(a)-\(b)-\(c)")
        }
    }
}

extension StoreAccess {
    /// Stores `set` as the user's recovery codes; true if it replaced an existing set. The user
    /// must have at least one factor (recovery codes are a fallback, not a factor of their own).
    func replaceRecovery(_ set: RecoverySet, user: String) throws -> Bool {
        let name = Array(user.utf8)
        do {
            return try store.withLock(user: name) { () throws(MFAError) -> Bool in
                guard var record = try store.read(user: name), !record.factors.isEmpty else {
                    throw .invalidParameters("no factor yet: enrol one first (totp-enroll), then make recovery codes")
                }
                let replaced = record.recovery != nil
                record.recovery = set
                try store.writeLocked(user: name, record: record)
                return replaced
            }
        } catch { throw CLIError(error) }
    }

    func readState(user: String) throws -> UserState {
        do { return try store.readState(user: Array(user.utf8)) } catch { throw CLIError(error) }
    }
}
