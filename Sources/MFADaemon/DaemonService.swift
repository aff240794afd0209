import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// What pam-totpd does with one request, apart from the socket (docs/ARCHITECTURE.md, section 5.2): who
// may ask about whom, which settings apply, and the store operation — so the rules are tested
// here with an injected account look-up and clock, and the daemon is only transport.

/// The caller at the other end of the socket, from the kernel (SO_PEERCRED), never from the
/// request.
public struct PeerCredentials: Equatable, Sendable {
    public var uid: UInt32
    public var pid: UInt32
    public init(uid: UInt32, pid: UInt32) { (self.uid, self.pid) = (uid, pid) }
    public var isRoot: Bool { uid == 0 }
}

/// How pam-totpd sends a code (text message, email): pam-totpd's delivery (the configured
/// program, run as the delivery user) and its per-daemon limit; tests pass a recorder.
public struct CodeSender {
    /// Takes one of the daemon's sends for this minute (`oob_max_per_minute`); false: none left.
    public var takeSlot: () -> Bool
    /// Sends `code` to `destination` by `kind`, valid `minutes`: nil when sent, else why not
    /// (for the log: never the code, never the message).
    public var send: (_ kind: FactorKind, _ destination: [UInt8], _ code: [UInt8], _ minutes: Int64) -> SendFailure?

    public init(takeSlot: @escaping () -> Bool,
                send: @escaping (_ kind: FactorKind, _ destination: [UInt8], _ code: [UInt8], _ minutes: Int64) -> SendFailure?) {
        self.takeSlot = takeSlot
        self.send = send
    }
}

/// Why a code was not sent, for the log; `started`: the program ran (and may have handed the
/// message on before it failed or was killed), so the send still counts toward the limits.
public struct SendFailure: Equatable, Sendable {
    public var why: Message
    public var started: Bool
    public init(_ why: Message, started: Bool) { (self.why, self.started) = (why, started) }
}

/// A module request's answer (`DaemonService.handleDeferring`): the reply and its log line,
/// or, for a code to send, the delivery that makes them (run after the account is let go).
public struct Answered {
    public var reply: DaemonReply
    public var log: Message
    public var deliver: (() -> (reply: DaemonReply, log: Message))?

    public init(_ answer: (reply: DaemonReply, log: Message)) { (reply, log, deliver) = (answer.reply, answer.log, nil) }
    public init(deliver: @escaping () -> (reply: DaemonReply, log: Message)) {
        (reply, log, self.deliver) = (.notSent(""), "", deliver)
    }
}

public struct DaemonService<S: TOTPStore> {
    /// The daemon's own settings (its configuration file): the store, and the least strict
    /// limits a caller without root gets.
    public let site: ModuleOptions
    /// Opens the store at a path.
    let openStore: ([UInt8]) throws(MFAError) -> S
    /// Fleet mode: the database's audit trail. nil: the store keeps none (`AuditEvent.notKept`).
    let auditTrail: AuditEvent.Source?
    /// How codes are sent; nil: this daemon sends none (no sms_command or email_command).
    let sender: CodeSender?
    /// The uids of `trusted_callers` (an authentication server such as FreeRADIUS's freerad):
    /// they may ask about any user, as root may; nothing else.
    let trustedUIDs: [UInt32]

    public init(site: ModuleOptions, openStore: @escaping ([UInt8]) throws(MFAError) -> S, auditTrail: AuditEvent.Source? = nil,
                sender: CodeSender? = nil, trustedUIDs: [UInt32] = []) {
        self.site = site
        self.openStore = openStore
        self.auditTrail = auditTrail
        self.sender = sender
        self.trustedUIDs = trustedUIDs.filter { $0 != 0 }
    }

    /// Whether `peer` may ask about any user: root, or a trusted caller (`trusted_callers`).
    public func mayAskAboutAnyone(_ peer: PeerCredentials) -> Bool { peer.isRoot || trustedUIDs.contains(peer.uid) }

