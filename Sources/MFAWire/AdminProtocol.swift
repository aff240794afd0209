import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

// totp-enroll ↔ pam-totpd: the store operations of enrolment management, so that on a host in
// fleet mode (backend = postgresql) totp-enroll does every operation through the daemon, the
// only process that talks to the database (docs/ARCHITECTURE.md, sections 5.2 and 8). The same framing as
// the module's protocol (DaemonProtocol: 4-byte magic, big-endian UInt16 body length, at most
// `maxFrameSize` in all), with its own magics, so the module's requests and these never mix.
// pam-totpd answers them for root only (totp-enroll is set-uid root and checks who the caller
// is first): a caller that wrote its own frames would otherwise skip that check. Fuzzed: Fuzz/
// targets "admin-request" and "admin-reply".
//
//   request "PTA2": op u8, then by op —
//     1 status: user            2 users: after (u8 + bytes; names after it in byte order)
//     3 check enrollable: user · uid u32 · label · has secret u8 · secret
//     4 enroll: user · uid u32 · factor · has codes u8 · codes (u8 count, each u8 + bytes)
//     5 remove factor: user · uid u32 · label · may remove last u8
//     6 replace recovery: user · uid u32 · recovery set
//     7 unlock: user            8 purge: user
//     9 audit trail: has user u8 · user · since i64 · after id u64 (events after it, oldest first)
//    10 send enrolment code: user · uid u32 · factor (a sent kind)
//    11 confirm enrolment: user · uid u32 · factor (a sent kind) · sent at i64 · code typed
//     factor = kind u8 (1 TOTP, 2 HOTP, 3 SMS, 4 email) · label · created i64 · serial (u8 +
//              bytes; empty: none) · the kind's own form (DeviceWire.swift) —
//              TOTP: algorithm u8 (1 SHA-1, 2 SHA-256, 3 SHA-512) · digits u8 · period u32 ·
//                    enrolled step u64 · secret (u8 + bytes; not in a status)
//              HOTP: algorithm u8 · digits u8 · counter u64 · secret (as TOTP's)
//              SMS, email: destination (u8 + bytes; in a fleet host's status, its mask)
//     recovery set = id u64 · iterations u32 · salt (u8 + bytes) · hashes (u8 count, each u8 + bytes)
//     user, label = u8 length + bytes
//   reply "PTB2": kind u8, then by kind —
//     0 done    1 number: i64    2 status: present u8, then a status (no secret)
//     3 users: more u8 · count u16 · names      4 unlocked: failures u32 · locked until i64 · rebuilt u8
//     5 failed: error (as DaemonReply)          6 refused: message (u16 + bytes)
//     7 audit trail: more u8 · count u16 · events (each id u64 · time i64 · role · account ·
//       has uid u8 · uid u32 · event · label (empty: none) · has failures u8 · failures u32 ·
//       locked until i64 (0: none) · detail)
//     status = uid present u8 · uid u32 · factors (u8 count; each a factor without its secret) · recovery present u8 · id u64 ·
//              iterations u32 · codes u8 · sequence u64 · failures u32 · locked until i64 ·
//              recovery set u64 · recovery used u32 · success process u32 ·
//              last steps (u8 count; each key u64 · step u64 · drift i64)
// Anything else — unknown magic, op, kind, a flag other than 0 or 1, a length beyond the frame,
// bytes left over — is `malformed`.

extension DaemonProtocol {
    // Version 2 (issue 37): a factor carries its kind's own fields only. A totp-enroll and a
    // pam-totpd of different versions tell each other's frames for malformed.
    public static var adminRequestMagic: [UInt8] { [0x50, 0x54, 0x41, 0x32] }  // "PTA2"
    public static var adminReplyMagic: [UInt8] { [0x50, 0x54, 0x42, 0x32] }    // "PTB2"

    /// The whole frame's length of an admin request (or reply), like `frameLength(header:reply:)`.
    @inlinable
    public static func adminFrameLength(header: some Collection<UInt8>, reply: Bool) -> Int? {
        frameLength(header: header, magic: reply ? adminReplyMagic : adminRequestMagic)
    }

