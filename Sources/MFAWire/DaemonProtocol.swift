import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

// The module ↔ pam-totpd protocol (docs/ARCHITECTURE.md, section 5.2): one request and one reply per
// connection over a Unix stream socket. Both sides are in MFAWire so the Embedded module and
// the daemon share one encoder and one bounded decoder (fuzzed: Fuzz/ target "protocol").
//
// A frame is a 4-byte magic, a big-endian UInt16 body length, then the body:
//   request  "PTQ4": op u8 (1 lookup, 2 authenticate, 3 send a code, 4 may this user enrol at
//            login, 5 enrol at login) · flags u8 (1 nullok, 2 forward_pass, 4 debug,
//            8 code_after_password: the reply to a look-up tells the code's digits) ·
//            adjacent_intervals u8 · hotp_window u8 · hotp_resync_window u16 · max_failures u8 ·
//            lockout u32 · factor_kinds u8 · oob_digits u8 · oob_max_attempts u8 ·
//            oob_lifetime u16 · oob_resend_interval u16 · oob_max_per_hour u8 · oob_max_per_day u8 ·
//            service (u8 length + bytes) · user (u8 + bytes) · store (u16 + bytes) · answer
//            (u16 + bytes; send: the factor's label; 5: the code typed) · previous answer (u16 +
//            bytes; empty: none; the login's answer before, told "resync"); ops 4 and 5 only,
//            the new factor (SHA-1, 6 digits, 30 s: what enrolment at login makes): label (u8 +
//            bytes) · secret (u8 + bytes: empty for 4, 10 to 64 bytes for 5)
//   reply    "PTR4": kind u8, then by kind —
//            0 success: step u64 · digits u8 · label (u8 + bytes)
//            1 recovery code: remaining u16
//            2 wrong code: replayed u8 · failures u32 · locked until i64 (0: none)
//            3 not recorded: error      4 locked out: until i64 · permanent u8
//            5 unenrolled               6 failed: error
//            7 enrolled (lookup): flags u8 (1 typed, 2 no TOTP/HOTP factor, 4 a live sent
//              code; bits 3-4 the code's digits less 6, only asked with code_after_password:
//              a module before them takes a reply with them for malformed) · disallowed u8 ·
//              count u8 · per sent-code
//              factor: kind u8 · label (u8 + bytes) · masked destination (u8 + bytes)
//            8 refused: message (u16 + bytes)
//            9 resync needed: failures u32
//            10 sent (send): fresh u8 (0: the earlier code is still valid) · sent at i64 ·
//              expires at i64 · masked destination (u8 + bytes)
//            11 not sent (send): message for the user (u16 + bytes)
//            12 first factor (ops 4, 5): u8 (0 may enrol, 1 enrolled, 2 wrong code: nothing
//              saved, 3 the user has a factor: nothing added)
//            error = kind u8 · errno i32 · message (u16 + bytes)
// Nothing else is accepted: unknown magic, op, kind or flag bits, a length beyond the frame,
// or bytes left over are all `malformed`.

public enum DaemonProtocol {
    public static let headerSize = 6
    /// The largest frame either side sends or accepts.
    public static let maxFrameSize = 4096
    public static let maxAnswerLength = 1024
    /// Version 4 (enrolment at first login: ops 4 and 5, reply kind 12; 3 added sent codes, 2
    /// HOTP's fields): a module and a daemon of different versions refuse each other's frames
    /// (the login is denied, and pam-totpd logs a malformed request) rather than misread a field.
    public static var requestMagic: [UInt8] { [0x50, 0x54, 0x51, 0x34] }  // "PTQ4"
    public static var replyMagic: [UInt8] { [0x50, 0x54, 0x52, 0x34] }    // "PTR4"