    /// The settings one request runs with. Root could read the store itself, so its module's
    /// settings are taken as sent. Anyone else gets the daemon's store, and the request may
    /// only make the limits stricter: a caller that writes its own requests cannot widen the
    /// window or raise the failure limit.
    public func effectiveOptions(_ request: DaemonRequest, peer: PeerCredentials) -> ModuleOptions {
        if peer.isRoot {
            // The daemon's own limits on what is sent (its file only; no request carries them).
            var o = request.options
            o.oobDestinationMaxPerHour = site.oobDestinationMaxPerHour
            o.oobDestinationMaxPerDay = site.oobDestinationMaxPerDay
            o.oobAllowedPrefixes = site.oobAllowedPrefixes
            return o
        }
        var o = site
        o.forwardPass = request.options.forwardPass
        o.codeAfterPassword = request.options.codeAfterPassword
        o.nullok = request.options.nullok
        o.debug = site.debug || request.options.debug
        o.adjacentIntervals = min(site.adjacentIntervals, request.options.adjacentIntervals)
        o.hotpWindow = min(site.hotpWindow, request.options.hotpWindow)
        o.hotpResyncWindow = min(site.hotpResyncWindow, request.options.hotpResyncWindow)
        o.maxFailures = min(site.maxFailures, request.options.maxFailures)
        o.siteMaxFailures = site.maxFailures
        o.lockoutSeconds = max(site.lockoutSeconds, request.options.lockoutSeconds)
        let r = request.options
        o.factorKinds = site.factorKinds & r.factorKinds
        o.oobDigits = max(site.oobDigits, r.oobDigits)
        o.oobMaxAttempts = min(site.oobMaxAttempts, r.oobMaxAttempts)
        o.oobLifetime = min(site.oobLifetime, r.oobLifetime)
        o.oobResendInterval = max(site.oobResendInterval, r.oobResendInterval)
        o.oobMaxPerHour = min(site.oobMaxPerHour, r.oobMaxPerHour)
        o.oobMaxPerDay = min(site.oobMaxPerDay, r.oobMaxPerDay)
        return o
    }

    /// Answers one request. `account` looks a name up in NSS (canonical name and uid; nil: no
    /// such account; it throws when the look-up fails). The returned line is for the log:
    /// what was asked and decided, never an answer, code or secret.
    public func handle(_ request: DaemonRequest, peer: PeerCredentials, at now: Int64,
                       account: ([UInt8]) throws(MFAError) -> Account?) -> (reply: DaemonReply, log: Message) {
        let answered = handleDeferring(request, peer: peer, at: now, account: account)
        return answered.deliver?() ?? (answered.reply, answered.log)
    }

    /// `handle`, with a send's delivery (the sender, up to 10 s) left to the caller:
    /// pam-totpd runs it after it has let the account's other requests go (`Server.dispatch`),
    /// so a slow text-message gateway never holds up another terminal's login.
    public func handleDeferring(_ request: DaemonRequest, peer: PeerCredentials, at now: Int64,
                                account: ([UInt8]) throws(MFAError) -> Account?) -> Answered {
        // Built in one buffer (each `+` of Messages would allocate another: this runs per request).
        var line: [UInt8] = []
        line.reserveCapacity(320)  // the words, two numbers, two printable() fields of at most 131 bytes
        line.append(literal: "uid ")
        line.append(contentsOf: decimalBytes(UInt64(peer.uid)))
        line.append(literal: " pid ")
        line.append(contentsOf: decimalBytes(UInt64(peer.pid)))
        line.append(literal: " service ")
        line.append(contentsOf: printable(request.service).bytes)
        line.append(literal: " user ")
        line.append(contentsOf: printable(request.user).bytes)
        line.append(literal: ": ")
        let who = Message(line)
        // The account is looked up at most once per request.
        var cached: Account?? = nil
        func lookupAccount() throws(MFAError) -> Account? {
            if let cached { return cached }
            let found = try account(request.user)
            cached = .some(found)
            return found
        }
        // The account NSS gives for the name asked about. Its canonical name is the one every
        // store operation below uses: records are stored under it, and a spelling a directory
        // resolves to it ("ALICE", "alice " in a case-insensitive LDAP) must find that record,
        // never read as "no record", which nullok would let through. A failed look-up denies.
        let resolved: Account?
        do throws(MFAError) { resolved = try lookupAccount() } catch {
            return Answered((.outcome(.failed(error)), who + "account look-up failed"))
        }
        // Enrolment at first login carries a new factor: only a root caller's module offers it
        // (sshd, login, su), never a program of the user's own (a screen locker), which would
        // add a factor with the password alone, skipping the stack it runs under. Nor a trusted
        // caller's (trusted_callers): they may ask about anyone, never add a factor.
        if request.operation.carriesFactor && !peer.isRoot {
            return Answered((.refused("enrolment at login through pam-totpd needs a root caller"),
                             who + "refused: enrolment at login needs a root caller"))
        }
        if !mayAskAboutAnyone(peer) {
            // A caller without root asks only about the account whose uid is its own.
            guard let resolved, resolved.uid == peer.uid else {
                return Answered((.refused("a caller without root may only ask about its own account"),
                                 who + "refused: not the caller's own account"))
            }
        }
        let user = resolved?.name ?? request.user
        let options = effectiveOptions(request, peer: peer)
        if request.operation.carriesFactor { return Answered(enrolAtLogin(request, user: user, account: resolved, options: options, at: now, who: who)) }
        if request.operation == .send { return send(request, user: user, account: resolved, options: options, at: now, who: who) }
        return Answered(handleNow(request, user: user, options: options, at: now, who: who, account: lookupAccount, peer: peer))
    }