    static func adminBody(_ frame: [UInt8], reply: Bool) -> Reader? {
        guard let total = adminFrameLength(header: frame.prefix(headerSize), reply: reply), total == frame.count else { return nil }
        return Reader(Array(frame.dropFirst(headerSize)))
    }
}

/// A store operation totp-enroll asks pam-totpd to run (see the file's header).
public enum AdminRequest: Equatable, Sendable {
    case status(user: [UInt8])
    /// Enrolled names after `after` in byte order, as many as fit in one reply.
    case users(after: [UInt8])
    case checkEnrollable(user: [UInt8], uid: UInt32, label: [UInt8], secret: [UInt8]?)
    case enroll(user: [UInt8], uid: UInt32, factor: Factor, importedCodes: [[UInt8]]?)
    case removeFactor(user: [UInt8], uid: UInt32, label: [UInt8], mayRemoveLast: Bool)
    case replaceRecovery(user: [UInt8], uid: UInt32, set: RecoverySet)
    case unlock(user: [UInt8])
    case purge(user: [UInt8])
    /// Fleet mode: the audit trail's events after the one numbered `after`, of `user` (nil:
    /// everyone) at or after `since`, as many as fit in one reply.
    case auditTrail(user: [UInt8]?, since: Int64, after: UInt64)
    /// totp-enroll add-phone, add-email: send the code that proves `factor` (not saved yet);
    /// the reply is `.number(sent at)`, or `.refused` with why for the user.
    case sendEnrolmentCode(user: [UInt8], uid: UInt32, factor: Factor)
    /// The code typed back for `factor` (sent at `sentAt`): the reply is `.number` of an
    /// `EnrolmentCheck` (`EnrolmentCheck.number`).
    case confirmEnrolment(user: [UInt8], uid: UInt32, factor: Factor, sentAt: Int64, answer: [UInt8])

    /// The user the request is about (none for `users`).
    public var user: [UInt8]? {
        switch self {
        case .status(let u), .checkEnrollable(let u, _, _, _), .enroll(let u, _, _, _), .removeFactor(let u, _, _, _),
             .replaceRecovery(let u, _, _), .unlock(let u), .purge(let u), .sendEnrolmentCode(let u, _, _),
             .confirmEnrolment(let u, _, _, _, _):
            return u
        case .auditTrail(let u, _, _):
            return u
        case .users:
            return nil
        }
    }

    /// Whether the request changes the store (everything but status, users, check enrollable).
    public var changesStore: Bool {
        switch self {
        case .status, .users, .checkEnrollable, .auditTrail: return false
        case .enroll, .removeFactor, .replaceRecovery, .unlock, .purge, .sendEnrolmentCode, .confirmEnrolment: return true
        }
    }