    /// The whole frame's length from its first `headerSize` bytes, or nil if they do not
    /// start a frame of the expected kind within `maxFrameSize`.
    @inlinable
    public static func frameLength(header: some Collection<UInt8>, reply: Bool) -> Int? {
        frameLength(header: header, magic: reply ? replyMagic : requestMagic)
    }

    /// The frame's length if its header starts with `expected` (either protocol's magics).
    /// @inlinable: the generic part (the header's bytes) is specialised in the caller's target
    /// (pam-totpd reads every frame through it); the checks are not generic.
    @inlinable
    public static func frameLength(header: some Collection<UInt8>, magic expected: [UInt8]) -> Int? {
        guard header.count >= headerSize else { return nil }
        return frameLength(headerBytes: Array(header.prefix(headerSize)), magic: expected)
    }

    @usableFromInline
    static func frameLength(headerBytes: [UInt8], magic expected: [UInt8]) -> Int? {
        var r = Reader(headerBytes)
        guard let magic = r.bytes(4), magic == expected, let length = r.u16() else { return nil }
        let total = headerSize + Int(length)
        return total <= maxFrameSize ? total : nil
    }

    package static func frame(_ magic: [UInt8], _ body: [UInt8]) -> [UInt8]? {
        guard headerSize + body.count <= maxFrameSize else { return nil }
        var out = magic
        out.reserveCapacity(headerSize + body.count)
        Writer.u16(UInt16(truncatingIfNeeded: body.count), &out)
        out.append(contentsOf: body)
        return out
    }

    static func body(_ frame: [UInt8], reply: Bool) -> Reader? {
        guard let total = frameLength(header: frame.prefix(headerSize), reply: reply), total == frame.count else { return nil }
        return Reader(Array(frame.dropFirst(headerSize)))
    }
}

public enum DaemonOperation: UInt8, Sendable {
    case lookup = 1
    case authenticate = 2
    /// Send a code to the factor named by the request's answer field (text message, email).
    case send = 3
    /// Enrolment at first login (root callers only): may the user enrol a factor of the
    /// request's `newLabel` (no secret is sent for this)? Nothing is changed.
    case mayEnrolAtLogin = 4
    /// Enrolment at first login (root callers only): save the request's new factor (`newLabel`,
    /// `newSecret`) if the answer is its code and the user still has no factor, as one step.
    case enrolAtLogin = 5

    /// The two that carry a new factor.
    public var carriesFactor: Bool { rawValue >= 4 }
}

/// What the module asks pam-totpd.
public struct DaemonRequest: Equatable, Sendable {
    public var operation: DaemonOperation
    /// The PAM service the module runs for (logged; for per-service policy).
    public var service: [UInt8]
    public var user: [UInt8]
    /// The module's settings in force (the daemon may only make them stricter for a caller
    /// that is not root: DaemonService).
    public var options: ModuleOptions
    public var answer: [UInt8]
    /// The login's answer before `answer`, told `resyncNeeded` (a token's resync); empty: none.
    public var previous: [UInt8]
    /// Ops 4 and 5 (enrolment at first login): the new factor's label, and (op 5 only) its
    /// secret: the module made it, and it leaves the module in that one request. Its
    /// parameters are enrolment at login's: SHA-1, 6 digits, 30 s (`OTPParameters.default`).
    public var newLabel: [UInt8]
    public var newSecret: [UInt8]

    public init(operation: DaemonOperation, service: [UInt8], user: [UInt8], options: ModuleOptions, answer: [UInt8],
                previous: [UInt8] = [], newLabel: [UInt8] = [], newSecret: [UInt8] = []) {
        self.operation = operation
        self.service = service
        self.user = user
        self.options = options
        self.answer = answer
        self.previous = previous
        self.newLabel = newLabel
        self.newSecret = newSecret
    }