    /// lookup and authenticate.
    func handleNow(_ request: DaemonRequest, user: [UInt8], options: ModuleOptions, at now: Int64, who: Message,
                   account lookupAccount: () throws(MFAError) -> Account?, peer: PeerCredentials) -> (reply: DaemonReply, log: Message) {
        if request.operation == .authenticate {
            let previous: [UInt8]? = request.previous.isEmpty ? nil : request.previous
            // One step (for a database: one statement), with the same outcomes as lookup + authenticate.
            let outcome: AuthOutcome
            do throws(MFAError) {
                try FileStore<LiveSystemCalls>.validate(user: user)
                let store = try openStore(options.store)
                outcome = store.login(user: user, account: lookupAccount, answer: request.answer, previous: previous,
                                      at: now, options: options, process: peer.pid)
            } catch {
                outcome = Login<S>(store: nil, enrollment: error == .invalidUserName ? .unenrolled : .failed(error))
                    .authenticate(answer: request.answer, previous: previous, at: now, options: options, process: peer.pid)
            }
            return (.outcome(outcome), who + Self.logText(outcome))
        }
        // `lookup` (authenticate returned above): a name enrolled for another account is not enrolled.
        let enrollment: Enrollment<S>
        do throws(MFAError) {
            try FileStore<LiveSystemCalls>.validate(user: user)
            enrollment = try openStore(options.store).lookup(user: user, account: lookupAccount)
        } catch {
            enrollment = error == .invalidUserName ? .unenrolled : .failed(error)
        }
        switch enrollment {
        case .enrolled(let enrolled):
            var hints: FactorHints
            do throws(MFAError) { hints = try openStore(options.store).hints(enrolled, kinds: options.factorKinds) } catch {
                return (.outcome(.failed(error)), who + "lookup failed")
            }
            // The code's digits only to a module that asks (code_after_password): a module
            // from before them takes a reply with them for malformed.
            if !options.codeAfterPassword { hints.codeDigits = 6 }
            return (.enrolled(hints), who + "lookup: enrolled")
        case .unenrolled, .otherAccount: return (.outcome(.unenrolled), who + "lookup: not enrolled")
        case .failed(let e): return (.outcome(.failed(e)), who + "lookup failed")
        }
    }

