import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// The store interface through pam-totpd (docs/ARCHITECTURE.md, sections 5.2 and 8): what totp-enroll uses
// on a host in fleet mode, where only the daemon talks to the database. Every operation is one
// exchange: the management operations as AdminProtocol frames, a code check as the module's own
// `authenticate` request (counted like a login, on the daemon's clock). The transport is
// injected: a Unix socket in totp-enroll, DaemonService directly in tests, so the store
// contract suite runs through the codec.

/// What `DaemonStore.lookup` keeps for `authenticate`.
public struct DaemonEnrolled: Sendable {
    public let user: [UInt8]
}

public final class DaemonStore: TOTPStore {
    public typealias Enrolled = DaemonEnrolled
    /// Sends one request frame and returns the whole reply frame. `now` is the caller's clock,
    /// for a transport that has none of its own (tests); a socket ignores it. `sent` is set once
    /// the whole request is out: after that a failure leaves it open whether the daemon acted.
    public typealias Exchange = (_ frame: [UInt8], _ now: Int64, _ sent: inout Bool) throws(MFAError) -> [UInt8]


    /// A change's error, marked as unconfirmed.
    public static func unconfirmed(_ error: MFAError) -> MFAError {
        let why: Message
        switch error {
        case .daemon(let m): why = m
        case .malformed(let m): why = "a malformed reply (" + m + ")"
        default: why = "no reply"
        }
        return .unconfirmed(why)
    }

    /// Whether `error` leaves it open whether a change was made (`unconfirmed`).
    public static func isUnconfirmed(_ error: MFAError) -> Bool {
        if case .unconfirmed = error { return true }
        return false
    }

    let exchange: Exchange
    /// The store path sent with a code check (the daemon's store; ignored by a database backend).
    let storePath: [UInt8]
    /// The PAM service named in the daemon's log line for a code check.
    let service: [UInt8]

    public init(storePath: [UInt8], service: [UInt8] = literal("totp-enroll"), exchange: @escaping Exchange) {
        self.storePath = storePath
        self.service = service
        self.exchange = exchange
    }

    func ask(_ request: AdminRequest, at now: Int64 = 0) throws(MFAError) -> AdminReply {
        guard var frame = request.encoded() else { throw .invalidParameters("the request is too large to send to pam-totpd") }
        defer { wipe(&frame) }
        // A change whose request reached the daemon and whose reply did not come back intact
        // may have been made: never reported as a plain failure (which would mean "nothing
        // changed").
        var sent = false
        let replyFrame: [UInt8]
        do throws(MFAError) { replyFrame = try exchange(frame, now, &sent) } catch {
            throw sent && request.changesStore ? Self.unconfirmed(error) : error
        }
        let reply: AdminReply
        do throws(MFAError) { reply = try AdminReply.decode(replyFrame) } catch {
            throw request.changesStore ? Self.unconfirmed(error) : error
        }
        switch reply {
        case .failed(let e):
            // The daemon's store unavailable (a database connection lost with the statement
            // sent) is no proof that nothing changed either.
            if request.changesStore, case .daemon = e { throw Self.unconfirmed(e) }
            throw e
        case .refused(let why): throw .daemon(why)
        default: return reply
        }
    }

    static func unexpected() -> MFAError { .malformed("unexpected reply") }

    public func lookup(user: [UInt8], account: () throws(MFAError) -> Account?) throws(MFAError) -> Enrollment<DaemonStore> {
        guard let s = try status(user: user), s.record.isEnrolled else { return .unenrolled }
        let uid = try account()?.uid
        guard s.record.belongs(toAccount: uid) else { return .otherAccount(recordUID: s.record.uid ?? 0) }
        return .enrolled(DaemonEnrolled(user: user))
    }