    /// The frame, or nil if a field is too long to send (a name over 255 bytes, a store
    /// path over 1024, an answer over `maxAnswerLength`).
    public func encoded() -> [UInt8]? {
        guard service.count <= 255, user.count <= 255, options.store.count <= 1024,
              answer.count <= DaemonProtocol.maxAnswerLength, previous.count <= DaemonProtocol.maxAnswerLength,
              options.hotpResyncWindow >= 0, options.hotpResyncWindow <= 65535,
              options.adjacentIntervals >= 0, options.adjacentIntervals <= 255,
              options.hotpWindow >= 0, options.hotpWindow <= 255, options.maxFailures <= 255, options.lockoutSeconds >= 0, options.lockoutSeconds <= Int64(UInt32.max),
              options.oobDigits >= 0, options.oobDigits <= 255, options.oobMaxAttempts >= 0, options.oobMaxAttempts <= 255,
              options.oobLifetime >= 0, options.oobLifetime <= 65535, options.oobResendInterval >= 0, options.oobResendInterval <= 65535,
              options.oobMaxPerHour >= 0, options.oobMaxPerHour <= 255, options.oobMaxPerDay >= 0, options.oobMaxPerDay <= 255 else { return nil }
        var b: [UInt8] = []
        b.reserveCapacity(20 + service.count + user.count + options.store.count + answer.count + previous.count)
        b.append(operation.rawValue)
        b.append((options.nullok ? 1 : 0) | (options.forwardPass ? 2 : 0) | (options.debug ? 4 : 0) | (options.codeAfterPassword ? 8 : 0))
        b.append(UInt8(truncatingIfNeeded: options.adjacentIntervals))
        b.append(UInt8(truncatingIfNeeded: options.hotpWindow))
        Writer.u16(UInt16(truncatingIfNeeded: options.hotpResyncWindow), &b)
        b.append(UInt8(truncatingIfNeeded: options.maxFailures))
        Writer.u32(UInt32(truncatingIfNeeded: options.lockoutSeconds), &b)
        b.append(options.factorKinds)
        b.append(UInt8(truncatingIfNeeded: options.oobDigits))
        b.append(UInt8(truncatingIfNeeded: options.oobMaxAttempts))
        Writer.u16(UInt16(truncatingIfNeeded: options.oobLifetime), &b)
        Writer.u16(UInt16(truncatingIfNeeded: options.oobResendInterval), &b)
        b.append(UInt8(truncatingIfNeeded: options.oobMaxPerHour))
        b.append(UInt8(truncatingIfNeeded: options.oobMaxPerDay))
        Writer.short(service, &b)
        Writer.short(user, &b)
        Writer.long(options.store, &b)
        Writer.long(answer, &b)
        Writer.long(previous, &b)
        if operation.carriesFactor {
            Writer.short(newLabel, &b)
            Writer.short(newSecret, &b)
        }
        let out = DaemonProtocol.frame(DaemonProtocol.requestMagic, b)
        wipe(&b)
        return out
    }