    /// Enrolment at first login (ops 4 and 5, root callers only: `handleDeferring`): whether the
    /// store accepts the request's new factor for the account (nothing changed), or the factor
    /// saved if the answer is its code and the user still has no factor (`TOTPStore.enrollAtLogin`).
    /// The secret is never logged.
    func enrolAtLogin(_ request: DaemonRequest, user: [UInt8], account: Account?, options: ModuleOptions, at now: Int64,
                      who: Message) -> (reply: DaemonReply, log: Message) {
        let label = " (factor " + printable(request.newLabel) + ")"
        guard let account else {
            return (.outcome(.failed(.refusal(.noSuchAccount))), who + "enrolment at login: no such account")
        }
        let check = request.operation == .mayEnrolAtLogin
        do throws(MFAError) {
            try FileStore<LiveSystemCalls>.validate(user: user)
            let result = try openStore(options.store).enrollAtLogin(user: user, accountUID: account.uid, label: request.newLabel,
                                                                    secret: request.newSecret, answer: check ? nil : request.answer,
                                                                    at: now, options: options)
            switch result {
            case .mayEnrol: return (.firstFactor(result), who + "enrolment at login may be offered" + label)
            case .enrolled: return (.firstFactor(result), who + "enrolled at login" + label)
            case .wrongCode: return (.firstFactor(result), who + "enrolment at login: the code did not verify; nothing saved" + label)
            case .hadFactor:
                return (.firstFactor(result), who + "enrolment at login: the user has a factor; nothing " + (check ? "offered" : "added") + label)
            }
        } catch {
            return (.outcome(.failed(error)), who + "enrolment at login failed" + label + ": " + describe(error))
        }
    }

    /// `send`: a code to the factor the request names (its answer field), within the
    /// account's limits (the store's, under its lock) and the daemon's (`CodeSender.takeSlot`).
    /// The code is recorded, hashed, before it is sent; a send that fails is voided and not
    /// counted, and the user is told to use another factor.
    func send(_ request: DaemonRequest, user: [UInt8], account: Account?, options: ModuleOptions, at now: Int64,
              who: Message) -> Answered {
        let label = request.answer
        guard let account else { return Answered((.notSent("no text-message or email factor of that name"), who + "send: no such account")) }
        if sender == nil && !S.queuesCodes {
            return Answered((.notSent("codes cannot be sent from this host: use your app or a recovery code"),
                             who + "send refused: pam-totpd has no sms_command or email_command"))
        }
        let store: S
        let plan: SendPlan
        var generator = SystemRandomNumberGenerator()
        do throws(MFAError) {
            try FileStore<LiveSystemCalls>.validate(user: user)
            store = try openStore(options.store)
            plan = try store.sendCode(user: user, accountUID: account.uid, label: label, at: now, options: options, using: &generator)
        } catch {
            return Answered((.notSent(Self.notSentText), who + "send failed: " + describe(error)))
        }
        switch plan {
        case .refused(let why):
            return Answered((.notSent(why), who + "send refused (factor " + printable(label) + "): " + why))
        case .pending(let factor, let sentAt, let expiresAt):
            return Answered((.sent(fresh: false, sentAt: sentAt, expiresAt: expiresAt, masked: factor.maskedDestination),
                             who + "asked again for the code sent at " + utcTimeText(sentAt) + " (factor " + printable(factor.label) + ")"))
        case .queued(let hint, let fresh, let sentAt, let expiresAt):
            let what = fresh ? "queued a code (" + Message(Array(bytes(hint.kind.name))) + " factor " + printable(hint.label) + ", "
                + Message(hint.masked) + ") for the database's outbox"
                : "asked again for the code sent at " + utcTimeText(sentAt) + " (factor " + printable(hint.label) + ")"
            return Answered((.sent(fresh: fresh, sentAt: sentAt, expiresAt: expiresAt, masked: hint.masked), who + what))
        case .send(let sentCode, let factor, _, let expiresAt):
            guard let sender else { return Answered((.notSent(Self.notSentText), who + "send failed: no sender")) }
            // Recorded: the delivery runs once the caller has let the account's other requests go.
            return Answered { () -> (reply: DaemonReply, log: Message) in
            let code = sentCode
            defer { wipeInPlace(code) }
            let kind = Message(Array(bytes(factor.kind.name)))
            let key = PendingCode.binding(for: factor)
            switch Self.deliver(sender, store, user: user, factor: factor, code: code, key: key, sentAt: now, lifetime: options.oobLifetime) {
            case .sent: break
            case .noSlot(let voided):
                return (.notSent(Self.noSlotText),
                        who + "send refused (factor " + printable(factor.label) + "): oob_max_per_minute reached" + voided)
            case .failed(let why):
                return (.notSent(Self.notSentText),
                        who + "could not send a code (" + kind + " factor " + printable(factor.label) + ", "
                        + Message(factor.maskedDestination) + "): " + why)
            }
            return (.sent(fresh: true, sentAt: now, expiresAt: expiresAt, masked: factor.maskedDestination),
                    who + "sent a code (" + kind + " factor " + printable(factor.label) + ", " + Message(factor.maskedDestination) + ")")
            }
        }
    }