    /// The frame, or nil if a field does not fit (a name over 255 bytes, more than 255 codes,
    /// a frame over `maxFrameSize`).
    public func encoded() -> [UInt8]? {
        var b: [UInt8] = []
        var ok = true
        func short(_ bytes: [UInt8]) { if bytes.count > 255 { ok = false }; Writer.short(bytes, &b) }
        func list(_ items: [[UInt8]]) {
            if items.count > 255 { ok = false }
            b.append(UInt8(truncatingIfNeeded: min(items.count, 255)))
            for item in items.prefix(255) { short(item) }
        }
        switch self {
        case .status(let user):
            b.append(1); short(user)
        case .users(let after):
            b.append(2); short(after)
        case .checkEnrollable(let user, let uid, let label, let secret):
            b.append(3); short(user); Writer.u32(uid, &b); short(label)
            b.append(secret == nil ? 0 : 1); short(secret ?? [])
        case .enroll(let user, let uid, let factor, let codes):
            b.append(4); short(user); Writer.u32(uid, &b)
            if !AdminCodec.fits(factor) { ok = false }
            AdminCodec.write(factor, withSecret: true, &b)
            b.append(codes == nil ? 0 : 1); list(codes ?? [])
        case .removeFactor(let user, let uid, let label, let mayRemoveLast):
            b.append(5); short(user); Writer.u32(uid, &b); short(label); b.append(mayRemoveLast ? 1 : 0)
        case .replaceRecovery(let user, let uid, let set):
            b.append(6); short(user); Writer.u32(uid, &b)
            Writer.u64(set.id, &b); Writer.u32(UInt32(clamping: max(set.iterations, 0)), &b); short(set.salt); list(set.hashes)
        case .unlock(let user):
            b.append(7); short(user)
        case .purge(let user):
            b.append(8); short(user)
        case .auditTrail(let user, let since, let after):
            b.append(9); b.append(user == nil ? 0 : 1); short(user ?? [])
            Writer.u64(UInt64(bitPattern: since), &b); Writer.u64(after, &b)
        case .sendEnrolmentCode(let user, let uid, let factor):
            b.append(10); short(user); Writer.u32(uid, &b)
            if !AdminCodec.fits(factor) || factor.channel == nil { ok = false }
            AdminCodec.write(factor, withSecret: false, &b)
        case .confirmEnrolment(let user, let uid, let factor, let sentAt, let answer):
            b.append(11); short(user); Writer.u32(uid, &b)
            if !AdminCodec.fits(factor) || factor.channel == nil { ok = false }
            AdminCodec.write(factor, withSecret: false, &b)
            Writer.u64(UInt64(bitPattern: sentAt), &b); short(answer)
        }
        let out = ok ? DaemonProtocol.frame(DaemonProtocol.adminRequestMagic, b) : nil
        wipe(&b)
        return out
    }

    public static func decode(_ frame: [UInt8]) throws(MFAError) -> AdminRequest {
        guard var r = DaemonProtocol.adminBody(frame, reply: false) else { throw .malformed("admin request") }
        // The reader's copy of the body may hold a code typed back (confirmEnrolment): wiped (issue 36).
        defer { wipeInPlace(r.data) }
        guard let op = r.u8() else { throw .malformed("admin request") }
        let request: AdminRequest
        switch op {
        case 1, 7, 8:
            guard let user = r.short() else { throw .malformed("admin request") }
            request = op == 1 ? .status(user: user) : op == 7 ? .unlock(user: user) : .purge(user: user)
        case 2:
            guard let after = r.short() else { throw .malformed("admin request") }
            request = .users(after: after)
        case 3:
            guard let user = r.short(), let uid = r.u32(), let label = r.short(), let has = r.flag(), let secret = r.short(),
                  has || secret.isEmpty else { throw .malformed("admin request") }
            request = .checkEnrollable(user: user, uid: uid, label: label, secret: has ? secret : nil)
        case 4:
            guard let user = r.short(), let uid = r.u32(), let factor = try AdminCodec.factor(&r, withSecret: true),
                  let has = r.flag(), let codes = r.list(), has || codes.isEmpty else { throw .malformed("admin request") }
            request = .enroll(user: user, uid: uid, factor: factor, importedCodes: has ? codes : nil)
        case 5:
            guard let user = r.short(), let uid = r.u32(), let label = r.short(), let last = r.flag() else { throw .malformed("admin request") }
            request = .removeFactor(user: user, uid: uid, label: label, mayRemoveLast: last)
        case 6:
            guard let user = r.short(), let uid = r.u32(), let id = r.u64(), let iterations = r.u32(), let salt = r.short(),
                  let hashes = r.list() else { throw .malformed("admin request") }
            request = .replaceRecovery(user: user, uid: uid, set: RecoverySet(id: id, iterations: Int(iterations), salt: salt, hashes: hashes))
        case 9:
            guard let has = r.flag(), let user = r.short(), has || user.isEmpty, let since = r.u64(), let after = r.u64() else {
                throw .malformed("admin request")
            }
            request = .auditTrail(user: has ? user : nil, since: Int64(bitPattern: since), after: after)
        case 10:
            guard let user = r.short(), let uid = r.u32(), let factor = try AdminCodec.factor(&r, withSecret: false),
                  factor.channel != nil else { throw .malformed("admin request") }
            request = .sendEnrolmentCode(user: user, uid: uid, factor: factor)
        case 11:
            guard let user = r.short(), let uid = r.u32(), let factor = try AdminCodec.factor(&r, withSecret: false),
                  factor.channel != nil, let sentAt = r.u64(), let answer = r.short() else { throw .malformed("admin request") }
            request = .confirmEnrolment(user: user, uid: uid, factor: factor, sentAt: Int64(bitPattern: sentAt), answer: answer)
        default:
            throw .malformed("admin request")
        }
        guard r.atEnd else { throw .malformed("admin request") }
        return request
    }
}

