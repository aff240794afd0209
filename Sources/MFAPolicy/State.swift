import CLibc
import MFACrypto
import MFASystem

/// A user's mutable state, kept apart from the enrolment record in `.state.USER`:
/// the last accepted time step per factor (replay guard), consecutive failures, the lockout
/// deadline, which recovery codes of the current set were used, and which process last
/// accepted a code.
public struct UserState: Equatable, Sendable {
    public static let hardFailureCap: UInt32 = 100  // NIST SP 800-63B §5.2.2
    /// At most one last-step entry per factor a record may hold.
    public static let maxEntries = UserRecord.maxFactors

    /// Bumped on every write; the reader takes the valid slot with the highest sequence.
    public var sequence: UInt64 = 0
    /// The id of the record this state belongs to (0: not known, from a version-1 state). A
    /// state written for another record (one since purged) is not applied: see `adopted(by:)`.
    public var recordID: UInt64 = 0
    public var failures: UInt32 = 0
    public var lockedUntil: Int64 = 0
    public var recoverySet: UInt64 = 0
    public var recoveryUsed: UInt32 = 0
    /// The process id of the process whose accepted code was the last thing recorded; 0 after
    /// any other write (a failure, an unlock). totp-enroll reads it, with the sequence, to see
    /// that its own PAM stack accepted a code while it ran (so it does not ask for a second
    /// one): a live process's id names no other process in its pid namespace.
    public var successProcess: UInt32 = 0
    /// (factor key, last accepted step, learned clock drift in steps), one entry per factor of
    /// the record that was used. `drift` is where the factor's device was, relative to this
    /// host's clock, at its last accepted code (`TOTPVerifier`, "Clock drift"); 0 when unknown.
    public var lastSteps: [(key: UInt64, step: UInt64, drift: Int64)] = []
    /// The one code pam-totpd sent and nobody has used yet (text message or email), if any.
    public var pending: PendingCode? = nil
    /// When codes were sent for this account (oldest first, the last day's, at most
    /// `maxSends`): the per-account limits (`oob_resend_interval`, `oob_max_per_hour`,
    /// `oob_max_per_day`) are counted here, under the record lock.
    public var sends: [Int64] = []
    public static let maxSends = 32

    public init() {}

    public static func == (a: UserState, b: UserState) -> Bool {
        a.sequence == b.sequence && a.recordID == b.recordID && a.failures == b.failures
            && a.lockedUntil == b.lockedUntil && a.recoverySet == b.recoverySet && a.recoveryUsed == b.recoveryUsed
            && a.successProcess == b.successProcess && a.lastSteps.count == b.lastSteps.count
            && !zip(a.lastSteps, b.lastSteps).contains { $0.key != $1.key || $0.step != $1.step || $0.drift != $1.drift }
            && a.pending == b.pending && a.sends == b.sends
    }

    /// The factor's key in the state: FNV-1a of its label (labels are unique within a record,
    /// and the state stays small whatever the labels are). Two labels whose keys collided would
    /// share one replay step; with different periods the later write could move it back for
    /// the other factor. Only a user crafting their own labels could arrange that, against
    /// themselves.
    public static func key(forLabel label: [UInt8]) -> UInt64 { fnv1a64(label[...]) }

    /// `factor`'s key: from its label's, as its kind says (`FactorData.stateKey`: a TOTP
    /// factor's is its label's; a token's and a destination's also name their enrolment).
    @inline(never)  // one copy: prune calls it per entry and factor
    public static func key(for factor: Factor) -> UInt64 {
        factor.data.stateKey(label: key(forLabel: factor.label), created: factor.created)
    }

    public func lastStep(forLabel label: [UInt8]) -> UInt64? { lastStep(key: Self.key(forLabel: label)) }

    /// The last step (TOTP) or counter (HOTP) accepted for `factor`, nil if none.
    public func lastStep(of factor: Factor) -> UInt64? { lastStep(key: Self.key(for: factor)) }

    func lastStep(key k: UInt64) -> UInt64? {
        for e in lastSteps where e.key == k { return e.step }
        return nil
    }

    /// The last step of `factor` that counts as used: the later of its last accepted step and
    /// (TOTP) the step that proved it at enrolment. nil when no step is used yet.
    public func lastUsedStep(of factor: Factor) -> UInt64? {
        let accepted = lastStep(of: factor)
        let enrolled = factor.data.enrolledStep
        guard enrolled > 0 else { return accepted }
        return max(accepted ?? 0, enrolled)
    }

    /// The learned clock drift of the factor labelled `label`, in steps (0 when none was learned).
    public func drift(forLabel label: [UInt8]) -> Int64 {
        let k = Self.key(forLabel: label)
        for e in lastSteps where e.key == k { return e.drift }
        return 0
    }