    /// Decodes one whole frame. Values are range-checked like the module's own options.
    public static func decode(_ frame: [UInt8]) throws(MFAError) -> DaemonRequest {
        guard var r = DaemonProtocol.body(frame, reply: false) else { throw .malformed("request") }
        // The reader's copy of the body holds the answer (a typed code): wiped, not just freed (issue 36).
        defer { wipeInPlace(r.data) }
        guard let opByte = r.u8(), let operation = DaemonOperation(rawValue: opByte),
              let flags = r.u8(), flags & ~15 == 0,
              let adjacent = r.u8(), let hotpWindow = r.u8(), let resync = r.u16(), let maxFailures = r.u8(),
              let lockout = r.u32(), let kinds = r.u8(), let oobDigits = r.u8(), let oobAttempts = r.u8(),
              let oobLifetime = r.u16(), let oobResend = r.u16(), let oobHour = r.u8(), let oobDay = r.u8(),
              let service = r.short(), let user = r.short(), let store = r.long(),
              let answer = r.long(), let previous = r.long() else { throw .malformed("request") }
        // Ops 4 and 5: the new factor (a name a factor may have; the secret only with op 5,
        // as long as a factor's may be, 10 to 64 bytes).
        var newLabel: [UInt8] = []
        var newSecret: [UInt8] = []
        if operation.carriesFactor {
            guard let label = r.short(), (try? Factor.validate(label: label)) != nil, let secret = r.short(),
                  operation == .enrolAtLogin ? secret.count >= 10 && secret.count <= 64 : secret.isEmpty else {
                throw .malformed("request factor")
            }
            (newLabel, newSecret) = (label, secret)
        }
        guard r.atEnd else { throw .malformed("request") }
        var o = ModuleOptions()
        guard Int(adjacent) <= TOTPVerifier.maxAdjacentIntervals, HOTPWindow.sizeRange.contains(Int(hotpWindow)),
              HOTPWindow.resyncRange.contains(Int(resync)), previous.count <= DaemonProtocol.maxAnswerLength,
              ModuleOptions.maxFailuresRange.contains(UInt64(maxFailures)),
              ModuleOptions.lockoutRange.contains(UInt64(lockout)),
              kinds != 0, kinds & ~FactorKind.allBits == 0, ModuleOptions.oobDigitsRange.contains(UInt64(oobDigits)),
              ModuleOptions.oobMaxAttemptsRange.contains(UInt64(oobAttempts)), ModuleOptions.oobLifetimeRange.contains(UInt64(oobLifetime)),
              ModuleOptions.oobResendIntervalRange.contains(UInt64(oobResend)), ModuleOptions.oobMaxSendsRange.contains(UInt64(oobHour)),
              ModuleOptions.oobMaxSendsRange.contains(UInt64(oobDay)),
              store.first == 0x2F, !store.contains(0), answer.count <= DaemonProtocol.maxAnswerLength else {
            throw .malformed("request options")
        }
        o.nullok = flags & 1 != 0
        o.forwardPass = flags & 2 != 0
        o.debug = flags & 4 != 0
        o.codeAfterPassword = flags & 8 != 0
        o.adjacentIntervals = Int(adjacent)
        o.hotpWindow = Int(hotpWindow)
        o.hotpResyncWindow = Int(resync)
        o.maxFailures = UInt32(maxFailures)
        o.lockoutSeconds = Int64(lockout)
        o.factorKinds = kinds
        o.oobDigits = Int(oobDigits)
        o.oobMaxAttempts = Int(oobAttempts)
        o.oobLifetime = Int64(oobLifetime)
        o.oobResendInterval = Int64(oobResend)
        o.oobMaxPerHour = Int(oobHour)
        o.oobMaxPerDay = Int(oobDay)
        o.store = store
        return DaemonRequest(operation: operation, service: service, user: user, options: o, answer: answer, previous: previous,
                             newLabel: newLabel, newSecret: newSecret)
    }
}

/// What pam-totpd answers.
public enum DaemonReply: Equatable, Sendable {
    /// The verdict of an `authenticate` (or `.unenrolled` / `.failed` for a `lookup`).
    case outcome(AuthOutcome)
    /// `lookup`: the user has a factor; what the login may offer them.
    case enrolled(FactorHints)
    /// `send`: a code is on its way (`fresh`), or the one sent at `sentAt` is still valid.
    case sent(fresh: Bool, sentAt: Int64, expiresAt: Int64, masked: [UInt8])
    /// `send`: nothing was sent; the message says why, for the user and the log.
    case notSent(Message)
    /// The caller may not ask about this user (a caller without root asks only for its own
    /// account), or was turned away; the message says why, for the module's log line.
    case refused(Message)
    /// Ops 4 and 5: what enrolment at first login came to.
    case firstFactor(FirstFactor)

