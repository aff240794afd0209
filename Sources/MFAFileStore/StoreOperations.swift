import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

// The operations on a user's enrolment, each one locked read → check → one commit. The rules
// (unique labels, unique secrets, never a user's own last factor, records bound to an account)
// live here, not in the callers: totp-enroll only asks and prints.

extension FileStore {
    /// The user's record and state, or nil when the user has none: no factor's secret (no
    /// caller of status needs one; the read ones are zeroed).
    /// Takes no lock (each is read atomically) and so creates no file.
    public func status(user: [UInt8]) throws(MFAError) -> UserStatus? {
        guard let read = try read(user: user) else { return nil }
        defer { read.wipeSecretsInPlace() }
        var record = read
        for i in record.factors.indices { record.factors[i] = record.factors[i].withoutSecret }
        return UserStatus(record: record, state: try readState(user: user).adopted(by: record))
    }

    /// The names of every user the store holds a record for, in byte order. Lock, state and
    /// temp files (their names start with '.', which no user name may) are not records and are
    /// left out; so is any name that cannot be a user's (FileStore.validate). Reads the
    /// directory through a duplicate of its checked descriptor; takes no lock.
    public func users() throws(MFAError) -> [[UInt8]] {
        guard let dir = clibc_opendir_at(directory.raw) else {
            throw .system(operation: "opendir store", errno: .current)
        }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while true {
            clibc_set_errno(0)
            guard let entry = readdir(dir) else {
                let e = Errno.current
                if e.rawValue != 0 { throw .system(operation: "readdir store", errno: e) }
                break
            }
            guard let cName = clibc_dirent_name(entry) else { continue }
            let n = strnlen(cName, Self.maxUserNameLength + 1)
            guard n > 0, n <= Self.maxUserNameLength else { continue }
            let name = cName.withMemoryRebound(to: UInt8.self, capacity: n) { Array(UnsafeBufferPointer(start: $0, count: n)) }
            if (try? Self.validate(user: name)) == nil { continue }
            names.append(name)
        }
        names.sort { $0.lexicographicallyPrecedes($1) }
        return names
    }

