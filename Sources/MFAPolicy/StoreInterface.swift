import MFACrypto
import MFASystem

// The store interface (docs/ARCHITECTURE.md, section 2.2): every operation the module, totp-enroll and
// pam-totpd perform on enrolments. Callers are generic over it (Embedded Swift cannot call
// generic methods through an existential), and none of them touches the store's files or
// tables itself. FileStore is the first implementation; a database backend plugs in here, and
// one test suite (StoreContractTests) runs against every implementation.
//
// The rules live behind this interface, not in the callers: unique labels and secrets, never
// a user's own last factor, records bound to an account, one commit per change, failure
// counts, lockouts and the replay guard recorded with every verdict.
public protocol TOTPStore: AnyObject {
    /// What `lookup` keeps of an enrolled user between the prompt and `authenticate`.
    associatedtype Enrolled

    /// Before the prompt: is `user` enrolled (for the account `account` finds in NSS)? Creates
    /// nothing, so guessing names leaves no trace in the store.
    func lookup(user: [UInt8], account: () throws(MFAError) -> Account?) throws(MFAError) -> Enrollment<Self>

    /// Verifies `answer` and records the outcome as one step (docs/ARCHITECTURE.md, section 4.1):
    /// success, failure count, lockout and used step together, or `notRecorded`. `previous`:
    /// the answer before this one in the same login, told `resyncNeeded` (a token's resync).
    func authenticate(answer: [UInt8], previous: [UInt8]?, at unixTime: Int64, options: ModuleOptions, process: UInt32,
                      enrolled: Enrolled) -> AuthOutcome

    /// A user's record and state (never shown with its secrets by callers), nil if none.
    func status(user: [UInt8]) throws(MFAError) -> UserStatus?

    /// Every user the store holds a record for (`totp-enroll status --all`), in byte order.
    func users() throws(MFAError) -> [[UInt8]]

    /// The checks `enroll` will make, before anything is shown or a code is asked for.
    func checkEnrollable(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8]?) throws(MFAError)

    /// Enrolment at first login: saves a TOTP factor `label` of `secret` (made by the module and
    /// shown to the user; SHA-1, 6 digits, 30 s: `OTPParameters.default`) with the step of
    /// `answer` used, only if `answer` is its code in the window of `options.adjacentIntervals`
    /// at `now` (a database: on its own clock) and only while the user has no factor — one step
    /// under the user's lock, so of two first enrolments at once the first wins and the second
    /// adds nothing (`.hadFactor`). Nothing is saved unless it returns `.enrolled`; it throws
    /// when the factor cannot be saved (another account's record). `answer` nil: only the
    /// checks, before anything is shown (`.mayEnrol` or `.hadFactor`; `secret` unused).
    func enrollAtLogin(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8], answer: [UInt8]?, at now: Int64,
                       options: ModuleOptions) throws(MFAError) -> FirstFactor

    /// Adds a proven factor (and, for an import, recovery codes) in one commit.
    @discardableResult
    func enroll<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor,
                                          importedCodes: [[UInt8]]?, using generator: inout G) throws(MFAError) -> Int

    /// Removes one factor; returns how many are left.
    func removeFactor(user: [UInt8], accountUID: UInt32, label: [UInt8], mayRemoveLast: Bool) throws(MFAError) -> Int

    /// Replaces the user's recovery codes; true if a set was replaced.
    func replaceRecovery(user: [UInt8], accountUID: UInt32, set: RecoverySet) throws(MFAError) -> Bool

    /// Clears failures and lockout (root).
    func unlock(user: [UInt8], at now: Int64) throws(MFAError) -> UnlockResult

    /// Removes everything held for `user`; false if there was nothing.
    func purge(user: [UInt8]) throws(MFAError) -> Bool

    /// The work of a check for an answer nobody enrolled can be asked for (an unknown,
    /// unenrolled or vanished user), costing what an enrolled user's check costs in this store,
    /// so the two are not told apart by timing (docs/ARCHITECTURE.md, section 4.2).
    static func decoy(_ answer: [UInt8], at unixTime: Int64, options: ModuleOptions)

    /// What a login may offer an enrolled user where `kinds` are allowed (`factor_kinds`):
    /// typed codes, and each sent-code factor's name and masked destination.
    func hints(_ enrolled: Enrolled, kinds: UInt8) -> FactorHints

    /// Plans a send to the factor `label` and, for `.send`, records the pending code (hashed)
    /// and the send before returning (`OutOfBand.plan`; pam-totpd sends after it returns).
    func sendCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32?, label: [UInt8], at now: Int64,
                                            options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan

    /// The code sent at `sentAt` for the factor `binding` names (`PendingCode.binding`) was not
    /// delivered: void it; `uncount`: its send is not counted either (the program never ran).
    func voidSentCode(user: [UInt8], sentAt: Int64, binding: [UInt8], uncount: Bool) throws(MFAError)

    /// Plans the code that proves a new out-of-band factor (`OutOfBand.planEnrolment`) and,
    /// for `.send`, records it before returning.
    func sendEnrolmentCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, at now: Int64,
                                                     options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan

    /// Checks the code typed back at an enrolment (`sendEnrolmentCode` sent it at `sentAt`) and,
    /// if it is the one, saves `factor` — one step under the user's lock; a wrong one uses an
    /// attempt and counts as a failure like a wrong code at login.
    func confirmEnrolment<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, sentAt: Int64,
                                                    answer: [UInt8], at now: Int64, options: ModuleOptions,
                                                    using generator: inout G) throws(MFAError) -> EnrolmentCheck

    /// The store makes and sends codes itself (`SendPlan.queued`): the caller needs no sender
    /// of its own and never sees a code (fleet mode).
    static var queuesCodes: Bool { get }

    /// `lookup` then `authenticate` as one step (see the extension's default).
    func login(user: [UInt8], account: () throws(MFAError) -> Account?, answer: [UInt8], previous: [UInt8]?,
               at unixTime: Int64, options: ModuleOptions, process: UInt32) -> AuthOutcome
}

