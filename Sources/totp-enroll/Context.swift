import ArgumentParser
import Glibc
import MFACore

/// `--user` and `--store`, shared by the subcommands that act on a user's factors. Both are
/// for root only (real uid 0); everyone else acts for themselves on the configured store.
struct TargetOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Act for this user (root only).", valueName: "NAME"))
    var user: String?

    @Option(help: ArgumentHelp("Use this store directory instead of the configured one, /var/lib/pam-totp by default (root only).",
                               valueName: "DIR"))
    var store: String?

    func context() throws -> CallerContext { try CallerContext(user: user, store: store) }
}

/// Who the tool acts for, and where the store is. `--user` and `--store` are honoured only
/// when the real uid is 0 (DESIGN.md §4.3): anyone else acts for themselves on the default
/// store.
struct CallerContext {
    let userName: String
    let storePath: String

    init(user: String?, store: String?) throws {
        let realUID = getuid()
        if (user != nil || store != nil) && realUID != 0 {
            throw CLIError("--user and --store are for root only")
        }
        if let user {
            guard getpwnam(user) != nil else { throw CLIError("no such user: \(user)") }
            userName = user
        } else {
            guard let pw = getpwuid(realUID), let name = pw.pointee.pw_name else {
                throw CLIError("cannot find the name of uid \(realUID)")
            }
            userName = String(cString: name)
        }
        // The store: --store (root), else store= from /etc/security/pam_totp.conf (root-owned,
        // checked), else the default — the same place the module looks.
        let configured = (try? ModuleOptions.load([]))?.store ?? Store.defaultDirectory
        storePath = store ?? String(decoding: configured, as: UTF8.self)
    }

    /// Opens the store, creating the directory (0700) if it does not exist yet.
    func openStore() throws -> StoreAccess {
        if mkdir(storePath, 0o700) == 0 {
            // New directory: make sure umask did not matter and the owner is us.
            chmod(storePath, 0o700)
        }
        do { return StoreAccess(store: try Store(path: Array(storePath.utf8))) } catch {
            if case .system(_, let e) = error, e == EACCES {
                throw CLIError("cannot open the store \(storePath): permission denied (run as root)")
            }
            throw CLIError(error)
        }
    }
}

/// The CLI's view of the store: MFAErrors become one-line CLI errors.
struct StoreAccess {
    let store: Store

    func readRecord(user: String) throws -> UserRecord? {
        do { return try store.read(user: Array(user.utf8)) } catch { throw CLIError(error) }
    }

    /// Adds a factor under the user's lock (read, append, atomic write) and records `step`, the
    /// time step of the code that proved it, as used: that code cannot log in afterwards.
    /// `recovery`, if given, replaces the user's recovery codes in the same write.
    func addFactor(_ factor: Factor, usedStep step: UInt64, user: String, recovery: RecoverySet? = nil) throws {
        let name = Array(user.utf8)
        do {
            try store.withLock(user: name) { () throws(MFAError) in
                var record = try store.read(user: name) ?? UserRecord()
                if record.factors.contains(where: { $0.label == factor.label }) {
                    throw .invalidParameters("a factor with this name already exists")
                }
                guard record.factors.count < UserRecord.maxFactors else {
                    throw .invalidParameters("too many factors; remove one first")
                }
                record.factors.append(factor)
                if let recovery { record.recovery = recovery }
                var state = try store.readState(user: name)
                state.setLastStep(step, forLabel: factor.label)
                try store.writeLocked(user: name, record: record)
                try store.writeStateLocked(user: name, state: state)
            }
        } catch { throw CLIError(error) }
    }
}

extension StoreAccess {
    /// Clears the failure count and any lockout (root: `totp-enroll unlock`).
    func unlock(user: String) throws -> (failures: UInt32, lockedUntil: Int64) {
        let name = Array(user.utf8)
        do {
            return try store.withLock(user: name) { () throws(MFAError) -> (UInt32, Int64) in
                var state: UserState
                do throws(MFAError) {
                    state = try store.readState(user: name)
                } catch {
                    guard case .corruptRecord = error else { throw error }
                    // An unreadable state is replaced. Its replay guard is rebuilt from the clock:
                    // every factor's steps up to now count as used, so no earlier code replays.
                    warn("the state of \(user) was unreadable; it is rebuilt (codes up to now count as used)")
                    state = UserState()
                    let now = Int64(time(nil))
                    for f in try store.read(user: name)?.factors ?? [] {
                        state.setLastStep((try? TOTP.step(at: now, period: f.parameters.period)) ?? 0, forLabel: f.label)
                    }
                    state.failures = UserState.hardFailureCap  // reported as "was locked"
                }
                let before = (state.failures, state.lockedUntil)
                state.failures = 0
                state.lockedUntil = 0
                try store.writeStateLocked(user: name, state: state)
                return before
            }
        } catch { throw CLIError(error) }
    }
}
