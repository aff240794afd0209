import CLibc
import CPAM
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// Where one login's verdicts come from, chosen once at its start (`LoginStore.open`): the file
/// store in process (root, backend = files), or pam-totpd — every caller without root (screen
/// lockers), and everyone in fleet mode: only pam-totpd talks to the database, and this module
/// links no database or TLS client (docs/ARCHITECTURE.md, sections 2 and 8). The login flow in
/// Module.swift (`verify`) is one sequence over either; this is the only place they differ.
enum LoginStore {
    case files(Login<Store>)
    case daemon(service: [UInt8])

    /// What is known before the prompt.
    enum Enrolment {
        /// Enrolled: what the login may offer (typed codes, factors a code can be sent to).
        case enrolled(FactorHints)
        case unenrolled
        /// Not asked: pam-totpd is asked before the prompt only when nullok may skip it.
        case unknown
        /// pam-totpd's answer to the look-up was already a verdict (it is unreachable, the
        /// look-up failed): told without a prompt.
        case decided(AuthOutcome)
        case refused(Message)
    }

    /// A verdict, or pam-totpd's refusal to give one.
    enum Verdict {
        case outcome(AuthOutcome)
        case refused(Message)
    }

    static func open(_ pamh: OpaquePointer, user: [UInt8], options: ModuleOptions) -> LoginStore {
        // Only root can read the store; in fleet mode nobody here reads it.
        if clibc_geteuid() != 0 || options.backend == .postgresql { return .daemon(service: serviceName(pamh)) }
        var account: UInt32? = nil  // for the log line below
        var login = Authenticator.lookup(user: user, options: options) { () throws(MFAError) -> Account? in
            let found = try lookupAccount(user)
            account = found?.uid
            return found
        }
        if case .otherAccount(let recordUID) = login.enrollment {
            log(pamh, LOG_WARNING, "the record of user " + printable(user) + " was enrolled for uid " + decimal(recordUID)
                + (account.map { ", not for this account's uid " + decimal($0) } ?? ", and no such account exists")
                + ": not enrolled (remove it with totp-enroll purge --user NAME)")
            login.enrollment = .unenrolled
        }
        return .files(login)
    }

    /// Enrolment at first login is for root callers (sshd, login, su): in process with files;
    /// in fleet mode through pam-totpd, which takes it from root callers only. Never for a
    /// caller without root (a screen locker), whose requests pam-totpd answers for files too.
    /// Before `options.enrollAtLoginUntil`, and never with forward_pass (one question only).
    @_optimize(size)  // cold: only with enroll_at_login
    @inline(never)
    func offersEnrolment(_ options: ModuleOptions) -> Bool {
        guard let until = options.enrollAtLoginUntil, !options.forwardPass, Int64(time(nil)) < until else { return false }
        if case .files = self { return true }
        return options.backend == .postgresql && clibc_geteuid() == 0
    }

    /// Enrolment at first login (`TOTPStore.enrollAtLogin`): `answer` nil, the checks before
    /// anything is shown (no secret leaves this process for them); else the factor saved if
    /// `answer` is its code and the user still has no factor — in process, or by pam-totpd in
    /// its database: the secret leaves this process only in that one request (its frame wiped).
    @_optimize(size)  // cold: not on a login's path
    @inline(never)
    func enrollAtLogin(account: Account, label: [UInt8], secret: [UInt8], answer: [UInt8]?,
                       options: ModuleOptions) throws(MFAError) -> FirstFactor {
        switch self {
        case .files:
            return try Store(path: options.store).enrollAtLogin(user: account.name, accountUID: account.uid, label: label, secret: secret,
                                                                answer: answer, at: Int64(time(nil)), options: options)
        case .daemon(let service):
            let request = DaemonRequest(operation: answer == nil ? .mayEnrolAtLogin : .enrolAtLogin, service: service, user: account.name,
                                        options: options, answer: answer ?? [], newLabel: label, newSecret: answer == nil ? [] : secret)
            switch askDaemon(request, socket: options.socket) {
            case .firstFactor(let result) where (result == .mayEnrol) == (answer == nil) || result == .hadFactor: return result
            case .outcome(.failed(let error)): throw error
            case .refused(let why): throw .daemon(why)
            default: throw .malformed("pam-totpd's reply to an enrolment at login")
            }
        }
    }

    /// Before the prompt. The file store has looked already (it costs no round trip; a failed
    /// look-up still prompts, and is told after, like a wrong code); pam-totpd is asked only
    /// when the answer may skip the prompt.
    func enrolment(user: [UInt8], options: ModuleOptions, mayMatter: Bool) -> Enrolment {
        switch self {
        case .files(let login):
            if case .unenrolled = login.enrollment { return .unenrolled }
            return .enrolled(login.hints(kinds: options.offeredKinds))
        case .daemon(let service):
            // Asked when nullok may skip the prompt, when a code may have to be sent (a kind that
            // is sent is allowed here; with forward_pass, after the password: `after_password`),
            // or when the policy leaves kinds out (a user with none allowed is told so, not prompted).
            guard mayMatter || options.factorKinds != FactorKind.allBits
                    || options.offeredKinds & FactorKind.sentBits != 0 else { return .unknown }
            let request = DaemonRequest(operation: .lookup, service: service, user: user, options: options, answer: [])
            switch askDaemon(request, socket: options.socket) {
            case .enrolled(var hints):
                // Only what this host can send (the daemon answered for every kind allowed).
                var offered: [FactorHint] = []
                for h in hints.sent where options.offeredKinds & h.kind.bit != 0 { offered.append(h) }
                hints.disallowed += hints.sent.count - offered.count
                hints.sent = offered
                return .enrolled(hints)
            case .outcome(.unenrolled): return .unenrolled
            case .outcome(let other): return .decided(other)
            case .refused(let why): return .refused(why)
            case .sent, .notSent, .firstFactor: return .decided(.failed(.malformed("a sent code where a look-up was due")))
            }
        }
    }

    /// Checks the answer and records the outcome. With forward_pass only the answer's last
    /// eight bytes leave this process for pam-totpd (the password never does). `previous`: the
    /// login's answer before, told `resyncNeeded`.
    func authenticate(user: [UInt8], answer: [UInt8], previous: [UInt8]?, options: ModuleOptions) -> Verdict {
        switch self {
        case .files(let login):
            return .outcome(login.authenticate(answer: answer, previous: previous, at: Int64(time(nil)), options: options,
                                               process: UInt32(truncatingIfNeeded: clibc_getpid())))
        case .daemon(let service):
            var sent = options.forwardPass ? Array(answer.suffix(maxCodeDigits)) : answer
            defer { wipe(&sent) }
            switch askDaemon(DaemonRequest(operation: .authenticate, service: service, user: user, options: options, answer: sent,
                                           previous: previous ?? []),
                             socket: options.socket) {
            case .outcome(let outcome): return .outcome(outcome)
            case .refused(let why): return .refused(why)
            case .enrolled, .sent, .notSent, .firstFactor: return .outcome(.failed(.malformed("an enrolment where a verdict was due")))
            }
        }
    }


    /// Asks pam-totpd to send a code to the factor `label` (in process too: only pam-totpd
    /// sends). The reply is `.sent` or `.notSent`; anything else is a failure.
    func send(user: [UInt8], label: [UInt8], service: [UInt8], options: ModuleOptions) -> DaemonReply {
        askDaemon(DaemonRequest(operation: .send, service: service, user: user, options: options, answer: label),
                         socket: options.socket)
    }
}