    /// totp-enroll's code for a new phone or address: recorded (hashed) by the store, sent,
    /// voided if the send failed. Root only (handleAdmin): totp-enroll re-authenticated its caller.
    func sendEnrolmentCode(_ store: S, user: [UInt8], uid: UInt32, factor: Factor, at now: Int64,
                           who: Message) throws(MFAError) -> (reply: AdminReply, log: Message) {
        if sender == nil && !S.queuesCodes {
            return (.refused("codes cannot be sent from this host: pam-totpd has no sms_command or email_command"),
                    who + "enrolment code refused: no sms_command or email_command")
        }
        var generator = SystemRandomNumberGenerator()
        let kind = Message(Array(bytes(factor.kind.name)))
        switch try store.sendEnrolmentCode(user: user, accountUID: uid, factor: factor, at: now, options: site, using: &generator) {
        case .refused(let why):
            return (.refused(why), who + "enrolment code refused (" + kind + " factor " + printable(factor.label) + "): " + why)
        case .pending:
            return (.refused("a code is already on its way"), who + "enrolment code: one is pending")
        case .queued(let hint, _, let sentAt, _):
            return (.number(sentAt), who + "queued an enrolment code (" + kind + " factor " + printable(factor.label) + ", "
                    + Message(hint.masked) + ") for the database's outbox")
        case .send(let code, _, _, _):
            defer { wipeInPlace(code) }
            guard let sender else { return (.refused("could not send a code; nothing was saved"), who + "no sender") }
            let key = OutOfBand.enrolmentBinding(for: factor)
            switch Self.deliver(sender, store, user: user, factor: factor, code: code, key: key, sentAt: now, lifetime: site.oobLifetime) {
            case .sent: break
            case .noSlot(let voided):
                return (.refused(Self.noSlotText), who + "enrolment code refused: oob_max_per_minute reached" + voided)
            case .failed(let why):
                return (.refused("could not send a code to " + Message(factor.maskedDestination) + "; nothing was saved"),
                        who + "could not send an enrolment code (" + kind + " factor " + printable(factor.label) + ", "
                        + Message(factor.maskedDestination) + "): " + why)
            }
            return (.number(now), who + "sent an enrolment code (" + kind + " factor " + printable(factor.label) + ", "
                    + Message(factor.maskedDestination) + ")")
        }
    }

    /// How a recorded code's delivery went (`deliver`): the log text of a refusal or failure,
    /// with what voiding the code said.
    enum Delivered { case sent, noSlot(Message), failed(Message) }

    /// One delivery of a recorded code, for a login's send and an enrolment's alike: the
    /// daemon's per-minute slot, the sender, and the code voided when it did not go (its send
    /// uncounted when the program never ran).
    static func deliver(_ sender: CodeSender, _ store: S, user: [UInt8], factor: Factor, code: [UInt8], key: [UInt8], sentAt: Int64,
                        lifetime: Int64) -> Delivered {
        guard sender.takeSlot() else { return .noSlot(void(store, user: user, sentAt: sentAt, key: key, uncount: true)) }
        guard let failure = sender.send(factor.kind, factor.destination ?? [], code, (lifetime + 59) / 60) else { return .sent }
        return .failed(failure.why + void(store, user: user, sentAt: sentAt, key: key, uncount: !failure.started))
    }

    static var noSlotText: Message { "too many codes are being sent from this host: try again in a minute" }

    /// What a user is told when a code could not be sent.
    static var notSentText: Message { "could not send a code: use your app or a recovery code" }