    public func encoded() -> [UInt8] {
        var b: [UInt8] = []
        b.reserveCapacity(64)  // every reply but an error's text: one allocation
        switch self {
        case .outcome(let outcome):
            switch outcome {
            case .success(let factor, let step, let digits, _):
                b.append(0); Writer.u64(step, &b); b.append(UInt8(truncatingIfNeeded: min(max(digits, 0), 255)))
                Writer.short(Array(factor.prefix(255)), &b)
            case .recoveryCode(let remaining):
                b.append(1); Writer.u16(UInt16(truncatingIfNeeded: min(max(remaining, 0), 65535)), &b)
            case .wrongCode(let replayed, let failures, let lockedUntil):
                b.append(2); b.append(replayed ? 1 : 0); Writer.u32(failures, &b)
                Writer.u64(UInt64(bitPattern: lockedUntil ?? 0), &b)
            case .notRecorded(let error):
                b.append(3); Writer.error(error, &b)
            case .lockedOut(let until, let permanent):
                b.append(4); Writer.u64(UInt64(bitPattern: until), &b); b.append(permanent ? 1 : 0)
            case .unenrolled:
                b.append(5)
            case .failed(let error):
                b.append(6); Writer.error(error, &b)
            case .resyncNeeded(let failures):
                b.append(9); Writer.u32(failures, &b)
            }
        case .enrolled(let hints):
            // Flags: 1 typed, 2 no TOTP/HOTP factor (a daemon before the bit meant one), 4 a live sent code,
            // bits 3-4 the code's digits less 6 (FactorHints.codeDigits: 6, 7 or 8).
            let digits = UInt8(truncatingIfNeeded: min(max(hints.codeDigits, 6), 8) - 6)
            b.append(7); b.append((hints.typed ? 1 : 0) | (hints.device ? 0 : 2) | (hints.pending ? 4 : 0) | digits << 3); b.append(UInt8(truncatingIfNeeded: min(max(hints.disallowed, 0), 255)))
            let offered = hints.sent.prefix(FactorHints.maxOffered)
            b.append(UInt8(truncatingIfNeeded: offered.count))
            for h in offered {
                b.append(h.kind.rawValue); Writer.short(Array(h.label.prefix(255)), &b); Writer.short(Array(h.masked.prefix(255)), &b)
            }
        case .sent(let fresh, let sentAt, let expiresAt, let masked):
            b.append(10); b.append(fresh ? 1 : 0); Writer.u64(UInt64(bitPattern: sentAt), &b); Writer.u64(UInt64(bitPattern: expiresAt), &b)
            Writer.short(Array(masked.prefix(255)), &b)
        case .notSent(let why):
            b.append(11); Writer.long(Array(why.bytes.prefix(1024)), &b)
        case .refused(let why):
            b.append(8); Writer.long(Array(why.bytes.prefix(1024)), &b)
        case .firstFactor(let result):
            b.append(12); b.append(result.rawValue)
        }
        // Every field above is bounded far below the frame size.
        return DaemonProtocol.frame(DaemonProtocol.replyMagic, b) ?? DaemonProtocol.replyMagic + [0, 1, 5]
    }

    /// An `enrolled` reply's body: flags (1 typed, 2 no TOTP/HOTP factor, 4 a live sent code,
    /// bits 3-4 the code's digits less 6), disallowed, then each sent-code factor offered.
    static func hints(_ r: inout Reader) throws(MFAError) -> FactorHints {
        guard let flags = r.u8(), flags >> 3 <= 2, let disallowed = r.u8(), let n = r.u8(), Int(n) <= FactorHints.maxOffered else {
            throw .malformed("reply")
        }
        var hints = FactorHints(typed: flags & 1 != 0, disallowed: Int(disallowed), device: flags & 2 == 0, pending: flags & 4 != 0)
        hints.codeDigits = 6 + Int(flags >> 3)
        for _ in 0..<n {
            guard let k = r.u8().flatMap(FactorKind.init(rawValue:)), k.answering == .sent, let label = r.short(), let masked = r.short() else {
                throw .malformed("reply")
            }
            hints.sent.append(FactorHint(kind: k, label: label, masked: masked))
        }
        return hints
    }