/// pam-totpd's answer to an `AdminRequest`.
public enum AdminReply: Equatable, Sendable {
    /// `checkEnrollable` passed.
    case done
    /// `enroll`: recovery codes left out; `removeFactor`: factors left; `replaceRecovery` and
    /// `purge`: 1 (replaced, purged) or 0.
    case number(Int64)
    /// `status`: the record and state without any secret (a placeholder stands in for each
    /// factor's secret and each recovery hash), nil if the store holds nothing for the user.
    case status(UserStatus?)
    /// `users`: a page of names; `more` when names after the last one remain.
    case users([[UInt8]], more: Bool)
    case unlocked(UnlockResult)
    /// `auditTrail`: a page of events, oldest first; `more` when later ones remain.
    case auditTrail([AuditEvent], more: Bool)
    case failed(MFAError)
    /// Not for this caller (only root manages enrolments through the daemon).
    case refused(Message)

    /// At most this many bytes of names go in one `users` page, or of events in one
    /// `auditTrail` page.
    public static let usersPageBytes = 3_000

    public func encoded() -> [UInt8] {
        var b: [UInt8] = []
        switch self {
        case .done:
            b.append(0)
        case .number(let n):
            b.append(1); Writer.u64(UInt64(bitPattern: n), &b)
        case .status(let status):
            b.append(2)
            if let status { b.append(1); AdminCodec.write(status, &b) } else { b.append(0) }
            // 32 factors with 64-byte labels and 64-byte serials do not fit in a frame: the
            // serials (shown, never used) are left out rather than the status.
            if let status, b.count + DaemonProtocol.headerSize > DaemonProtocol.maxFrameSize,
               status.record.factors.contains(where: { !$0.serial.isEmpty }) {
                var bare = status
                for i in bare.record.factors.indices { bare.record.factors[i].serial = [] }
                return AdminReply.status(bare).encoded()
            }
        case .users(let names, let more):
            b.append(3); b.append(more ? 1 : 0)
            Writer.u16(UInt16(truncatingIfNeeded: min(names.count, 65535)), &b)
            for n in names.prefix(65535) { Writer.short(Array(n.prefix(255)), &b) }
        case .unlocked(let u):
            b.append(4); Writer.u32(u.failures, &b); Writer.u64(UInt64(bitPattern: u.lockedUntil), &b); b.append(u.rebuilt ? 1 : 0)
        case .failed(let e):
            b.append(5); Writer.error(e, &b)
        case .refused(let why):
            b.append(6); Writer.long(Array(why.bytes.prefix(1024)), &b)
        case .auditTrail(let events, let more):
            b.append(7); b.append(more ? 1 : 0)
            Writer.u16(UInt16(truncatingIfNeeded: min(events.count, 65535)), &b)
            for e in events.prefix(65535) { e.write(&b) }
        }
        // A status is bounded by 32 factors of 64-byte labels (~3.7 KB) and a users page by
        // `usersPageBytes`; anything larger is an error rather than a cut frame.
        return DaemonProtocol.frame(DaemonProtocol.adminReplyMagic, b)
            ?? AdminReply.failed(.daemon("reply too large")).encoded()
    }

