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

    public init() {}

    public static func == (a: UserState, b: UserState) -> Bool {
        a.sequence == b.sequence && a.recordID == b.recordID && a.failures == b.failures
            && a.lockedUntil == b.lockedUntil && a.recoverySet == b.recoverySet && a.recoveryUsed == b.recoveryUsed
            && a.successProcess == b.successProcess && a.lastSteps.count == b.lastSteps.count
            && !zip(a.lastSteps, b.lastSteps).contains { $0.key != $1.key || $0.step != $1.step || $0.drift != $1.drift }
    }

    /// The factor's key in the state: FNV-1a of its label (labels are unique within a record,
    /// and the state stays small whatever the labels are). Two labels whose keys collided would
    /// share one replay step; with different periods the later write could move it back for
    /// the other factor. Only a user crafting their own labels could arrange that, against
    /// themselves.
    public static func key(forLabel label: [UInt8]) -> UInt64 { fnv1a64(label[...]) }

    /// `factor`'s key: a TOTP factor's is its label's. A counter-based factor's also names the
    /// enrolment (its creation time and first counter), so a token enrolled again under a
    /// label that was used before (by another token, or by a TOTP factor whose entry holds a
    /// time step) never inherits that entry's counter, which would lock it out.
    @inline(never)  // one copy: prune calls it per entry and factor
    public static func key(for factor: Factor) -> UInt64 {
        let label = key(forLabel: factor.label)
        switch factor.kind {
        case .totp: return label
        case .hotp: return fnv1a64(word: UInt64(bitPattern: factor.created), fnv1a64(word: factor.counter, label))
        }
    }

    public func lastStep(forLabel label: [UInt8]) -> UInt64? { lastStep(key: Self.key(forLabel: label)) }

    /// The last step (TOTP) or counter (HOTP) accepted for `factor`, nil if none.
    public func lastStep(of factor: Factor) -> UInt64? { lastStep(key: Self.key(for: factor)) }

    func lastStep(key k: UInt64) -> UInt64? {
        for e in lastSteps where e.key == k { return e.step }
        return nil
    }

    /// The last step of `factor` that counts as used: the later of its last accepted step and
    /// the step that proved it at enrolment. nil when no step is used yet.
    public func lastUsedStep(of factor: Factor) -> UInt64? {
        let accepted = lastStep(of: factor)
        guard factor.enrolledStep > 0 else { return accepted }
        return max(accepted ?? 0, factor.enrolledStep)
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
    }

    /// This state as it applies to `record`: itself when written for that record (or when
    /// either side predates record ids), else a fresh state that keeps only the sequence, so
    /// nothing of a purged record's state (failures, lockout, steps) carries over.
    public func adopted(by record: UserRecord) -> UserState {
        if recordID == 0 || record.id == 0 || recordID == record.id { return self }
        var fresh = UserState()
        fresh.sequence = sequence
        return fresh
    }

    /// Used bits of the recovery set `id` (a different set's bits do not carry over).
    public func usedRecovery(set id: UInt64) -> UInt32 { recoverySet == id ? recoveryUsed : 0 }

    public mutating func markRecoveryUsed(set id: UInt64, index: Int) {
        if recoverySet != id { recoverySet = id; recoveryUsed = 0 }
        if index >= 0 && index < 32 { recoveryUsed |= UInt32(1) << UInt32(index) }
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