    public static func decode(_ frame: [UInt8]) throws(MFAError) -> DaemonReply {
        guard var r = DaemonProtocol.body(frame, reply: true), let kind = r.u8() else { throw .malformed("reply") }
        let reply: DaemonReply
        switch kind {
        case 0:
            guard let step = r.u64(), let digits = r.u8(), let label = r.short() else { throw .malformed("reply") }
            reply = .outcome(.success(factor: label, step: step, digits: Int(digits)))
        case 1:
            guard let remaining = r.u16() else { throw .malformed("reply") }
            reply = .outcome(.recoveryCode(remaining: Int(remaining)))
        case 2:
            guard let replayed = r.u8(), replayed <= 1, let failures = r.u32(), let until = r.u64() else { throw .malformed("reply") }
            reply = .outcome(.wrongCode(replayed: replayed == 1, failures: failures,
                                        lockedUntil: until == 0 ? nil : Int64(bitPattern: until)))
        case 3:
            guard let error = r.error() else { throw .malformed("reply") }
            reply = .outcome(.notRecorded(error))
        case 4:
            guard let until = r.u64(), let permanent = r.u8(), permanent <= 1 else { throw .malformed("reply") }
            reply = .outcome(.lockedOut(until: Int64(bitPattern: until), permanent: permanent == 1))
        case 5:
            reply = .outcome(.unenrolled)
        case 6:
            guard let error = r.error() else { throw .malformed("reply") }
            reply = .outcome(.failed(error))
        case 7:
            reply = .enrolled(try hints(&r))
        case 10:
            guard let fresh = r.u8(), fresh <= 1, let sentAt = r.u64(), let expiresAt = r.u64(), let masked = r.short() else {
                throw .malformed("reply")
            }
            reply = .sent(fresh: fresh == 1, sentAt: Int64(bitPattern: sentAt), expiresAt: Int64(bitPattern: expiresAt), masked: masked)
        case 11:
            guard let why = r.long() else { throw .malformed("reply") }
            reply = .notSent(Message(why))
        case 8:
            guard let why = r.long() else { throw .malformed("reply") }
            reply = .refused(Message(why))
        case 9:
            guard let failures = r.u32() else { throw .malformed("reply") }
            reply = .outcome(.resyncNeeded(failures: failures))
        case 12:
            guard let result = r.u8().flatMap(FirstFactor.init(rawValue:)) else { throw .malformed("reply") }
            reply = .firstFactor(result)
        default:
            throw .malformed("reply")
        }
        guard r.atEnd else { throw .malformed("reply") }
        return reply
    }
}