    public static func decode(_ frame: [UInt8]) throws(MFAError) -> AdminReply {
        guard var r = DaemonProtocol.adminBody(frame, reply: true), let kind = r.u8() else { throw .malformed("admin reply") }
        let reply: AdminReply
        switch kind {
        case 0:
            reply = .done
        case 1:
            guard let n = r.u64() else { throw .malformed("admin reply") }
            reply = .number(Int64(bitPattern: n))
        case 2:
            guard let present = r.flag() else { throw .malformed("admin reply") }
            reply = .status(present ? try AdminCodec.status(&r) : nil)
        case 3:
            guard let more = r.flag(), let count = r.u16() else { throw .malformed("admin reply") }
            var names: [[UInt8]] = []
            for _ in 0..<Int(count) {
                guard let n = r.short() else { throw .malformed("admin reply") }
                names.append(n)
            }
            reply = .users(names, more: more)
        case 4:
            guard let failures = r.u32(), let until = r.u64(), let rebuilt = r.flag() else { throw .malformed("admin reply") }
            reply = .unlocked(UnlockResult(failures: failures, lockedUntil: Int64(bitPattern: until), rebuilt: rebuilt))
        case 5:
            guard let e = r.error() else { throw .malformed("admin reply") }
            reply = .failed(e)
        case 6:
            guard let why = r.long() else { throw .malformed("admin reply") }
            reply = .refused(Message(why))
        case 7:
            guard let more = r.flag(), let count = r.u16() else { throw .malformed("admin reply") }
            var events: [AuditEvent] = []
            for _ in 0..<Int(count) {
                guard let e = AuditEvent.read(&r) else { throw .malformed("admin reply") }
                events.append(e)
            }
            reply = .auditTrail(events, more: more)
        default:
            throw .malformed("admin reply")
        }
        guard r.atEnd else { throw .malformed("admin reply") }
        return reply
    }
}

/// One row of the fleet's audit trail (sql/migrations/003_audit.sql): who (the database login
/// role of the host or admin), whom, what, when. Never a code or a secret.
public struct AuditEvent: Equatable, Sendable {
    public var id: UInt64
    /// The database's clock, Unix seconds.
    public var time: Int64
    public var role: [UInt8]
    public var account: [UInt8]
    public var uid: UInt32?
    /// success, recovery, failure, locked, unfinished, enroll, recovery-codes, remove, unlock,
    /// purge, import.
    public var event: [UInt8]
    /// The factor, where there is one (empty: none).
    public var label: [UInt8]
    /// Consecutive failures after the event, where it changed or read them.
    public var failures: UInt32?
    /// A lockout the event started (failure) or met (locked); 0: none.
    public var lockedUntil: Int64
    public var detail: [UInt8]

    public init(id: UInt64, time: Int64, role: [UInt8], account: [UInt8], uid: UInt32?, event: [UInt8], label: [UInt8],
                failures: UInt32?, lockedUntil: Int64, detail: [UInt8]) {
        self.id = id; self.time = time; self.role = role; self.account = account; self.uid = uid; self.event = event
        self.label = label; self.failures = failures; self.lockedUntil = lockedUntil; self.detail = detail
    }

    /// What a store without a trail answers: a single host's record is the log. (Not a
    /// requirement of TOTPStore: the module's file store carries no audit code.)
    public static var notKept: MFAError { .refusal(.auditNotKept) }

    /// Reads a page of the trail: up to `limit` events after the one numbered `after`, of
    /// `user` (nil: everyone) at or after `since`, oldest first.
    public typealias Source = ([UInt8]?, Int64, UInt64, Int) throws(MFAError) -> [AuditEvent]

    /// Its size in a reply.
    public var encodedSize: Int { 8 + 8 + 5 + 1 + 4 + 1 + 4 + 8 + [role, account, event, label, detail].reduce(0) { $0 + min($1.count, 255) } }

    func write(_ b: inout [UInt8]) {
        Writer.u64(id, &b); Writer.u64(UInt64(bitPattern: time), &b)
        Writer.short(Array(role.prefix(255)), &b); Writer.short(Array(account.prefix(255)), &b)
        b.append(uid == nil ? 0 : 1); Writer.u32(uid ?? 0, &b)
        Writer.short(Array(event.prefix(255)), &b); Writer.short(Array(label.prefix(255)), &b)
        b.append(failures == nil ? 0 : 1); Writer.u32(failures ?? 0, &b)
        Writer.u64(UInt64(bitPattern: lockedUntil), &b); Writer.short(Array(detail.prefix(255)), &b)
    }