    /// Voids a code whose send failed; "" when done, else why not for the log line (a code
    /// that may have been delivered and is still valid is worth saying).
    static func void(_ store: S, user: [UInt8], sentAt: Int64, key: [UInt8], uncount: Bool) -> Message {
        do throws(MFAError) {
            try store.voidSentCode(user: user, sentAt: sentAt, binding: key, uncount: uncount)
            return ""
        } catch {
            return "; the code could not be voided: " + describe(error)
        }
    }

    /// Audit events read from the store for one reply page.
    static var auditFetch: Int { 100 }

    static func logText(_ outcome: AuthOutcome) -> Message {
        switch outcome {
        case .success(let factor, _, _, let jump):
            guard let jump else { return "accepted code (factor " + printable(factor) + ")" }
            return "accepted code (factor " + printable(factor) + "); its clock drift jumped from "
                + Message(signedDecimal(jump.from)) + " to " + Message(signedDecimal(jump.to)) + " steps"
        case .recoveryCode(let remaining): return "accepted a recovery code (" + Message(decimalBytes(UInt64(max(remaining, 0)))) + " left)"
        case .wrongCode(let replayed, let failures, let lockedUntil):
            return (replayed ? "replayed code (" : "wrong code (") + Message(decimalBytes(UInt64(failures)))
                + " consecutive failures)" + (lockedUntil.map { "; locked out until " + utcTimeText($0) } ?? "")
        case .resyncNeeded(let failures):
            return "a token's code past its window: asked for the next one to resync (" + Message(decimalBytes(UInt64(failures)))
                + " consecutive failures)"
        case .notRecorded: return "denied: the attempt could not be recorded"
        case .lockedOut(let until, let permanent):
            return permanent ? "denied: locked until an admin unlocks" : "denied: locked out until " + utcTimeText(until)
        case .unenrolled: return "denied: not enrolled"
        case .failed(let e):
            // A database outage says why (libpq's reason: host and port, never a password).
            if case .daemon(let why) = e { return "denied: " + why }
            return "denied: store error"
        }
    }
}

extension DaemonService {
    /// Answers one enrolment-management request from totp-enroll (AdminProtocol) on the
    /// daemon's own store (its configuration's backend). Root only: totp-enroll is set-uid root
    /// and checks who its caller is (the password, a current code) before it asks; a caller
    /// without root that wrote its own frames would skip that. `generator` salts the hashes of
    /// imported recovery codes. The returned line is for the log: never a secret or a code.
    public func handleAdmin<G: RandomNumberGenerator>(_ request: AdminRequest, peer: PeerCredentials, at now: Int64,
                                                      using generator: inout G) -> (reply: AdminReply, log: Message) {
        let who = "uid " + Message(decimalBytes(UInt64(peer.uid))) + " pid " + Message(decimalBytes(UInt64(peer.pid)))
            + (request.user.map { " user " + printable($0) } ?? "") + ": "
        guard peer.isRoot else {
            return (.refused("managing enrolments through pam-totpd needs root: use totp-enroll"),
                    who + "refused: enrolment management needs root")
        }
        let store: S
        do throws(MFAError) {
            if let user = request.user { try FileStore<LiveSystemCalls>.validate(user: user) }
            store = try openStore(site.store)
        } catch {
            return (.failed(error), who + "refused: " + describe(error))
        }
        do throws(MFAError) {
            switch request {
            case .status(let user):
                return (.status(try store.status(user: user)?.withoutSecrets()), who + "status")
            case .users(let after):
                return (try Self.usersPage(store, after: after), who + "listed enrolled users")
            case .checkEnrollable(let user, let uid, let label, let secret):
                try store.checkEnrollable(user: user, accountUID: uid, label: label, secret: secret)
                return (.done, who + "enrolment checks passed for factor " + printable(label))
            case .enroll(let user, let uid, let factor, let codes):
                let leftOut = try store.enroll(user: user, accountUID: uid, factor: factor, importedCodes: codes, using: &generator)
                return (.number(Int64(leftOut)), who + "enrolled factor " + printable(factor.label)
                        + (codes.map { " with " + Message(decimalBytes(UInt64($0.count))) + " imported recovery codes" } ?? ""))
            case .removeFactor(let user, let uid, let label, let mayRemoveLast):
                let left = try store.removeFactor(user: user, accountUID: uid, label: label, mayRemoveLast: mayRemoveLast)
                return (.number(Int64(left)), who + "removed factor " + printable(label))
            case .replaceRecovery(let user, let uid, let set):
                let replaced = try store.replaceRecovery(user: user, accountUID: uid, set: set)
                return (.number(replaced ? 1 : 0), who + "made " + Message(decimalBytes(UInt64(set.hashes.count))) + " new recovery codes")
            case .unlock(let user):
                let result = try store.unlock(user: user, at: now)
                return (.unlocked(result), who + "unlocked (" + Message(decimalBytes(UInt64(result.failures))) + " failures cleared)")
            case .purge(let user):
                let existed = try store.purge(user: user)
                return (.number(existed ? 1 : 0), who + (existed ? "purged" : "purge: nothing stored"))
            case .sendEnrolmentCode(let user, let uid, let factor):
                return try sendEnrolmentCode(store, user: user, uid: uid, factor: factor, at: now, who: who)
            case .confirmEnrolment(let user, let uid, let factor, let sentAt, let answer):
                let check = try store.confirmEnrolment(user: user, accountUID: uid, factor: factor, sentAt: sentAt, answer: answer,
                                                       at: now, options: site, using: &generator)
                let said: Message
                switch check {
                case .enrolled: said = "enrolled factor " + printable(factor.label) + " (" + Message(factor.maskedDestination) + ")"
                case .wrong: said = "wrong enrolment code for factor " + printable(factor.label)
                case .expired: said = "enrolment code for factor " + printable(factor.label) + " expired"
                }
                return (.number(check.number), who + said)
            case .auditTrail(let user, let since, let after):
                let (page, more) = try auditPage(user: user, since: since, after: after)
                return (.auditTrail(page, more: more), who + "read the audit trail (" + Message(decimalBytes(UInt64(page.count))) + " events)")
            }
        } catch {
            return (.failed(error), who + "failed: " + describe(error))
        }
    }

