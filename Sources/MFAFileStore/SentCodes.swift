import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

// Sent codes in the file store: the plan (`OutOfBand.plan`) under the user's lock, the pending
// code and the send recorded in the state before the message leaves, and a failed send voided.

extension FileStore {
    /// Plans a send to `user`'s factor `label` and, for `.send`, records the pending code and
    /// the send (one state write, under the lock) before returning: the caller sends only after
    /// this returned. A record enrolled for another account is refused like a missing one.
    public func sendCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32?, label: [UInt8], at now: Int64,
                                                   options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan {
        try planAndRecord(user: user, at: now, options: options) { (record, state) throws(MFAError) -> SendPlan in
            guard let record, record.belongs(toAccount: accountUID) else { return .refused("no text-message or email factor of that name") }
            return OutOfBand.plan(record: record, state: state, label: label, at: now, options: options, using: &generator)
        }
    }

    /// The code proving a new factor (`OutOfBand.planEnrolment`), recorded like a login's
    /// before it is sent. The record must be the account's (or not exist yet).
    public func sendEnrolmentCode<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, at now: Int64,
                                                            options: ModuleOptions, using generator: inout G) throws(MFAError) -> SendPlan {
        try factor.validateNew()
        return try planAndRecord(user: user, at: now, options: options) { (record, state) throws(MFAError) -> SendPlan in
            let record = record ?? UserRecord(uid: accountUID)
            guard record.belongs(toAccount: accountUID) else { throw .refusal(.otherAccount) }
            return OutOfBand.planEnrolment(record: record, state: state, factor: factor, at: now, options: options, using: &generator)
        }
    }

    /// Under the user's lock: `plan` on the record (nil: none) and the state; a `.send` is
    /// counted against its destination (`recordDestinationSend`, which may still refuse it:
    /// then nothing is written) and recorded (one state write) before this returns.
    func planAndRecord(user: [UInt8], at now: Int64, options: ModuleOptions,
                       _ plan: (UserRecord?, UserState) throws(MFAError) -> SendPlan) throws(MFAError) -> SendPlan {
        try withLock(user: user) { () throws(MFAError) -> SendPlan in
            let record = try read(user: user)
            defer { record?.wipeSecretsInPlace() }
            let (state, file) = try readStateForUpdate(user: user)
            let result = try plan(record, state)
            if case .send(let code, let factor, let next, _) = result {
                if let why = try recordDestinationSend(factor, at: now, options: options) {
                    wipeInPlace(code)
                    return .refused(why)
                }
                try writeStateLocked(user: user, state: next, file: file)
            }
            return result
        }
    }

    /// Checks the code typed back at an enrolment (`sendEnrolmentCode` sent it at `sentAt`)
    /// and, if it is the one, adds the factor — one step under the user's lock. A wrong code
    /// uses one of the code's attempts (void after the last) and counts as a failure like a
    /// wrong code at login, so nobody can guess their way to someone else's number.
    public func confirmEnrolment<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, sentAt: Int64,
                                                           answer: [UInt8], at now: Int64, options: ModuleOptions,
                                                           using generator: inout G) throws(MFAError) -> EnrolmentCheck {
        try factor.validateNew()
        return try withLock(user: user) { () throws(MFAError) -> EnrolmentCheck in
            let (state, file) = try readStateForUpdate(user: user)
            let binding = OutOfBand.enrolmentBinding(for: factor)
            guard let p = state.pending, p.binding == binding, p.sentAt == sentAt, p.isLive(at: now) else { return .expired }
            var next = state
            if PendingCode.matches(p, code: answer, at: now) {
                next.pending = nil
                try writeStateLocked(user: user, state: next, file: file)
                try enrollLocked(user: user, accountUID: accountUID, factor: factor, importedCodes: nil, onlyIfNone: false,
                                 using: &generator)
                return .enrolled
            }
            next = Authenticator.failed(next, at: now, options: options)
            let left = Int(p.attemptsLeft) - 1
            next.pending = left > 0 ? PendingCode(binding: p.binding, sentAt: p.sentAt, expiresAt: p.expiresAt, digits: p.digits,
                                                  attemptsLeft: UInt8(left), salt: p.salt, hash: p.hash) : nil
            try writeStateLocked(user: user, state: next, file: file)
            return .wrong(attemptsLeft: max(left, 0))
        }
    }

    /// The code sent at `sentAt` for the factor `binding` names was not delivered: it is
    /// void. Its send still counts toward the account's limits when the program ran (a sender
    /// that timed out or failed may have handed the message on: counting it keeps the limits
    /// true); `uncount` only when it never ran. Nothing happens if another code or none is pending.
    public func voidSentCode(user: [UInt8], sentAt: Int64, binding: [UInt8], uncount: Bool) throws(MFAError) {
        try withLock(user: user) { () throws(MFAError) in
            let (state, file) = try readStateForUpdate(user: user)
            guard let p = state.pending, p.sentAt == sentAt, p.binding == binding else { return }
            var next = state
            next.pending = nil
            if uncount, let i = next.sends.lastIndex(of: sentAt) { next.sends.remove(at: i) }
            try writeStateLocked(user: user, state: next, file: file)
        }
    }
}

