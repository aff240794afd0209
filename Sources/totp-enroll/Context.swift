import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `--user` and `--store`, shared by the subcommands that act on a user's factors. Both are
/// for root only (real uid 0); everyone else acts for themselves on the configured store.
struct TargetOptions {
    static let specs: [ArgumentSpec] = [
        .option("--user", "NAME", "Act for this user (root only)."),
        .option("--store", "DIR", "Use this store directory instead of the configured one, /var/lib/pam-totp by default (root only)."),
        .option("--config", "FILE", "Read this configuration file instead of /etc/security/pam_totp.conf (root only)."),
    ]

    var user: String?
    var store: String?
    var config: String?

    init(_ arguments: Arguments) {
        user = arguments.string("--user")
        store = arguments.string("--store")
        config = arguments.string("--config")
    }

    func context() throws(CommandError) -> CallerContext { try CallerContext(user: user, store: store, config: config) }
}

/// `--config FILE` of the root-only commands (`audit`, `policy`, `unlock`, `purge`).
struct ConfigFileOption {
    static let spec = ArgumentSpec.option("--config", "FILE", "Read this configuration file instead of /etc/security/pam_totp.conf.")
    var config: String?
    init(_ arguments: Arguments) { config = arguments.string("--config") }
}

/// `--json` of `status` and `audit`.
struct JSONOutputOption {
    static let spec = ArgumentSpec.flag("--json", "One JSON document on standard output, for scripts and monitoring.")
    var json: Bool
    init(_ arguments: Arguments) { json = arguments.flag("--json") }
}

extension Command {
    /// The commands for root only (real uid 0) refuse everyone else with one line.
    static func requireRoot() throws(CommandError) {
        guard getuid() == 0 else { throw CLIError("\(name) is for root only") }
    }
}

/// `--config FILE` (root only): the configuration read instead of the default file.
nonisolated(unsafe) var siteConfigFile: String? = nil

/// Who the tool acts for, and where the store is. `--user` and `--store` are honoured only
/// when the real uid is 0 (docs/ARCHITECTURE.md, section 4.3): anyone else acts for themselves on the
/// configured store.
struct CallerContext {
    let userName: String
    /// The account's uid: the store binds a record to it.
    let uid: UInt32
    let storePath: String
    /// Fleet mode (backend = postgresql): pam-totpd's socket, through which every operation
    /// goes (only the daemon talks to the database). nil: the files at `storePath`.
    let daemonSocket: String?

    var user: [UInt8] { Array(userName.utf8) }

    init(user: String?, store: String?, config: String? = nil, requireAccount: Bool = true) throws(CommandError) {
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
        (storePath, daemonSocket) = try Self.where(store: store)
    }

    /// The store: --store (root: these files, also on a fleet host, e.g. before import-files),
    /// else what /etc/security/pam_totp.conf (root-owned, checked) says — the same place the
    /// module looks: the files of store=, or in fleet mode pam-totpd at socket=.
    static func `where`(store: String?) throws(CommandError) -> (path: String, socket: String?) {
        if let store { return (store, nil) }
        let site = try siteOptions()
        let path = String(decoding: site.store, as: UTF8.self)
        switch site.backend {
        case .files: return (path, nil)
        case .postgresql: return (path, String(decoding: site.socket, as: UTF8.self))
        }
    }

    /// Opens the store: the files (the directory created 0700 if it does not exist yet), or
    /// pam-totpd in fleet mode.
    func openStore() throws(CommandError) -> EnrolStore { try Self.openStore(at: storePath, socket: daemonSocket) }

    static func openStore(at storePath: String, socket: String?) throws(CommandError) -> EnrolStore {
        if let socket { return .daemon(DaemonStore.overSocket(socket, storePath: storePath)) }
        if mkdir(storePath, 0o700) == 0 {
            // New directory: make sure umask did not matter and the owner is us.
            chmod(storePath, 0o700)
        }
        do { return .files(try Store(path: Array(storePath.utf8))) } catch {
            if case .system(_, let e) = error, e == .permissionDenied {
                throw CLIError("cannot open the store \(shown(storePath)): permission denied (run as root)")
            }
            throw CLIError(error)
        }
    }
}