    static func read(_ r: inout Reader) -> AuditEvent? {
        guard let id = r.u64(), let time = r.u64(), let role = r.short(), let account = r.short(), let hasUID = r.flag(),
              let uid = r.u32(), let event = r.short(), let label = r.short(), let hasFailures = r.flag(), let failures = r.u32(),
              let until = r.u64(), let detail = r.short() else { return nil }
        return AuditEvent(id: id, time: Int64(bitPattern: time), role: role, account: account, uid: hasUID ? uid : nil,
                          event: event, label: label, failures: hasFailures ? failures : nil,
                          lockedUntil: Int64(bitPattern: until), detail: detail)
    }
}

/// The pieces both admin frames share.
public enum AdminCodec {
    static func algorithmByte(_ a: HashAlgorithm) -> UInt8 {
        switch a {
        case .sha1: return 1
        case .sha256: return 2
        case .sha512: return 3
        }
    }

    static func algorithm(_ b: UInt8) -> HashAlgorithm? {
        switch b {
        case 1: return .sha1
        case 2: return .sha256
        case 3: return .sha512
        default: return nil
        }
    }

    /// A factor: kind, label, creation time, serial, then the kind's own form (DeviceWire.swift: a
    /// device's key, with its secret only if `withSecret`; a sent kind's destination). This is
    /// the one place that dispatches on the kind in this layer.
    static func write(_ f: Factor, withSecret: Bool, _ b: inout [UInt8]) {
        b.append(f.kind.rawValue)
        Writer.short(f.label, &b)
        Writer.u64(UInt64(bitPattern: f.created), &b)
        Writer.short(f.serial, &b)
        switch f.data {
        case .totp(let t): t.write(withSecret: withSecret, &b)
        case .hotp(let h): h.write(withSecret: withSecret, &b)
        case .sms(let p): Writer.short(p.number, &b)  // (root only: the admin protocol answers root)
        case .email(let e): Writer.short(e.address, &b)
        }
    }

    /// Whether every field of `f` fits its length byte.
    static func fits(_ f: Factor) -> Bool {
        f.label.count <= 255 && f.serial.count <= 255 && (f.otpKey?.secret.count ?? 0) <= 255 && (f.destination?.count ?? 0) <= 255
    }

    /// A factor as `write` wrote it; a device's without `withSecret` has an empty secret.
    /// `masked`: a status reply's, whose phone or address may be a mask (a fleet host sees
    /// only that: printable ASCII with a `*`), shown as it is and never sent to.
    static func factor(_ r: inout Reader, withSecret: Bool, masked: Bool = false) throws(MFAError) -> Factor? {
        guard let kind = r.u8().flatMap(FactorKind.init(rawValue:)), let label = r.short(), let created = r.u64(),
              let serial = r.short() else { return nil }
        let read: FactorData?
        switch kind {
        case .totp: read = TOTPFactor.read(&r, withSecret: withSecret)
        case .hotp: read = HOTPFactor.read(&r, withSecret: withSecret)
        case .sms: read = r.short().map { .sms(PhoneFactor(number: $0)) }
        case .email: read = r.short().map { .email(EmailFactor(address: $0)) }
        }
        guard let data = read else { return nil }
        do throws(MFAError) {
            if !serial.isEmpty {
                guard data.otpKey != nil else { throw .malformed("admin factor") }  // a device's only
                try Factor.validate(label: serial)
            }
            // A mask is no destination (never validated as one, never sent to); a device read
            // without its secret had its other fields checked by its reader.
            if let destination = data.destination {
                if !(masked && isMask(destination)) { try data.validate() }
            } else if withSecret {
                try data.validate()
            }
            return try Factor(label: label, created: Int64(bitPattern: created), serial: serial, data: data)
        } catch {
            throw .malformed("admin factor")
        }
    }

