import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

/// An enrolled user as `lookup` found them.
public final class EnrolledUser<Sys: SystemCalls> {
    let store: FileStore<Sys>
    /// The name the record is stored under (the account's canonical name when the name given
    /// to PAM was another spelling of it).
    let name: [UInt8]
    let record: UserRecord
    /// The account's uid, when it was looked up (records bound to a uid).
    let accountUID: UInt32?
    let file: OwnedFD<Sys>
    let identity: FileIdentity

    init(store: FileStore<Sys>, name: [UInt8], record: UserRecord, accountUID: UInt32?, file: OwnedFD<Sys>, identity: FileIdentity) {
        (self.store, self.name, self.record) = (store, name, record)
        (self.accountUID, self.file, self.identity) = (accountUID, file, identity)
    }

    /// The decoded secrets are zeroed before their buffers are freed (a login, right code or
    /// wrong, left one freed block holding the secret: found by review with a free() scanner).
    deinit { record.wipeSecretsInPlace() }
}

extension Authenticator {
    /// Before the prompt: is `user` enrolled? `account` looks the name up in NSS (nil: no such
    /// account; it throws when the look-up itself fails, which denies): a record enrolled for
    /// another uid is not this account's, and a name that NSS maps to another canonical name
    /// (case-insensitive directories, aliases) is looked up under that name too, so that no
    /// spelling of an enrolled account's name is "unenrolled". No lock is taken, so guessing
    /// names creates no files.
    public static func lookup(user: [UInt8], options: ModuleOptions,
                              account: () throws(MFAError) -> Account?) -> Login<Store> {
        var name = user
        do throws(MFAError) {
            try Store.validate(user: user)
        } catch {
            // A spelling that cannot be a record (a space, a non-ASCII byte) may still be one
            // NSS resolves to an enrolled account (an LDAP directory ignores insignificant
            // spaces and case): that account's record decides, never "unenrolled" (nullok).
            do throws(MFAError) {
                guard let found = try account(), (try? Store.validate(user: found.name)) != nil else {
                    return Login(store: nil, enrollment: .unenrolled)  // no record can be this account's
                }
                name = found.name
            } catch {
                return Login(store: nil, enrollment: .failed(error))
            }
        }
        do throws(MFAError) {
            let store = try Store(path: options.store)
            return Login(store: store, enrollment: try store.lookup(user: name, account: account))
        } catch {
            return Login(store: nil, enrollment: .failed(error))
        }
    }
}

extension FileStore: TOTPStore {
    public typealias Enrolled = EnrolledUser<Sys>

    /// Before the prompt (see `Authenticator.lookup`).
    public func lookup(user: [UInt8], account: () throws(MFAError) -> Account?) throws(MFAError) -> Enrollment<FileStore<Sys>> {
        var name = user
        var found = try readWithIdentity(user: user)
        var resolved: Account? = nil
        var lookedUp = false
        if found == nil {
            // Another spelling of an enrolled account's name?
            resolved = try account()
            lookedUp = true
            if let canonical = resolved?.name, canonical != user, (try? Self.validate(user: canonical)) != nil {
                found = try readWithIdentity(user: canonical)
                name = canonical
            }
        }
        guard let (record, file, identity) = found, record.isEnrolled else {
            found?.record.wipeSecretsInPlace()
            return .unenrolled
        }
        if record.uid != nil && !lookedUp {
            do throws(MFAError) { resolved = try account() } catch { record.wipeSecretsInPlace(); throw error }
        }
        let uid = resolved?.uid
        guard record.belongs(toAccount: uid) else {
            record.wipeSecretsInPlace()
            return .otherAccount(recordUID: record.uid ?? 0)
        }
        return .enrolled(EnrolledUser(store: self, name: name, record: record, accountUID: uid, file: file, identity: identity))
    }


    /// The record's hints; for a user whose only allowed factors are sent codes, also whether
    /// one is live (the state, read without the lock: a one-prompt stack's question, pam_totp's
    /// `after_password`). An unreadable state reads as none: the login then sends nothing
    /// before the password was checked, and the check after it fails by itself.
    public func hints(_ enrolled: EnrolledUser<Sys>, kinds: UInt8) -> FactorHints {
        var h = enrolled.record.hints(kinds: kinds)
        if !h.device && !h.sent.isEmpty, let state = try? readState(user: enrolled.name) {
            if enrolled.record.hasLiveCode(state, kinds: kinds, at: Int64(time(nil))) { h.addPending(digits: Int(state.pending?.digits ?? 6)) }
        }
        return h
    }

    /// Verifies `answer` and records the outcome as one step under the user's lock: the record
    /// (re-read only if it was replaced since `lookup`), the state, the policy, one state write.
    /// If that write fails, the outcome is `notRecorded`, whatever the answer was.
    public func authenticate(answer: [UInt8], previous: [UInt8]?, at unixTime: Int64,
                             options: ModuleOptions, process: UInt32, enrolled: EnrolledUser<Sys>) -> AuthOutcome {
        let user = enrolled.name
        do throws(MFAError) {
            let verifier = try TOTPVerifier(adjacentIntervals: options.adjacentIntervals)
            return try withLock(user: user) { () throws(MFAError) -> AuthOutcome in
                var record = enrolled.record
                var reread = false
                defer { if reread { record.wipeSecretsInPlace() } }
                if !isCurrent(user, identity: enrolled.identity) {
                    guard let now = try read(user: user), now.isEnrolled,
                          now.uid == nil || now.uid == enrolled.accountUID else {
                        Self.decoy(answer, at: unixTime, options: options)
                        return .unenrolled
                    }
                    record = now
                    reread = true
                }
                let (state, file) = try readStateForUpdate(user: user)
                // An attempt that costs a PBKDF2 is durable, as a failure, before that work.
                var base = state
                if Authenticator.isCostly(answer, options: options),
                   let pending = Authenticator.pendingFailure(record: record, state: state, at: unixTime, options: options) {
                    do throws(MFAError) { try writeStateLocked(user: user, state: pending, file: file) } catch { return .notRecorded(error) }
                    base.sequence = state.sequence &+ 1  // the verdict goes to the other slot
                }
                let decision = try Authenticator.decide(record: record, state: state, answer: answer, at: unixTime,
                                                        previous: previous, verifier: verifier, options: options,
                                                        process: process)
                if var next = decision.state {
                    next.sequence = base.sequence
                    do throws(MFAError) { try writeStateLocked(user: user, state: next, file: file) } catch { return .notRecorded(error) }
                }
                return decision.outcome
            }
        } catch {
            return .failed(error)
        }
    }

    /// The work of an enrolled user's check without a user (`TOTPStore.decoy`): a record
    /// parsed from text, the policy over it (one SHA-1 factor, and a PBKDF2 for a
    /// recovery-code-shaped answer), the state slot built. For unknown, unenrolled and vanished
    /// users, so they are not told apart from enrolled ones by timing (docs/ARCHITECTURE.md,
    /// section 4.2).
    public static func decoy(_ answer: [UInt8], at unixTime: Int64, options: ModuleOptions) {
        var text: [UInt8] = []
        text.append(literal: "pam_totp 2\naccount 0 0000000000000000\n")
        text.append(literal: "factor decoy sha1 6 30 0 0 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n")
        guard let record = try? UserRecord.parse(text), let verifier = try? TOTPVerifier(adjacentIntervals: options.adjacentIntervals),
              let decision = try? Authenticator.decide(record: record, state: UserState(), answer: answer, at: unixTime,
                                         verifier: verifier, options: options) else { return }
        var slot = (decision.state ?? UserState()).slotBytes()
        wipe(&slot)
    }
}
