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

public struct DaemonService<S: TOTPStore> {
    /// The daemon's own settings (its configuration file): the store, and the least strict
    /// limits a caller without root gets.
    public let site: ModuleOptions
    /// Opens the store at a path.
    let openStore: ([UInt8]) throws(MFAError) -> S
    /// Fleet mode: the database's audit trail. nil: the store keeps none (`AuditEvent.notKept`).
    let auditTrail: AuditEvent.Source?

    public init(site: ModuleOptions, openStore: @escaping ([UInt8]) throws(MFAError) -> S, auditTrail: AuditEvent.Source? = nil) {
        self.site = site
        self.openStore = openStore
        self.auditTrail = auditTrail
    }

    /// The settings one request runs with. Root could read the store itself, so its module's
    /// settings are taken as sent. Anyone else gets the daemon's store, and the request may
    /// only make the limits stricter: a caller that writes its own requests cannot widen the
    /// window or raise the failure limit.
    public func effectiveOptions(_ request: DaemonRequest, peer: PeerCredentials) -> ModuleOptions {
        if peer.isRoot { return request.options }
        var o = site
        o.forwardPass = request.options.forwardPass
        o.nullok = request.options.nullok
        o.debug = site.debug || request.options.debug
        o.adjacentIntervals = min(site.adjacentIntervals, request.options.adjacentIntervals)
        o.hotpWindow = min(site.hotpWindow, request.options.hotpWindow)
        o.hotpResyncWindow = min(site.hotpResyncWindow, request.options.hotpResyncWindow)
        o.maxFailures = min(site.maxFailures, request.options.maxFailures)
        o.siteMaxFailures = site.maxFailures
        o.lockoutSeconds = max(site.lockoutSeconds, request.options.lockoutSeconds)
        return o
    }

    /// Answers one request. `account` looks a name up in NSS (canonical name and uid; nil: no
    /// such account; it throws when the look-up fails). The returned line is for the log:
    /// what was asked and decided, never an answer, code or secret.
    public func handle(_ request: DaemonRequest, peer: PeerCredentials, at now: Int64,
                       account: ([UInt8]) throws(MFAError) -> Account?) -> (reply: DaemonReply, log: Message) {
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
            return (.outcome(.failed(error)), who + "account look-up failed")
        }
        if !peer.isRoot {
            // A caller without root asks only about the account whose uid is its own.
            guard let resolved, resolved.uid == peer.uid else {
                return (.refused("a caller without root may only ask about its own account"),
                        who + "refused: not the caller's own account")
            }
        }
        let user = resolved?.name ?? request.user
        let options = effectiveOptions(request, peer: peer)
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
        case .enrolled: return (.enrolled, who + "lookup: enrolled")
        case .unenrolled, .otherAccount: return (.outcome(.unenrolled), who + "lookup: not enrolled")
        case .failed(let e): return (.outcome(.failed(e)), who + "lookup failed")
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
    /// The status as it may leave the daemon: each factor's secret replaced by a placeholder and
    /// no recovery hash or salt (the encoder sends neither anyway; this keeps the value honest).
    public func withoutSecrets() -> UserStatus {
        var r = record
        for i in r.factors.indices { r.factors[i].secret = AdminCodec.placeholderSecret }
        if let set = r.recovery {
            r.recovery = RecoverySet(id: set.id, iterations: set.iterations, salt: [], hashes: [[UInt8]](repeating: [], count: set.hashes.count))
        }
        return UserStatus(record: r, state: state)
    }
}

/// When a lockout ends, for a log line ("2026-11-24 03:45:07 UTC").
func utcTimeText(_ unixTime: Int64) -> Message { Message(ModuleOptions.utcText(unixTime)) }