    /// The checks an enrolment will make, done before anything is shown or a code is asked
    /// for, so nobody spends a code on an enrolment that cannot be saved. `enroll` checks again
    /// under the lock.
    public func checkEnrollable(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8]?) throws(MFAError) {
        try Factor.validateNew(label: label)
        guard let record = try read(user: user) else { return }
        defer { record.wipeSecretsInPlace() }
        try Self.checkAddable(to: record, accountUID: accountUID, label: label, secret: secret)
    }

    @_optimize(size)  // cold: not on a login's path
    static func checkAddable(to record: UserRecord, accountUID: UInt32, label: [UInt8], secret: [UInt8]?) throws(MFAError) {
        guard record.belongs(toAccount: accountUID) else {
            throw .refusal(.otherAccount)
        }
        guard record.factor(labelled: label) == nil else {
            throw .refusal(.labelTaken)
        }
        guard record.factors.count < UserRecord.maxFactors else {
            throw .refusal(.tooManyFactors)
        }
        if let secret {
            // Every factor is compared, in constant time: a secret enrolled twice would make
            // each of its codes work twice.
            var duplicate = false
            for f in record.factors where constantTimeEqual(f.otpKey?.secret ?? [], secret) { duplicate = true }
            guard !duplicate else { throw .refusal(.secretTaken) }
        }
    }

    /// Adds `factor` (whose `enrolledStep` is the step of the code that proved it) in one
    /// commit: the record. `importedCodes`, if given, replace the user's recovery codes; any
    /// of them that the current set has already used are left out, so an import never makes a
    /// used code work again. Returns how many imported codes were left out.
    @discardableResult
    public func enroll<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor,
                                                 importedCodes: [[UInt8]]? = nil,
                                                 using generator: inout G) throws(MFAError) -> Int {
        try enroll(user: user, accountUID: accountUID, factor: factor, importedCodes: importedCodes, onlyIfNone: false, using: &generator)
    }

    /// Enrolment at first login (`TOTPStore.enrollAtLogin`): the code is checked against the
    /// new secret first (nothing is locked for that), then the factor is saved with that step
    /// used, only while the user has no factor, checked under the lock. The check made before
    /// the QR code was shown is not enough: a factor enrolled meanwhile (totp-enroll, another
    /// login) would otherwise get a second one from whoever holds only the password and kept
    /// the enrolment prompt open.
    @_optimize(size)  // cold: not on a login's path
    public func enrollAtLogin(user: [UInt8], accountUID: UInt32, label: [UInt8], secret: [UInt8], answer: [UInt8]?, at now: Int64,
                              options: ModuleOptions) throws(MFAError) -> FirstFactor {
        try Factor.validateNew(label: label)
        guard let answer else {  // the checks only, before anything is shown: no lock, nothing written
            return try hasFactorOrCheck(user: user, accountUID: accountUID, label: label) ? .hadFactor : .mayEnrol
        }
        let verifier = try TOTPVerifier(adjacentIntervals: options.adjacentIntervals)
        guard let step = try verifier.verify(answer: answer, key: HMACKey(algorithm: .sha1, key: secret), parameters: .default,
                                             at: now) else { return .wrongCode }
        let factor = try Factor(label: label, parameters: .default, created: now, enrolledStep: step, secret: secret)
        var generator = SystemRandomNumberGenerator()
        // 0: the user has a factor (withLock's specialisation for Int, which enroll has too).
        let saved = try withLock(user: user) { () throws(MFAError) -> Int in
            if try hasFactorOrCheck(user: user, accountUID: accountUID, label: label) { return 0 }
            return try enrollLocked(user: user, accountUID: accountUID, factor: factor, importedCodes: nil, onlyIfNone: true,
                                    using: &generator) + 1
        }
        return saved == 0 ? .hadFactor : .enrolled
    }

    /// Enrolment at first login: true if the user has a factor; else throws unless a factor
    /// `label` may be added (`checkAddable`: the record's account).
    func hasFactorOrCheck(user: [UInt8], accountUID: UInt32, label: [UInt8]) throws(MFAError) -> Bool {
        guard let existing = try read(user: user) else { return false }
        defer { existing.wipeSecretsInPlace() }
        if !existing.factors.isEmpty { return true }
        try Self.checkAddable(to: existing, accountUID: accountUID, label: label, secret: nil)
        return false
    }

    @discardableResult
    @_optimize(size)  // cold: not on a login's path
    func enroll<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, importedCodes: [[UInt8]]?,
                                          onlyIfNone: Bool, using generator: inout G) throws(MFAError) -> Int {
        try factor.validateNew()
        return try withLock(user: user) { () throws(MFAError) -> Int in
            try enrollLocked(user: user, accountUID: accountUID, factor: factor, importedCodes: importedCodes, onlyIfNone: onlyIfNone,
                             using: &generator)
        }
    }

    /// `enroll`'s work, with the user's lock held by the caller.
    @discardableResult
    @_optimize(size)  // cold: not on a login's path
    func enrollLocked<G: RandomNumberGenerator>(user: [UInt8], accountUID: UInt32, factor: Factor, importedCodes: [[UInt8]]?,
                                                onlyIfNone: Bool, using generator: inout G) throws(MFAError) -> Int {
        do {
            let existing = try read(user: user)
            defer { existing?.wipeSecretsInPlace() }  // the factors read, not the new one
            if onlyIfNone, let existing, !existing.factors.isEmpty {
                throw .refusal(.enrolledMeanwhile)
            }
            var record = existing ?? UserRecord()
            try Self.checkAddable(to: record, accountUID: accountUID, label: factor.label, secret: factor.otpKey?.secret)
            if let channel = factor.channel,
               record.factors.contains(where: { $0.kind == factor.kind && $0.destination == factor.destination }) {
                throw .refusal(channel.taken)
            }
            record.factors.append(factor)
            var leftOut = 0
            if let codes = importedCodes {
                var fresh = codes
                if let old = record.recovery {
                    let used = try readState(user: user).adopted(by: record).usedRecovery(set: old.id)
                    fresh = []
                    for code in codes {
                        if used != 0 && old.isUsed(code, used: used) { leftOut += 1 } else { fresh.append(code) }
                    }
                }
                record.recovery = fresh.isEmpty ? nil : RecoverySet.hashing(codes: fresh, using: &generator)
            }
            try commit(&record, user: user, accountUID: accountUID, using: &generator)
            return leftOut
        }
    }

    /// Removes the factor labelled `label`; returns how many are left. `mayRemoveLast` is for
    /// root only: a user can never remove their own last factor (whatever nullok any stack
    /// has, that could lock them out). Removing the last factor removes the record and state.
    public func removeFactor(user: [UInt8], accountUID: UInt32, label: [UInt8], mayRemoveLast: Bool) throws(MFAError) -> Int {
        var rng = SystemRandomNumberGenerator()
        return try withLock(user: user) { () throws(MFAError) -> Int in
            guard let read = try read(user: user), read.belongs(toAccount: accountUID) else {
                throw .refusal(.noSuchFactor)
            }
            defer { read.wipeSecretsInPlace() }
            var record = read
            var index: Int? = nil
            for i in record.factors.indices where record.factors[i].label == label { index = i }
            guard let index else { throw .refusal(.noSuchFactor) }
            guard record.factors.count > 1 || mayRemoveLast else {
                throw .refusal(.lastFactor)
            }
            record.factors.remove(at: index)
            if record.factors.isEmpty {
                try removeLocked(user: user)
            } else {
                try commit(&record, user: user, accountUID: accountUID, using: &rng)
            }
            return record.factors.count
        }
    }

    /// Stores `set` as the user's recovery codes; true if it replaced a set. The user must
    /// have a factor (recovery codes are a fallback, not a factor of their own).
    public func replaceRecovery(user: [UInt8], accountUID: UInt32, set: RecoverySet) throws(MFAError) -> Bool {
        var rng = SystemRandomNumberGenerator()
        return try withLock(user: user) { () throws(MFAError) -> Bool in
            guard let read = try read(user: user), read.belongs(toAccount: accountUID), !read.factors.isEmpty else {
                throw .refusal(.noFactorYet)
            }
            defer { read.wipeSecretsInPlace() }
            var record = read
            let replaced = record.recovery != nil
            record.recovery = set
            try commit(&record, user: user, accountUID: accountUID, using: &rng)
            return replaced
        }
    }

    /// Clears the failure count and any lockout (root). An unreadable state is rebuilt with
    /// every factor's steps up to `now` counted as used, so no earlier code replays.
    public func unlock(user: [UInt8], at now: Int64) throws(MFAError) -> UnlockResult {
        try withLock(user: user) { () throws(MFAError) -> UnlockResult in
            guard let record = try read(user: user) else { throw .refusal(.noFactor) }
            defer { record.wipeSecretsInPlace() }
            var state: UserState
            var rebuilt = false
            do throws(MFAError) {
                state = try readState(user: user).adopted(by: record)
            } catch {
                guard case .corruptRecord = error else { throw error }
                rebuilt = true
                state = UserState()
                // Every code that could have been used counts as used (FactorData.usedUpTo).
                for f in record.factors {
                    if let step = f.data.usedUpTo(whenStateIsLostAt: now) { state.setLastStep(step, of: f) }
                }
                state.failures = UserState.hardFailureCap  // reported as "was locked"
            }
            let result = UnlockResult(failures: state.failures, lockedUntil: state.lockedUntil, rebuilt: rebuilt)
            state.failures = 0
            state.lockedUntil = 0
            state.successProcess = 0
            state.recordID = record.id
            state.prune(to: record)
            if rebuilt {
                // The old file cannot be updated in place: replace it whole.
                var next = state
                next.sequence = 1
                var whole = [UInt8](repeating: 0, count: UserState.fileSize)
                next.encode(into: &whole, at: Int(next.sequence % 2) * UserState.slotSize)
                try replaceFile(Self.stateName(user), contents: whole)
            } else {
                try writeStateLocked(user: user, state: state)
            }
            return result
        }
    }

    /// Removes everything the store holds for `user`: record, state and lock file (root, when
    /// an account is deleted). The record's removal is the commit. False if there was nothing.
    public func purge(user: [UInt8]) throws(MFAError) -> Bool {
        let existed = try withLock(user: user) { () throws(MFAError) -> Bool in
            // Whether anything was there: the record, or a state file (even an unreadable one).
            let record = try read(user: user)
            record?.wipeSecretsInPlace()
            let hasRecord = record != nil
            let hasState = try openChecked(Self.stateName(user), flags: O_RDONLY, what: "state file") != nil
            let had = hasRecord || hasState
            try removeLocked(user: user)
            return had
        }
        // After the lock is released: a process waiting for it holds the old inode and finds no
        // record; one that comes later creates a fresh lock file.
        try? unlink(Self.lockName(user))  // after the commit: best effort
        return existed
    }

    /// Writes `record` bound to the account: a version-1 record gets the account's uid and a
    /// record id at its first change.
    private func commit<G: RandomNumberGenerator>(_ record: inout UserRecord, user: [UInt8], accountUID: UInt32,
                                                  using generator: inout G) throws(MFAError) {
        if record.uid == nil { record.uid = accountUID }
        while record.id == 0 { record.id = generator.next() }
        try writeLocked(user: user, record: record)
    }
}