extension TOTPStore {
    /// One login after the prompt, from the name alone (pam-totpd): `lookup`, then
    /// `authenticate` (the decoy work for anyone not enrolled); a name enrolled for another
    /// account is not enrolled. A store that can do both in one step (one database statement)
    /// provides its own.
    public func login(user: [UInt8], account: () throws(MFAError) -> Account?, answer: [UInt8], previous: [UInt8]?,
                      at unixTime: Int64, options: ModuleOptions, process: UInt32) -> AuthOutcome {
        var enrollment: Enrollment<Self>
        do throws(MFAError) { enrollment = try lookup(user: user, account: account) } catch { enrollment = .failed(error) }
        if case .otherAccount = enrollment { enrollment = .unenrolled }
        return authenticate(answer: answer, previous: previous, at: unixTime, options: options, process: process,
                            enrollment: enrollment)
    }

    /// A login's first (or only) answer.
    public func login(user: [UInt8], account: () throws(MFAError) -> Account?, answer: [UInt8], at unixTime: Int64,
                      options: ModuleOptions, process: UInt32) -> AuthOutcome {
        login(user: user, account: account, answer: answer, previous: nil, at: unixTime, options: options, process: process)
    }

    /// A login's first (or only) answer.
    public func authenticate(answer: [UInt8], at unixTime: Int64, options: ModuleOptions, process: UInt32,
                             enrolled: Enrolled) -> AuthOutcome {
        authenticate(answer: answer, previous: nil, at: unixTime, options: options, process: process, enrolled: enrolled)
    }

    /// `lookup` with the account already known (totp-enroll, pam-totpd, tests).
    public func lookup(user: [UInt8], accountUID: UInt32?) throws(MFAError) -> Enrollment<Self> {
        try lookup(user: user) { () throws(MFAError) -> Account? in accountUID.map { Account(name: user, uid: $0) } }
    }

    /// The module's step after the prompt: `authenticate` for an enrolled user; for everyone
    /// else the same work on a throwaway record (docs/ARCHITECTURE.md, section 4.2).
    public func authenticate(answer: [UInt8], previous: [UInt8]? = nil, at unixTime: Int64, options: ModuleOptions,
                             process: UInt32, enrollment: Enrollment<Self>) -> AuthOutcome {
        switch enrollment {
        case .unenrolled, .otherAccount:
            Self.decoy(answer, at: unixTime, options: options)
            return .unenrolled
        case .failed(let e):
            Self.decoy(answer, at: unixTime, options: options)
            return .failed(e)
        case .enrolled(let enrolled):
            return authenticate(answer: answer, previous: previous, at: unixTime, options: options, process: process,
                                enrolled: enrolled)
        }
    }
}

extension TOTPStore {
    /// A store without enrolment at first login.
    public func enrollAtLogin(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8], answer: [UInt8]?, at now: Int64,
                              options: ModuleOptions) throws(MFAError) -> FirstFactor {
        throw .refusal(.enrolAtLoginUnavailable)
    }

    /// A store without sent codes: typed codes only.
    public func hints(_ enrolled: Enrolled, kinds: UInt8) -> FactorHints { FactorHints() }

    public func sendCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32?, label: [UInt8], at now: Int64,
                                                   options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan {
        .refused("text-message and email codes are not available with this store yet")
    }

    public func voidSentCode(user: [UInt8], sentAt: Int64, binding: [UInt8], uncount: Bool) throws(MFAError) {}

    public func confirmEnrolment<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, sentAt: Int64,
                                                           answer: [UInt8], at now: Int64, options: ModuleOptions,
                                                           using generator: inout G) throws(MFAError) -> EnrolmentCheck {
        throw .refusal(.outOfBandUnavailable)
    }

    public static var queuesCodes: Bool { false }

    public func sendEnrolmentCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, at now: Int64,
                                                            options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan {
        .refused("text-message and email factors are not available with this store yet")
    }
}

extension TOTPStore {
    /// The policy's share of a check (`decoy`): one SHA-1 factor held in memory, and a PBKDF2
    /// for a recovery-code-shaped answer. A store whose check does more (the file store parses
    /// a record and builds a state slot) provides its own.
    public static func decoy(_ answer: [UInt8], at unixTime: Int64, options: ModuleOptions) {
        guard let factor = try? Factor(label: literal("decoy"), parameters: .default, created: 0,
                                       secret: [UInt8](repeating: 0, count: 20)),
              let verifier = try? TOTPVerifier(adjacentIntervals: options.adjacentIntervals) else { return }
        _ = try? Authenticator.decide(record: UserRecord(uid: 0, factors: [factor]), state: UserState(), answer: answer,
                                      at: unixTime, verifier: verifier, options: options)
    }
}

/// A user's record and state as `list` shows them.
public struct UserStatus: Equatable, Sendable {
    public var record: UserRecord
    public var state: UserState
    public init(record: UserRecord, state: UserState) { (self.record, self.state) = (record, state) }
}

/// What `unlock` found and cleared.
public struct UnlockResult: Equatable, Sendable {
    public var failures: UInt32
    public var lockedUntil: Int64
    /// The state was unreadable and was rebuilt (every factor's steps up to now count as used).
    public var rebuilt: Bool
    public init(failures: UInt32, lockedUntil: Int64, rebuilt: Bool) {
        self.failures = failures
        self.lockedUntil = lockedUntil
        self.rebuilt = rebuilt
    }
}