    /// Records `step` as the factor's last accepted step; `drift`, when given, as its learned
    /// clock drift (otherwise the drift it had is kept).
    public mutating func setLastStep(_ step: UInt64, forLabel label: [UInt8], drift: Int64? = nil) {
        setLastStep(step, key: Self.key(forLabel: label), drift: drift)
    }

    /// Records `step` as `factor`'s last accepted step or counter (see `setLastStep(_:forLabel:drift:)`).
    public mutating func setLastStep(_ step: UInt64, of factor: Factor, drift: Int64? = nil) {
        setLastStep(step, key: Self.key(for: factor), drift: drift)
    }

    mutating func setLastStep(_ step: UInt64, key k: UInt64, drift: Int64?) {
        for i in lastSteps.indices where lastSteps[i].key == k {
            lastSteps[i].step = step
            if let drift { lastSteps[i].drift = drift }
            return
        }
        lastSteps.append((k, step, drift ?? 0))
    }

    /// Drops the entries of factors the record no longer has, so the state never holds more
    /// entries than the record has factors (at most `UserRecord.maxFactors`).
    public mutating func prune(to record: UserRecord) {
        var kept: [(key: UInt64, step: UInt64, drift: Int64)] = []
        for e in lastSteps where kept.count < Self.maxEntries {
            for f in record.factors where Self.key(for: f) == e.key {
                kept.append(e)
                break
            }
        }
        lastSteps = kept
        if let p = pending, !record.factors.contains(where: { p.isFor($0) }) {
            pending = nil
        }
    }

    /// This state as it applies to `record`: itself when written for that record (or when
    /// either side predates record ids), else a fresh state that keeps only the sequence, so
    /// nothing of a purged record's state (failures, lockout, steps) carries over.
    public func adopted(by record: UserRecord) -> UserState {
        if recordID == 0 || record.id == 0 || recordID == record.id { return self }
        var fresh = UserState()
        fresh.sequence = sequence
        fresh.sends = sends  // the limits are the account's: a purge does not reset them
        return fresh
    }

    /// Used bits of the recovery set `id` (a different set's bits do not carry over).
    public func usedRecovery(set id: UInt64) -> UInt32 { recoverySet == id ? recoveryUsed : 0 }

    public mutating func markRecoveryUsed(set id: UInt64, index: Int) {
        if recoverySet != id { recoverySet = id; recoveryUsed = 0 }
        if index >= 0 && index < 32 { recoveryUsed |= UInt32(1) << UInt32(index) }
    }
}

/// The code pam-totpd sent for an out-of-band factor (sms, email), kept only as a salted
/// SHA-256, single use: void after a success (of any factor), after `attemptsLeft` wrong
/// answers, and at `expiresAt`.
public struct PendingCode: Equatable, Sendable {
    public static let saltSize = 16
    public static let bindingSize = 32
    /// The factor the code was sent for (`binding(for:enrolment:)`): a SHA-256 of everything
    /// that names it, so that no two factors share a code. (It was a 64-bit FNV-1a key of a
    /// label users choose, which could be made to collide: issue 36.)
    public var binding: [UInt8]
    public var sentAt: Int64
    public var expiresAt: Int64
    public var digits: UInt8
    public var attemptsLeft: UInt8
    public var salt: [UInt8]
    public var hash: [UInt8]

    public init(binding: [UInt8], sentAt: Int64, expiresAt: Int64, digits: UInt8, attemptsLeft: UInt8,
                salt: [UInt8], hash: [UInt8]) {
        self.binding = binding
        self.sentAt = sentAt
        self.expiresAt = expiresAt
        self.digits = digits
        self.attemptsLeft = attemptsLeft
        self.salt = salt
        self.hash = hash
    }

    /// A new code of `digits` digits (uniform: rejection sampling on the generator's words)
    /// and its pending entry, valid `lifetime` seconds from `now`.
    public static func make<G: RandomNumberGenerator>(for factor: Factor, digits: Int, lifetime: Int64, maxAttempts: Int,
                                                      at now: Int64, using generator: inout G) -> (code: [UInt8], pending: PendingCode) {
        let n = min(max(digits, 6), 8)
        var modulus: UInt64 = 1
        for _ in 0..<n { modulus &*= 10 }
        let limit = UInt64.max - UInt64.max % modulus
        var word = generator.next()
        while word >= limit { word = generator.next() }
        var value = word % modulus
        var code = [UInt8](repeating: 0x30, count: n)
        var i = n - 1
        while i >= 0 {
            code[i] = 0x30 &+ UInt8(truncatingIfNeeded: value % 10)
            value /= 10
            i -= 1
        }
        var salt: [UInt8] = []
        while salt.count < saltSize {
            var w = generator.next()
            for _ in 0..<8 where salt.count < saltSize {
                salt.append(UInt8(truncatingIfNeeded: w))
                w >>= 8
            }
        }
        let (expires, overflow) = now.addingReportingOverflow(lifetime)
        let pending = PendingCode(binding: binding(for: factor), sentAt: now, expiresAt: overflow ? Int64.max : expires,
                                  digits: UInt8(n), attemptsLeft: UInt8(clamping: max(maxAttempts, 1)), salt: salt,
                                  hash: digest(salt: salt, code: code))
        return (code, pending)
    }