    /// A destination as a fleet host sees it: printable ASCII with a `*`, at most 254 bytes.
    static func isMask(_ d: [UInt8]) -> Bool {
        d.contains(0x2A) && d.count <= 254 && d.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    static func write(_ s: UserStatus, _ b: inout [UInt8]) {
        b.append(s.record.uid == nil ? 0 : 1); Writer.u32(s.record.uid ?? 0, &b)
        let factors = s.record.factors.prefix(255)
        b.append(UInt8(truncatingIfNeeded: factors.count))
        for f in factors { write(f, withSecret: false, &b) }
        if let set = s.record.recovery {
            b.append(1); Writer.u64(set.id, &b); Writer.u32(UInt32(clamping: max(set.iterations, 0)), &b)
            b.append(UInt8(truncatingIfNeeded: min(set.hashes.count, 255)))
        } else {
            b.append(0); Writer.u64(0, &b); Writer.u32(0, &b); b.append(0)
        }
        let st = s.state
        Writer.u64(st.sequence, &b); Writer.u32(st.failures, &b); Writer.u64(UInt64(bitPattern: st.lockedUntil), &b)
        Writer.u64(st.recoverySet, &b); Writer.u32(st.recoveryUsed, &b); Writer.u32(st.successProcess, &b)
        let steps = st.lastSteps.prefix(255)
        b.append(UInt8(truncatingIfNeeded: steps.count))
        for e in steps { Writer.u64(e.key, &b); Writer.u64(e.step, &b); Writer.u64(UInt64(bitPattern: e.drift), &b) }
        // The codes sent in the last day (totp-enroll status; at most 32, as a state keeps).
        let sends = st.sends.suffix(32)
        b.append(UInt8(truncatingIfNeeded: sends.count))
        for t in sends { Writer.u64(UInt64(bitPattern: t), &b) }
    }

    static func status(_ r: inout Reader) throws(MFAError) -> UserStatus {
        guard let hasUID = r.flag(), let uid = r.u32(), let count = r.u8() else { throw .malformed("admin status") }
        var record = UserRecord(uid: hasUID ? uid : nil)
        for _ in 0..<Int(count) {
            guard let f = try factor(&r, withSecret: false, masked: true) else { throw .malformed("admin status") }
            record.factors.append(f)
        }
        guard let hasSet = r.flag(), let setID = r.u64(), let iterations = r.u32(), let codes = r.u8() else { throw .malformed("admin status") }
        if hasSet {
            record.recovery = RecoverySet(id: setID, iterations: Int(iterations), salt: [],
                                          hashes: [[UInt8]](repeating: [], count: Int(codes)))
        }
        var st = UserState()
        guard let sequence = r.u64(), let failures = r.u32(), let until = r.u64(), let recoverySet = r.u64(),
              let recoveryUsed = r.u32(), let process = r.u32(), let steps = r.u8() else { throw .malformed("admin status") }
        st.sequence = sequence; st.failures = failures; st.lockedUntil = Int64(bitPattern: until)
        st.recoverySet = recoverySet; st.recoveryUsed = recoveryUsed; st.successProcess = process
        for _ in 0..<Int(steps) {
            guard let key = r.u64(), let step = r.u64(), let drift = r.u64() else { throw .malformed("admin status") }
            st.lastSteps.append((key: key, step: step, drift: Int64(bitPattern: drift)))
        }
        guard let sends = r.u8(), sends <= 32 else { throw .malformed("admin status") }
        for _ in 0..<Int(sends) {
            guard let t = r.u64() else { throw .malformed("admin status") }
            st.sends.append(Int64(bitPattern: t))
        }
        return UserStatus(record: record, state: st)
    }
}

extension Reader {
    /// A byte that must be 0 or 1.
    mutating func flag() -> Bool? {
        guard let b = u8(), b <= 1 else { return nil }
        return b == 1
    }

    /// A count byte, then that many short fields.
    mutating func list() -> [[UInt8]]? {
        guard let n = u8() else { return nil }
        var out: [[UInt8]] = []
        for _ in 0..<Int(n) {
            guard let item = short() else { return nil }
            out.append(item)
        }
        return out
    }
}