    /// Enrolment at first login through pam-totpd: the module's own ops 4 and 5 (root callers
    /// only; totp-enroll does not use it, the store contract does).
    public func enrollAtLogin(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8], answer: [UInt8]?, at now: Int64,
                              options: ModuleOptions) throws(MFAError) -> FirstFactor {
        var o = options
        o.store = storePath
        guard var frame = DaemonRequest(operation: answer == nil ? .mayEnrolAtLogin : .enrolAtLogin, service: service, user: user,
                                        options: o, answer: answer ?? [], newLabel: label,
                                        newSecret: answer == nil ? [] : secret).encoded() else { throw .invalidParameters("the answer is too long") }
        defer { wipe(&frame) }
        var sent = false
        let replyFrame: [UInt8]
        do throws(MFAError) { replyFrame = try exchange(frame, now, &sent) } catch {
            throw sent && answer != nil ? Self.unconfirmed(error) : error
        }
        switch try DaemonReply.decode(replyFrame) {
        case .firstFactor(let result): return result
        case .outcome(.failed(let e)): throw e
        case .refused(let why): throw .daemon(why)
        default: throw Self.unexpected()
        }
    }

    public func authenticate(answer: [UInt8], previous: [UInt8]?, at unixTime: Int64, options: ModuleOptions,
                             process: UInt32, enrolled: DaemonEnrolled) -> AuthOutcome {
        var o = options
        o.store = storePath
        guard var frame = DaemonRequest(operation: .authenticate, service: service, user: enrolled.user, options: o,
                                        answer: answer, previous: previous ?? []).encoded() else { return .failed(.invalidParameters("the answer is too long")) }
        defer { wipe(&frame) }
        do throws(MFAError) {
            var sent = false
            switch try DaemonReply.decode(try exchange(frame, unixTime, &sent)) {
            case .outcome(let outcome): return outcome
            case .refused(let why): return .failed(.daemon(why))
            case .enrolled, .sent, .notSent, .firstFactor: return .failed(Self.unexpected())
            }
        } catch {
            return .failed(error)
        }
    }

    public func status(user: [UInt8]) throws(MFAError) -> UserStatus? {
        guard case .status(let s) = try ask(.status(user: user)) else { throw Self.unexpected() }
        return s
    }

    public func users() throws(MFAError) -> [[UInt8]] {
        var all: [[UInt8]] = []
        var after: [UInt8] = []
        while true {
            guard case .users(let page, let more) = try ask(.users(after: after)) else { throw Self.unexpected() }
            // Each page must move forward, or a broken daemon could keep us here.
            guard page.allSatisfy({ after.lexicographicallyPrecedes($0) }), !(more && page.isEmpty) else { throw Self.unexpected() }
            all += page
            guard more, let last = page.last else { return all }
            after = last
        }
    }

    public func checkEnrollable(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8]?) throws(MFAError) {
        guard case .done = try ask(.checkEnrollable(user: user, uid: accountUID, label: label, secret: secret)) else { throw Self.unexpected() }
    }

    @discardableResult
    public func enroll<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor,
                                                 importedCodes: [[UInt8]]?, using generator: inout G) throws(MFAError) -> Int {
        guard case .number(let n) = try ask(.enroll(user: user, uid: accountUID, factor: factor, importedCodes: importedCodes)) else {
            throw Self.unexpected()
        }
        return Int(clamping: n)
    }

    public func removeFactor(user: [UInt8], accountUID: UInt32, label: [UInt8], mayRemoveLast: Bool) throws(MFAError) -> Int {
        guard case .number(let n) = try ask(.removeFactor(user: user, uid: accountUID, label: label, mayRemoveLast: mayRemoveLast)) else {
            throw Self.unexpected()
        }
        return Int(clamping: n)
    }

    public func replaceRecovery(user: [UInt8], accountUID: UInt32, set: RecoverySet) throws(MFAError) -> Bool {
        guard case .number(let n) = try ask(.replaceRecovery(user: user, uid: accountUID, set: set)) else { throw Self.unexpected() }
        return n != 0
    }

    public func unlock(user: [UInt8], at now: Int64) throws(MFAError) -> UnlockResult {
        guard case .unlocked(let r) = try ask(.unlock(user: user), at: now) else { throw Self.unexpected() }
        return r
    }

    public func purge(user: [UInt8]) throws(MFAError) -> Bool {
        guard case .number(let n) = try ask(.purge(user: user)) else { throw Self.unexpected() }
        return n != 0
    }
}

// In an extension, not the class body: the class's vtable holds every method of its body, so
// the module (which uses DaemonStore) would carry the audit trail's code.
extension DaemonStore {
    /// Every event of the audit trail after `after` (of `user`, nil: everyone, at or after
    /// `since`), page by page, at most `limit`.
    public func auditTrail(user: [UInt8]?, since: Int64, after: UInt64, limit: Int) throws(MFAError) -> [AuditEvent] {
        var all: [AuditEvent] = []
        var after = after
        while all.count < limit {
            guard case .auditTrail(let page, let more) = try ask(.auditTrail(user: user, since: since, after: after)) else {
                throw Self.unexpected()
            }
            // Each page must move forward, or a broken daemon could keep us here.
            guard page.allSatisfy({ $0.id > after }), !(more && page.isEmpty) else { throw Self.unexpected() }
            all += page
            guard more, let last = page.last else { break }
            after = last.id
        }
        return Array(all.prefix(limit))
    }
}