/// Bounds-checked big-endian reads: every accessor returns nil instead of reading past the end.
package struct Reader {
    package let data: [UInt8]
    package var offset = 0
    package init(_ data: [UInt8]) { self.data = data }

    package var atEnd: Bool { offset == data.count }

    package mutating func bytes(_ n: Int) -> [UInt8]? {
        guard n >= 0, n <= data.count - offset else { return nil }
        let out = Array(data[offset..<(offset + n)])
        offset += n
        return out
    }
    package mutating func u8() -> UInt8? {
        guard offset < data.count else { return nil }
        defer { offset += 1 }
        return data[offset]
    }
    /// A big-endian number of `size` bytes, read in place (no copy: a request reads several).
    package mutating func uint(_ size: Int) -> UInt64? {
        guard size >= 0, size <= data.count - offset else { return nil }
        var v: UInt64 = 0
        for i in offset..<(offset + size) { v = v << 8 | UInt64(data[i]) }
        offset += size
        return v
    }
    package mutating func u16() -> UInt16? { uint(2).map { UInt16(truncatingIfNeeded: $0) } }
    package mutating func u32() -> UInt32? { uint(4).map { UInt32(truncatingIfNeeded: $0) } }
    package mutating func u64() -> UInt64? { uint(8) }
    @inline(never)
    package mutating func short() -> [UInt8]? { u8().flatMap { bytes(Int($0)) } }
    @inline(never)
    package mutating func long() -> [UInt8]? { u16().flatMap { bytes(Int($0)) } }

    package mutating func error() -> MFAError? {
        guard let kind = u8(), let e = u32(), let text = long() else { return nil }
        let m = Message(text)
        switch kind {
        case 0: return .invalidOption(m)
        case 1: return .invalidBase32
        case 2: return .invalidParameters(m)
        case 3: return .invalidUserName
        case 4: return .invalidLabel
        case 5: return .insecureStore(m)
        case 6: return .corruptRecord(m)
        case 7: return .system(operation: m, errno: Errno(Int32(bitPattern: e)))
        case 8: return .lockTimeout
        case 9: return .clockOutOfRange
        case 10: return .malformed(m)
        case 11: return .daemon(m)
        case 12: return e <= 255 ? Refusal(rawValue: UInt8(e)).map { .refused($0, m) } : nil
        default: return nil
        }
    }
}

package enum Writer {
    package static func u16(_ v: UInt16, _ out: inout [UInt8]) { out.append(UInt8(v >> 8)); out.append(UInt8(truncatingIfNeeded: v)) }
    // Shifts from a range, not an array literal (in Embedded Swift each literal is an allocation).
    package static func u32(_ v: UInt32, _ out: inout [UInt8]) {
        for i in (0..<4).reversed() { out.append(UInt8(truncatingIfNeeded: v >> UInt32(i * 8))) }
    }
    package static func u64(_ v: UInt64, _ out: inout [UInt8]) {
        for i in (0..<8).reversed() { out.append(UInt8(truncatingIfNeeded: v >> UInt64(i * 8))) }
    }
    /// At most 255 bytes (callers bound it). Not inlined: called for most fields of every frame.
    @inline(never)
    package static func short(_ bytes: [UInt8], _ out: inout [UInt8]) {
        let b = bytes.prefix(255)
        out.append(UInt8(truncatingIfNeeded: b.count)); out.append(contentsOf: b)
    }
    /// At most 65535 bytes (callers bound it). Not inlined: called for most fields of every frame.
    @inline(never)
    package static func long(_ bytes: [UInt8], _ out: inout [UInt8]) {
        let b = bytes.prefix(65535)
        u16(UInt16(truncatingIfNeeded: b.count), &out); out.append(contentsOf: b)
    }
    package static func error(_ e: MFAError, _ out: inout [UInt8]) {
        var kind: UInt8 = 0
        var errno: Int32 = 0
        var text: [UInt8] = []
        switch e {
        case .invalidOption(let m): kind = 0; text = m.bytes
        case .invalidBase32: kind = 1
        case .invalidParameters(let m): kind = 2; text = m.bytes
        case .invalidUserName: kind = 3
        case .invalidLabel: kind = 4
        case .insecureStore(let m): kind = 5; text = m.bytes
        case .corruptRecord(let m): kind = 6; text = m.bytes
        case .system(let m, let n): kind = 7; text = m.bytes; errno = n.rawValue
        case .lockTimeout: kind = 8
        case .clockOutOfRange: kind = 9
        case .malformed(let m): kind = 10; text = m.bytes
        case .daemon(let m): kind = 11; text = m.bytes
        case .refused(let r, let m): kind = 12; text = m.bytes; errno = Int32(r.rawValue)
        case .unconfirmed(let m): kind = 11; text = describe(.unconfirmed(m)).bytes  // never sent; read back as .daemon
        }
        out.append(kind)
        u32(UInt32(bitPattern: errno), &out)
        long(Array(text.prefix(512)), &out)
    }
}