    /// One page of enrolled names after `after`, in byte order; `more` when any were left out.
    static func usersPage(_ store: S, after: [UInt8]) throws(MFAError) -> AdminReply {
        var page: [[UInt8]] = []
        var bytes = 0
        var more = false
        for name in try store.users() where after.lexicographicallyPrecedes(name) {
            guard bytes + 1 + name.count <= AdminReply.usersPageBytes, name.count <= 255 else { more = true; break }
            page.append(name)
            bytes += 1 + name.count
        }
        return .users(page, more: more)
    }

    /// One page of the audit trail: as many events as fit, oldest first; `more` when any were
    /// left out.
    func auditPage(user: [UInt8]?, since: Int64, after: UInt64) throws(MFAError) -> (page: [AuditEvent], more: Bool) {
        guard let auditTrail else { throw AuditEvent.notKept }
        let fetched = try auditTrail(user, since, after, Self.auditFetch)
        var page: [AuditEvent] = []
        var bytes = 0
        for e in fetched {
            guard bytes + e.encodedSize <= AdminReply.usersPageBytes else { break }
            page.append(e)
            bytes += e.encodedSize
        }
        return (page, page.count < fetched.count || fetched.count == Self.auditFetch)
    }
}

extension UserStatus {
    /// The status as it may leave the daemon: no factor's secret and
    /// no recovery hash or salt (the encoder sends neither anyway; this keeps the value honest).
    public func withoutSecrets() -> UserStatus {
        var r = record
        for i in r.factors.indices { r.factors[i] = r.factors[i].withoutSecret }
        if let set = r.recovery {
            r.recovery = RecoverySet(id: set.id, iterations: set.iterations, salt: [], hashes: [[UInt8]](repeating: [], count: set.hashes.count))
        }
        return UserStatus(record: r, state: state)
    }
}

/// When a lockout ends, for a log line ("2026-11-24 03:45:07 UTC").
func utcTimeText(_ unixTime: Int64) -> Message { Message(ModuleOptions.utcText(unixTime)) }
