import ArgumentParser
import CLibc
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

    @Option(help: ArgumentHelp("Read this configuration file instead of /etc/security/pam_totp.conf (root only).", valueName: "FILE"))
    var config: String?

    func context() throws -> CallerContext { try CallerContext(user: user, store: store, config: config) }
}

/// `--config FILE` (root only): the configuration read instead of the default file.
nonisolated(unsafe) var siteConfigFile: String? = nil

/// Who the tool acts for, and where the store is. `--user` and `--store` are honoured only
/// when the real uid is 0 (docs/ARCHITECTURE.md §4.3): anyone else acts for themselves on the
/// configured store.
struct CallerContext {
    let userName: String
    /// The account's uid: the store binds a record to it.
    let uid: UInt32
    let storePath: String

    var user: [UInt8] { Array(userName.utf8) }

    init(user: String?, store: String?, config: String? = nil, requireAccount: Bool = true) throws {
        let realUID = getuid()
        if (user != nil || store != nil || config != nil) && realUID != 0 {
            throw CLIError("--user, --store and --config are for root only")
        }
        if let config { siteConfigFile = config }
        if let user {
            if let pw = getpwnam(user), let canonical = pw.pointee.pw_name {
                uid = pw.pointee.pw_uid
                // The record is stored under the account's own spelling of its name, as the
                // module looks it up (a case-insensitive directory may accept others).
                userName = String(cString: canonical)
            } else if requireAccount {
                throw CLIError("no such user: \(shown(user))")
            } else {
                uid = UInt32.max
                userName = user
            }
        } else {
            guard let pw = getpwuid(realUID), let name = pw.pointee.pw_name else {
                throw CLIError("cannot find the name of uid \(realUID)")
            }
            userName = String(cString: name)
            uid = realUID
        }
        // The store: --store (root), else store= from /etc/security/pam_totp.conf (root-owned,
        // checked), else the default — the same place the module looks.
        if let store { storePath = store } else {
            let site = try siteOptions()
            // Fleet mode: enrolments live in the database, and this tool does not reach it yet.
            // Writing the local files would look like success while no login ever reads them.
            guard site.backend == .files else {
                throw CLIError("this host is in fleet mode (backend = postgresql in \(siteConfigFile ?? "/etc/security/pam_totp.conf")): "
                               + "totp-enroll cannot change enrolments in the database yet; nothing was changed (README, Fleet)")
            }
            storePath = String(decoding: site.store, as: UTF8.self)
        }
    }

    /// Opens the store, creating the directory (0700) if it does not exist yet.
    func openStore() throws -> Store { try Self.openStore(at: storePath) }

    static func openStore(at storePath: String) throws -> Store {
        if mkdir(storePath, 0o700) == 0 {
            // New directory: make sure umask did not matter and the owner is us.
            chmod(storePath, 0o700)
        }
        do { return try Store(path: Array(storePath.utf8)) } catch {
            if case .system(_, let e) = error, e == EACCES {
                throw CLIError("cannot open the store \(shown(storePath)): permission denied (run as root)")
            }
            throw CLIError(error)
        }
    }
}

/// The checks of an enrolment, before anything is shown or asked (docs/ARCHITECTURE.md §4), with
/// the label named in the message.
func checkEnrollable(_ store: Store, _ context: CallerContext, label: String, secret: [UInt8]?) throws {
    if let status = try storeCall({ () throws(MFAError) in try store.status(user: context.user) }),
       status.record.factor(labelled: Array(label.utf8)) != nil {
        throw CLIError("a factor named \"\(shown(label))\" already exists for \(context.userName); choose another --name")
    }
    try storeCall { () throws(MFAError) in
        try store.checkEnrollable(user: context.user, accountUID: context.uid, label: Array(label.utf8), secret: secret)
    }
}

/// The site's settings, as the module reads them (`/etc/security/pam_totp.conf`, checked):
/// the store, and the window and failure limits of the tool's own code check. A broken or
/// unsafe file is an error here too — the module refuses every login with it, and the tool
/// must not quietly act on another store or other limits.
func siteOptions() throws -> ModuleOptions {
    let arguments = siteConfigFile.map { [Array(("config=" + $0).utf8)] } ?? []
    do { return try ModuleOptions.load(arguments) } catch {
        throw CLIError("\(CLIError.text(error)); fix \(siteConfigFile ?? "/etc/security/pam_totp.conf") (pam_totp(8))")
    }
}

/// Runs a store operation, turning its MFAError into one CLI line.
func storeCall<R>(_ body: () throws(MFAError) -> R) throws -> R {
    do { return try body() } catch { throw CLIError(error) }
}

/// Text from the store or the command line as it may be printed: control characters, C1
/// controls and bidi overrides escaped (docs/ARCHITECTURE.md §4.11).
func shown(_ bytes: [UInt8]) -> String { String(decoding: escapedForTerminal(bytes), as: UTF8.self) }
func shown(_ text: String) -> String { shown(Array(text.utf8)) }

/// One authpriv line per change to an enrolment: who (real uid) did what, for whom, which
/// label; never a secret or a code (docs/ARCHITECTURE.md §4.10).
enum Audit {
    static func log(_ what: String, context: CallerContext) {
        let caller = getuid()
        let callerName = getpwuid(caller).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "?"
        let line = "uid \(caller) (\(safe(callerName))) \(what) for user \(safe(context.userName))"
        openlog("totp-enroll", LOG_PID, LOG_AUTHPRIV)
        clibc_syslog(LOG_NOTICE, line)
        closelog()
    }

    /// Labels and names in a log line: printable ASCII only.
    static func safe(_ text: String) -> String { printable(Array(text.utf8)).string }
}