extension DaemonStore {
    /// pam-totpd at `socket` (only a listener running as root is spoken to).
    static func overSocket(_ socket: String, storePath: String) -> DaemonStore {
        let path = Array(socket.utf8)
        return DaemonStore(storePath: Array(storePath.utf8)) { (frame, _, sent) throws(MFAError) -> [UInt8] in
            let admin = DaemonProtocol.adminFrameLength(header: frame.prefix(DaemonProtocol.headerSize), reply: false) != nil
            return try DaemonConnection.exchange(frame, socket: path, replyMagic: admin ? DaemonProtocol.adminReplyMagic : DaemonProtocol.replyMagic,
                                                 sent: &sent)
        }
    }
}

/// The store totp-enroll works on: this host's files, or pam-totpd on a host in fleet mode.
/// The same operations either way (the store interface); this only picks the implementation.
enum EnrolStore {
    case files(Store)
    case daemon(DaemonStore)

    var isFleet: Bool { if case .daemon = self { return true }; return false }

    func status(user: [UInt8]) throws(MFAError) -> UserStatus? {
        switch self { case .files(let s): return try s.status(user: user); case .daemon(let s): return try s.status(user: user) }
    }
    func users() throws(MFAError) -> [[UInt8]] {
        switch self { case .files(let s): return try s.users(); case .daemon(let s): return try s.users() }
    }
    func checkEnrollable(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8]?) throws(MFAError) {
        switch self {
        case .files(let s): try s.checkEnrollable(user: user, accountUID: accountUID, label: label, secret: secret)
        case .daemon(let s): try s.checkEnrollable(user: user, accountUID: accountUID, label: label, secret: secret)
        }
    }
    @discardableResult
    func enroll(user: [UInt8], accountUID: UInt32, factor: Factor, importedCodes: [[UInt8]]? = nil) throws(MFAError) -> Int {
        var rng = SystemRandomNumberGenerator()
        switch self {
        case .files(let s): return try s.enroll(user: user, accountUID: accountUID, factor: factor, importedCodes: importedCodes, using: &rng)
        case .daemon(let s):
            do throws(MFAError) {
                return try s.enroll(user: user, accountUID: accountUID, factor: factor, importedCodes: importedCodes, using: &rng)
            } catch {
                // (How many imported codes were left out is not known then: 0.)
                try Self.unconfirmed(error, s, user) { status in
                    status?.record.factor(labelled: factor.label).map { $0.created == factor.created && $0.data.enrolledStep == factor.data.enrolledStep } ?? false
                }
                return 0
            }
        }
    }
    func removeFactor(user: [UInt8], accountUID: UInt32, label: [UInt8], mayRemoveLast: Bool) throws(MFAError) -> Int {
        switch self {
        case .files(let s): return try s.removeFactor(user: user, accountUID: accountUID, label: label, mayRemoveLast: mayRemoveLast)
        case .daemon(let s):
            do throws(MFAError) {
                return try s.removeFactor(user: user, accountUID: accountUID, label: label, mayRemoveLast: mayRemoveLast)
            } catch {
                var left = 0
                try Self.unconfirmed(error, s, user) { status in
                    left = status?.record.factors.count ?? 0
                    return status?.record.factor(labelled: label) == nil
                }
                return left
            }
        }
    }
    func replaceRecovery(user: [UInt8], accountUID: UInt32, set: RecoverySet) throws(MFAError) -> Bool {
        switch self {
        case .files(let s): return try s.replaceRecovery(user: user, accountUID: accountUID, set: set)
        case .daemon(let s):
            do throws(MFAError) {
                return try s.replaceRecovery(user: user, accountUID: accountUID, set: set)
            } catch {
                try Self.unconfirmed(error, s, user) { $0?.record.recovery?.id == set.id }
                return true
            }
        }
    }

    /// Fleet mode: a change pam-totpd did not confirm (`DaemonStore.isUnconfirmed`: its request
    /// was out when the reply was lost, or the daemon's database connection failed) may have
    /// been made all the same. Returns if the user's status shows it (`made`); else throws the
    /// error, which says so: nobody is told "nothing was changed" about a change that may be in
    /// the database. Any other error is thrown as it is (nothing changed).
    static func unconfirmed(_ error: MFAError, _ s: DaemonStore, _ user: [UInt8],
                            made: (UserStatus?) -> Bool) throws(MFAError) {
        guard DaemonStore.isUnconfirmed(error) else { throw error }
        if let status = try? s.status(user: user), made(status) { return }
        throw error
    }

    func unlock(user: [UInt8], at now: Int64) throws(MFAError) -> UnlockResult {
        switch self { case .files(let s): return try s.unlock(user: user, at: now); case .daemon(let s): return try s.unlock(user: user, at: now) }
    }
    func purge(user: [UInt8]) throws(MFAError) -> Bool {
        switch self { case .files(let s): return try s.purge(user: user); case .daemon(let s): return try s.purge(user: user) }
    }
    func auditTrail(user: [UInt8]?, since: Int64, after: UInt64, limit: Int) throws(MFAError) -> [AuditEvent] {
        switch self {
        case .files: throw AuditEvent.notKept
        case .daemon(let s): return try s.auditTrail(user: user, since: since, after: after, limit: limit)
        }
    }

    /// A code checked like a login (failure count, lockout, replay guard) for the account
    /// `uid`: a name enrolled for another account is not enrolled.
    func verify(user: [UInt8], uid: UInt32, answer: [UInt8], at now: Int64, options: ModuleOptions, process: UInt32) throws(MFAError) -> AuthOutcome {
        switch self {
        case .files(let s): return try Self.verify(s, user: user, uid: uid, answer: answer, at: now, options: options, process: process)
        case .daemon(let s): return try Self.verify(s, user: user, uid: uid, answer: answer, at: now, options: options, process: process)
        }
    }

    static func verify<S: TOTPStore>(_ s: S, user: [UInt8], uid: UInt32, answer: [UInt8], at now: Int64,
                                     options: ModuleOptions, process: UInt32) throws(MFAError) -> AuthOutcome {
        var enrollment = try s.lookup(user: user, accountUID: uid)
        if case .otherAccount = enrollment { enrollment = .unenrolled }
        return s.authenticate(answer: answer, at: now, options: options, process: process, enrollment: enrollment)
    }
}

