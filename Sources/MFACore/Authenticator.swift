/// The decision the PAM module makes, without any PAM. The module calls `lookup` (no lock,
/// to decide whether to prompt at all), prompts, then `authenticate`, which takes the user's
/// lock and does read → verify → write of the state as one step (DESIGN §4.5–4.7).
public enum Enrollment {
    /// The user has a record in `store` (opened and checked once, reused under the lock).
    case enrolled(Store)
    case unenrolled
    case failed(MFAError)
}

public enum AuthOutcome: Equatable {
    /// The answer matched `factor` at time step `step`, and the step was recorded.
    case success(factor: [UInt8], step: UInt64)
    /// The answer was an unused recovery code; it is now used up.
    case recoveryCode(remaining: Int)
    /// Enrolled, but the answer matched nothing usable. `replayed`: it matched a time step that
    /// was already used. `failures`: consecutive failures now; `lockedUntil`: set when this
    /// failure started a lockout; `saved`: false if the failure could not be recorded.
    case wrongCode(replayed: Bool, failures: UInt32, lockedUntil: Int64?, saved: Bool)
    /// Refused without checking the answer: too many failures. `permanent` at the hard cap.
    case lockedOut(until: Int64, permanent: Bool)
    /// No record for the user (and no `nullok`, or the caller would not have asked).
    case unenrolled
    case failed(MFAError)
}

public enum Authenticator {
    public static func lookup(user: [UInt8], options: ModuleOptions) -> Enrollment {
        do throws(MFAError) {
            try Store.validate(user: user)
        } catch {
            return .unenrolled  // a name that cannot be a record cannot be enrolled
        }
        do throws(MFAError) {
            let store = try Store(path: options.store)
            guard let record = try store.read(user: user), record.isEnrolled else { return .unenrolled }
            return .enrolled(store)
        } catch {
            return .failed(error)
        }
    }

    /// Verifies `answer` for `user` at `unixTime` under the user's lock, updating the state.
    /// `enrollment` is what `lookup` found before the prompt: an unenrolled user is answered
    /// without taking a lock (so guessing names creates no lock files); for an enrolled user the
    /// record is read again under the lock, from the store `lookup` opened.
    public static func authenticate(user: [UInt8], answer: [UInt8], at unixTime: Int64,
                                    options: ModuleOptions, enrollment: Enrollment) -> AuthOutcome {
        let store: Store
        switch enrollment {
        case .unenrolled:
            decoy(answer, at: unixTime)
            return .unenrolled
        case .failed(let e):
            decoy(answer, at: unixTime)
            return .failed(e)
        case .enrolled(let s):
            store = s
        }
        do throws(MFAError) {
            let verifier = try TOTPVerifier(adjacentIntervals: options.adjacentIntervals)
            return try store.withLock(user: user) { () throws(MFAError) -> AuthOutcome in
                guard let record = try store.read(user: user), record.isEnrolled else {
                    decoy(answer, at: unixTime)
                    return .unenrolled
                }
                var state = try store.readState(user: user)
                return try decide(record: record, state: &state, answer: answer, at: unixTime,
                                  verifier: verifier, options: options) { (s) throws(MFAError) in
                    try store.writeStateLocked(user: user, state: s)
                }
            }
        } catch {
            return .failed(error)
        }
    }

    /// The policy on one record and state, with the state write injected (tests use it with an
    /// in-memory state; the module with the store). Pure apart from `save`.
    public static func decide(record: UserRecord, state: inout UserState, answer: [UInt8], at unixTime: Int64,
                              verifier: TOTPVerifier, options: ModuleOptions,
                              save: (UserState) throws(MFAError) -> Void) throws(MFAError) -> AuthOutcome {
        if state.failures >= UserState.hardFailureCap {
            decoy(answer, at: unixTime)
            return .lockedOut(until: Int64.max, permanent: true)
        }
        if unixTime < state.lockedUntil {
            decoy(answer, at: unixTime)
            return .lockedOut(until: state.lockedUntil, permanent: false)
        }

        // Every factor is checked (no early exit); the first factor in record order that
        // matched at an unused step wins.
        var matched: (label: [UInt8], step: UInt64)? = nil
        var replayed = false
        for factor in record.factors {
            let key = HMACKey(algorithm: factor.parameters.algorithm, key: factor.secret)
            let m = try verifier.match(answer: answer, key: key, parameters: factor.parameters, at: unixTime,
                                       usedUpTo: state.lastStep(forLabel: factor.label))
            if let step = m.step, matched == nil { matched = (factor.label, step) }
            if m.replayed { replayed = true }
        }
        if let (label, step) = matched {
            state.failures = 0
            state.lockedUntil = 0
            state.setLastStep(step, forLabel: label)
            try save(state)  // §4.1: a code whose use cannot be recorded is not accepted
            return .success(factor: label, step: step)
        }
        if let recovery = record.recovery, let digits = RecoverySet.normalize(answer),
           let index = recovery.match(digits, used: state.usedRecovery(set: recovery.id)) {
            state.failures = 0
            state.lockedUntil = 0
            state.markRecoveryUsed(set: recovery.id, index: index)
            try save(state)
            let used = state.usedRecovery(set: recovery.id)
            var remaining = 0
            for i in 0..<recovery.hashes.count where i >= 32 || (used >> UInt32(i)) & 1 == 0 { remaining += 1 }
            return .recoveryCode(remaining: remaining)
        }

        // A failure: count it; every max_failures-th consecutive failure starts a lockout.
        state.failures = state.failures < UInt32.max ? state.failures + 1 : state.failures
        var lockedUntil: Int64? = nil
        if options.lockoutSeconds > 0 && options.maxFailures > 0 && state.failures % options.maxFailures == 0 {
            let (until, overflow) = unixTime.addingReportingOverflow(options.lockoutSeconds)
            state.lockedUntil = overflow ? Int64.max : until
            lockedUntil = state.lockedUntil
        }
        // A failure that cannot be saved still denies, and cannot lock anyone out. It also cannot
        // help an attacker: with an unwritable state no code can succeed either (see above).
        var saved = true
        do throws(MFAError) { try save(state) } catch { saved = false }
        return .wrongCode(replayed: replayed, failures: state.failures, lockedUntil: lockedUntil, saved: saved)
    }

    /// The same work as one SHA-1 factor, against a throwaway key, so that unenrolled and
    /// locked-out users are not told apart by timing.
    static func decoy(_ answer: [UInt8], at unixTime: Int64) {
        let key = HMACKey(algorithm: .sha1, key: [UInt8](repeating: 0, count: 20))
        if let v = try? TOTPVerifier() {
            _ = try? v.match(answer: answer, key: key, parameters: .default, at: unixTime, usedUpTo: nil)
        }
    }
}