    /// The binding of a code sent for `factor` (`enrolment`: the code that proves a factor
    /// being enrolled, which no saved factor's binding equals, so it never logs in): SHA-256 of
    /// a tag, the kind, whether it is an enrolment's, then the label and the destination each
    /// after its length (u16), then the creation time (i64, little-endian). The encoding is
    /// one-to-one, so two factors that differ in any of these (two labels, a phone enrolled
    /// again under an old label) get different bindings unless SHA-256 collides.
    public static func binding(for factor: Factor, enrolment: Bool = false) -> [UInt8] {
        var input: [UInt8] = []
        let destination = factor.destination ?? []
        input.reserveCapacity(32 &+ factor.label.count &+ destination.count)
        input.append(literal: "pam_totp pending code 1;")
        input.append(factor.kind.bit)
        input.append(enrolment ? 1 : 0)
        for part in [factor.label, destination] {
            let n = min(part.count, 0xFFFF)
            input.append(UInt8(truncatingIfNeeded: n))
            input.append(UInt8(truncatingIfNeeded: n >> 8))
            input.append(contentsOf: part.prefix(n))
        }
        var t = UInt64(bitPattern: factor.created)
        for _ in 0..<8 {
            input.append(UInt8(truncatingIfNeeded: t))
            t >>= 8
        }
        return SHA256.hash(input)
    }

    /// Whether this code was sent for `factor` (a saved one: never an enrolment's code).
    public func isFor(_ factor: Factor) -> Bool { factor.kind.answering == .sent && binding == Self.binding(for: factor) }

    /// SHA-256 of `salt` then `code`, hashed from one buffer reserved whole and wiped after
    /// (`salt + code` left a copy of the code in freed memory: issue 36).
    static func digest(salt: [UInt8], code: [UInt8]) -> [UInt8] {
        var input: [UInt8] = []
        input.reserveCapacity(salt.count &+ code.count)
        input.append(contentsOf: salt)
        input.append(contentsOf: code)
        defer { wipe(&input) }
        return SHA256.hash(input)
    }

    /// Whether `code` is the live pending code `pending` (nil: none; the same hashing is done
    /// anyway). Constant time in the code's bytes. No copy of `code` is left in freed memory.
    public static func matches(_ pending: PendingCode?, code: [UInt8], at now: Int64) -> Bool {
        let salt = pending?.salt ?? [UInt8](repeating: 0, count: saltSize)
        let digest = digest(salt: salt, code: code)
        guard let p = pending else { return false }
        let same = constantTimeEqual(digest, p.hash)
        return same && p.isLive(at: now) && code.count == Int(p.digits)
    }

    /// Not expired and not out of attempts.
    public func isLive(at now: Int64) -> Bool { now < expiresAt && now >= sentAt && attemptsLeft > 0 }
}

/// Seconds from `t` to `now`, never negative and never trapping (a stored time may be
/// anything): a time in the future (the clock was set back) is "just now", so a clock step
/// never wipes the limits; one too far in the past is `Int64.max`.
public func secondsSince(_ t: Int64, at now: Int64) -> Int64 {
    guard t < now else { return 0 }
    let (age, overflow) = now.subtractingReportingOverflow(t)
    return overflow ? Int64.max : age
}

extension UserState {
    /// The sends of the last `seconds` before `now` (one stamped in the future counts).
    public func sends(within seconds: Int64, of now: Int64) -> Int {
        var n = 0
        for t in sends where secondsSince(t, at: now) < seconds { n += 1 }
        return n
    }

    /// Records a send at `now`: keeps the last day's, at most `maxSends`.
    public mutating func recordSend(at now: Int64) {
        var kept: [Int64] = []
        for t in sends where secondsSince(t, at: now) < 86_400 { kept.append(t) }
        kept.append(now)
        sends = Array(kept.suffix(Self.maxSends))
    }
}

/// FNV-1a, 64 bits.
package func fnv1a64(_ bytes: ArraySlice<UInt8>) -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    for b in bytes { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01B3 }
    return h
}

/// FNV-1a, 64 bits, continued from `hash` over the 8 bytes of `word` (little-endian).
func fnv1a64(word: UInt64, _ hash: UInt64) -> UInt64 {
    var h = hash
    for i in 0..<8 { h = (h ^ ((word >> UInt64(8 * i)) & 0xFF)) &* 0x0000_0100_0000_01B3 }
    return h
}