/// The checks of an enrolment, before anything is shown or asked (docs/ARCHITECTURE.md, section 4), with
/// the label named in the message.
func checkEnrollable(_ store: EnrolStore, _ context: CallerContext, label: String, secret: [UInt8]?) throws(CommandError) {
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
func siteOptions() throws(CommandError) -> ModuleOptions {
    let arguments = siteConfigFile.map { [Array(("config=" + $0).utf8)] } ?? []
    do { return try ModuleOptions.load(arguments) } catch {
        throw CLIError("\(CLIError.text(error)); fix \(siteConfigFile ?? "/etc/security/pam_totp.conf") (pam_totp(8))")
    }
}

/// Runs a store operation, turning its MFAError into one CLI line.
func storeCall<R>(_ body: () throws(MFAError) -> R) throws(CommandError) -> R {
    do { return try body() } catch { throw CLIError(error) }
}

/// Text from the store or the command line as it may be printed: control characters, C1
/// controls and bidi overrides escaped (docs/ARCHITECTURE.md, section 4.11).
func shown(_ bytes: [UInt8]) -> String { String(decoding: escapedForTerminal(bytes), as: UTF8.self) }
func shown(_ text: String) -> String { shown(Array(text.utf8)) }

/// One authpriv line per change to an enrolment: who (real uid) did what, for whom, which
/// label; never a secret or a code (docs/ARCHITECTURE.md, section 4.10).
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
