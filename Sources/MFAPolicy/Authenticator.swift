import MFACrypto
import MFASystem

/// What `lookup` found before the prompt. An enrolled user's record is kept, with its file
/// still open, so that under the lock it is re-read only if it was replaced meanwhile.
public enum Enrollment<S: TOTPStore> {
    case enrolled(S.Enrolled)
    case unenrolled
    /// A record exists for the name but was enrolled for another account (uid `recordUID`):
    /// the name was reused. Not enrolled, and worth a log line.
    case otherAccount(recordUID: UInt32)
    case failed(MFAError)
}

/// An account as NSS knows it: its canonical name and uid.
public struct Account: Equatable {
    public var name: [UInt8]
    public var uid: UInt32
    public init(name: [UInt8], uid: UInt32) { (self.name, self.uid) = (name, uid) }
}

public enum AuthOutcome: Equatable, Sendable {
    /// The answer matched `factor` (a code of `digits` digits) at time step `step`, and the
    /// step was recorded. `driftJump`: the factor's learned clock drift changed by
    /// `TOTPVerifier.driftJumpSteps` or more (worth a log line).
    case success(factor: [UInt8], step: UInt64, digits: Int, driftJump: DriftJump? = nil)
    /// The answer was an unused recovery code; it is now used up.
    case recoveryCode(remaining: Int)
    /// Enrolled, but the answer matched nothing usable. `replayed`: it matched a time step that
    /// was already used. `failures`: consecutive failures now (recorded); `lockedUntil`: set
    /// when this failure started a lockout.
    case wrongCode(replayed: Bool, failures: UInt32, lockedUntil: Int64?)
    /// The answer matched nothing usable but is a counter-based factor's code past its window,
    /// within the resync reach: counted as a failure (`failures`, recorded) until the next
    /// answer of the same login, the token's following code, completes the resync
    /// (`authenticate(previous:)`). Never when this failure started a lockout.
    case resyncNeeded(failures: UInt32)
    /// The outcome of the attempt could not be recorded (`error` says why). Whatever the answer
    /// was, it is denied exactly like a wrong code (docs/ARCHITECTURE.md, section 4.1): a right code that cannot be
    /// recorded as used is not accepted, and the caller cannot tell the two apart.
    case notRecorded(MFAError)
    /// Refused without using the answer: too many failures. `permanent` at the hard cap.
    case lockedOut(until: Int64, permanent: Bool)
    /// No record for the user (or one that belongs to another account).
    case unenrolled
    case failed(MFAError)
}

/// A large change of a factor's learned clock drift, in steps (`TOTPVerifier`, "Clock drift").
public struct DriftJump: Equatable, Sendable {
    public var from: Int64
    public var to: Int64
    public init(from: Int64, to: Int64) { (self.from, self.to) = (from, to) }
}

/// The outcome of the policy and the state to record for it (nil: nothing changes).
public struct Decision: Equatable {
    public var outcome: AuthOutcome
    public var state: UserState?
}

public enum Authenticator {
    /// The policy on one record and state, pure: every factor's window and (for an answer
    /// shaped like one) the recovery codes are checked whatever the state says, so a locked,
    /// enrolled or unenrolled user costs the same; then the verdict and the state to record.
    /// `process` is recorded with an accepted code (UserState.successProcess).
    @inline(never)  // called by the login and by the decoy: one copy
    public static func decide(record: UserRecord, state: UserState, answer: [UInt8], at unixTime: Int64,
                              previous: [UInt8]? = nil, verifier: TOTPVerifier, options: ModuleOptions,
                              process: UInt32 = 0) throws(MFAError) -> Decision {
        // Every factor is checked (no early exit); the first factor in record order that
        // matched at an unused step wins.
        var matched: (factor: Factor, step: UInt64, drift: Int64, before: Int64)? = nil
        var replayed = false
        var far = false
        let hotp = try HOTPWindow(size: options.hotpWindow, resync: options.hotpResyncWindow)
        for factor in record.factors {
            let m = try factor.check(answer: answer, previous: previous, at: unixTime, verifier: verifier, hotp: hotp,
                                     state: state, forwardPass: options.forwardPass)
            // A kind the policy does not allow here (factor_kinds) is checked like the others
            // (the same work) but accepts nothing.
            guard options.factorKinds & factor.kind.bit != 0 else { continue }
            if let step = m.step, matched == nil {
                matched = (factor, step, m.driftAfter, m.driftBefore)
            }
            if m.replayed { replayed = true }
            if m.far { far = true }
        }
        let recoveryIndex = recoveryMatch(record: record, state: state, answer: answer, options: options)

        if state.failures >= UserState.hardFailureCap {
            return Decision(outcome: .lockedOut(until: Int64.max, permanent: true), state: nil)
        }
        if unixTime < state.lockedUntil {
            return Decision(outcome: .lockedOut(until: state.lockedUntil, permanent: false), state: nil)
        }

        var next = state.current(for: record)
        if let (factor, step, drift, before) = matched {
            next.succeeded(process: process)
            next.setLastStep(step, of: factor, drift: drift)
            let change = drift > before ? drift - before : before - drift  // both within ±10
            let jump = change >= TOTPVerifier.driftJumpSteps ? DriftJump(from: before, to: drift) : nil
            return Decision(outcome: .success(factor: factor.label, step: step, digits: factor.digits(state: state),
                                                      driftJump: jump),
                            state: next)
        }
        if let recovery = record.recovery, let index = recoveryIndex {
            next.succeeded(process: process)
            next.markRecoveryUsed(set: recovery.id, index: index)
            let used = next.usedRecovery(set: recovery.id)
            var remaining = 0
            for i in 0..<recovery.hashes.count where i >= 32 || (used >> UInt32(i)) & 1 == 0 { remaining += 1 }
            return Decision(outcome: .recoveryCode(remaining: remaining), state: next)
        }

        let (failed, lockedUntil) = failure(next, at: unixTime, options: options)
        // A far code starts a resync once per login (the answer after it must complete it).
        if far && previous == nil && lockedUntil == nil {
            return Decision(outcome: .resyncNeeded(failures: failed.failures), state: failed)
        }
        return Decision(outcome: .wrongCode(replayed: replayed, failures: failed.failures, lockedUntil: lockedUntil), state: failed)
    }

    /// The recovery code `answer` matches (its index in the set), if it is one. A
    /// recovery-code-shaped answer costs one PBKDF2 whether or not a factor matched and whether
    /// or not the user has recovery codes (an absent set is checked against a throwaway one): a
    /// right 8-digit code costs what a wrong one does. forward_pass takes no recovery code: the
    /// password cannot be told from its digits.
    @inline(__always)
    static func recoveryMatch(record: UserRecord, state: UserState, answer: [UInt8], options: ModuleOptions) -> Int? {
        guard !options.forwardPass, let digits = RecoverySet.normalize(answer) else { return nil }  // isCostly
        guard let recovery = record.recovery else {
            _ = RecoverySet.decoy.match(digits, used: 0)
            return nil
        }
        return recovery.match(digits, used: state.usedRecovery(set: recovery.id))
    }

    /// Whether checking `answer` costs a PBKDF2 (it is shaped like a recovery code): the
    /// store records such an attempt as a failure before that work (`pendingFailure`).
    public static func isCostly(_ answer: [UInt8], options: ModuleOptions) -> Bool {
        !options.forwardPass && RecoverySet.normalize(answer) != nil
    }

    /// `state` after one more failure: every max_failures-th consecutive failure starts a
    /// lockout. The last success's process id goes: it may only ever name the process whose
    /// code was the last thing recorded (totp-enroll relies on that, Proof.swift).
    static func failure(_ state: UserState, at unixTime: Int64, options: ModuleOptions) -> (state: UserState, lockedUntil: Int64?) {
        var next = state
        next.successProcess = 0
        // A wrong answer uses one of the sent code's attempts (oob_max_attempts); the last one voids it.
        if var p = next.pending {
            p.attemptsLeft = p.attemptsLeft > 0 ? p.attemptsLeft - 1 : 0
            next.pending = p.attemptsLeft == 0 || unixTime >= p.expiresAt ? nil : p
        }
        next.failures = next.failures < UInt32.max ? next.failures + 1 : next.failures
        var lockedUntil: Int64? = nil
        // A caller of pam-totpd picks maxFailures per request: the site's locks regardless.
        var lockNow = options.maxFailures > 0 && next.failures % options.maxFailures == 0
        if let site = options.siteMaxFailures, site > 0, next.failures % site == 0 { lockNow = true }
        if options.lockoutSeconds > 0 && lockNow {
            let (until, overflow) = unixTime.addingReportingOverflow(options.lockoutSeconds)
            next.lockedUntil = overflow ? Int64.max : until
            lockedUntil = next.lockedUntil
        }
        return (next, lockedUntil)
    }

    /// `state` after one more failure (lockout as for a wrong code), for a check outside
    /// `decide`: a wrong code typed back at an enrolment (`FileStore.confirmEnrolment`).
    public static func failed(_ state: UserState, at unixTime: Int64, options: ModuleOptions) -> UserState {
        failure(state, at: unixTime, options: options).state
    }

    /// The state to record before a costly check (`isCostly`): the attempt as a failure, so a
    /// process killed during the PBKDF2 leaves it counted, right answer or wrong (a right one
    /// then clears it). Nil when the user is locked out: such an attempt records nothing.
    public static func pendingFailure(record: UserRecord, state: UserState, at unixTime: Int64,
                                      options: ModuleOptions) -> UserState? {
        guard state.failures < UserState.hardFailureCap, unixTime >= state.lockedUntil else { return nil }
        return failure(state.current(for: record), at: unixTime, options: options).state
    }

}

/// One login against a store: what `lookup` found before the prompt, and the store to verify
/// the answer with after it.
public struct Login<S: TOTPStore> {
    let store: S?
    public var enrollment: Enrollment<S>

    public init(store: S?, enrollment: Enrollment<S>) {
        self.store = store
        self.enrollment = enrollment
    }

    /// What the login may offer an enrolled user where `kinds` are allowed (typed codes only
    /// for anyone else).
    public func hints(kinds: UInt8) -> FactorHints {
        guard let store, case .enrolled(let enrolled) = enrollment else { return FactorHints() }
        return store.hints(enrolled, kinds: kinds)
    }

    /// `authenticate` for an enrolled user; the decoy work for everyone else.
    public func authenticate(answer: [UInt8], previous: [UInt8]? = nil, at unixTime: Int64, options: ModuleOptions,
                             process: UInt32) -> AuthOutcome {
        if let store {
            return store.authenticate(answer: answer, previous: previous, at: unixTime, options: options, process: process,
                                      enrollment: enrollment)
        }
        S.decoy(answer, at: unixTime, options: options)
        if case .failed(let e) = enrollment { return .failed(e) }
        return .unenrolled
    }
}

extension UserState {
    /// This state as `record`'s: adopted by it, bound to its id, pruned to its factors.
    func current(for record: UserRecord) -> UserState {
        var next = adopted(by: record)
        next.recordID = record.id
        next.prune(to: record)
        return next
    }

    /// An accepted code or recovery code: failures and lockout cleared, `process` recorded,
    /// and a sent code no longer needed is void (it was for this login, which is over).
    mutating func succeeded(process: UInt32) {
        failures = 0
        lockedUntil = 0
        successProcess = process
        pending = nil
    }
}
