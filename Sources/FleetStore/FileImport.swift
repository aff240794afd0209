import CLibc
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `pam-totpd import-files`: every user of a file store moved into the database, one
/// transaction per user: the factors with their secrets, each factor's last used step and
/// learned clock drift (the database's verifier goes on from it, as the host's did), the
/// recovery codes as stored (hashes, salt, iterations) with their used bits, the failure
/// count and lockout. A user already in the database is left alone and reported.
public enum FileImport {
    public struct Report {
        public var imported = 0
        public var failed = 0
        public var lines: [String] = []
    }

    public static func run(from files: Store, directory: [UInt8], to store: PostgresStore,
                           account: ([UInt8]) -> UInt32? = { name in
                               var cName = name.map { CChar(bitPattern: $0) } + [0]
                               return getpwnam(&cName).map { $0.pointee.pw_uid }
                           }) -> Report {
        var report = Report()
        for user in userNames(directory) {
            let who = String(decoding: user, as: UTF8.self)
            let record: UserRecord
            let state: UserState
            do throws(MFAError) {
                guard let r = try files.read(user: user), r.isEnrolled else { continue }
                record = r
                state = (try? files.readState(user: user).adopted(by: r)) ?? UserState()
            } catch {
                report.failed += 1
                report.lines.append("\(who): cannot read: \(error)")
                continue
            }
            guard let uid = record.uid ?? account(user) else {
                report.failed += 1
                report.lines.append("\(who): no uid in the record and no such account: skipped")
                continue
            }
            do throws(PQError) {
                try importUser(who, uid: uid, record: record, state: state, into: store)
                report.imported += 1
                report.lines.append("\(who): \(record.factors.count) factor(s)" + (record.recovery != nil ? ", recovery codes" : "")
                                    + ", \(state.failures) failure(s)")
            } catch {
                report.failed += 1
                // A factor of that name already there (the refusal labelTaken), or its row.
                let there = error.sqlState == SQLState.alreadyExists || error.sqlState.flatMap { Refusal(sqlState: $0) } == .labelTaken
                report.lines.append("\(who): " + (there ? "already in the database: left alone" : error.message))
            }
        }
        return report
    }

    static func importUser(_ user: String, uid: UInt32, record: UserRecord, state: UserState, into store: PostgresStore) throws(PQError) {
        try store.pool.with { (c) throws(PQError) in
            _ = try c.execute("BEGIN")
            do throws(PQError) {
                for f in record.factors {
                    guard let key = f.otpKey, let enrolled = f.data.usedAtEnrolment else {
                        // A phone or address, proved at its enrolment on the file host (a code sent and typed back).
                        _ = try c.call("SELECT pam_totp_api.import_destination($1, $2, $3, $4, $5, $6)", [
                            .text(user), .text(String(uid)), .text(String(decoding: f.label, as: UTF8.self)), .text("\(f.kind.name)"),
                            .text(String(decoding: f.destination ?? [], as: UTF8.self)), .text(String(f.created))])
                        continue
                    }
                    // The last used step (TOTP) or counter (HOTP; -1: none yet).
                    let last = state.lastUsedStep(of: f).map { Int64(clamping: $0) } ?? enrolled
                    _ = try c.call("SELECT pam_totp_api.enroll($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", [
                        .text(user), .text(String(uid)), .text(String(decoding: f.label, as: UTF8.self)), .text(key.parameters.algorithm.name),
                        .text(String(key.parameters.digits)), .text(String(key.parameters.period)), .text(String(f.created)),
                        .text(String(last)), .bytea(key.secret), .text("\(f.kind.name)"), PostgresStore.serial(f)])
                    // The learned clock drift, where the kind learns one (TOTP).
                    let drift = f.data.learnsDrift ? state.drift(forLabel: f.label) : 0
                    _ = try c.call("SELECT pam_totp_api.import_last_step($1, $2, $3, $4)",
                                      [.text(user), .text(String(decoding: f.label, as: UTF8.self)), .text(String(last)),
                                       .text(String(drift))])
                }
                var used: UInt32 = 0
                if let set = record.recovery {
                    _ = try c.call("SELECT pam_totp_api.replace_recovery($1, $2, $3, $4, $5, $6, $7)",
                                      [.text(user), .text(String(uid))] + store.recoveryParameters(set) + [.null])
                    used = state.usedRecovery(set: set.id)
                }
                _ = try c.call("SELECT pam_totp_api.import_state($1, $2, $3, $4)",
                                  [.text(user), .text(String(state.failures)), .text(String(state.lockedUntil)), .text(String(used))])
                _ = try c.execute("COMMIT")
            } catch {
                _ = try? c.execute("ROLLBACK")
                throw error
            }
        }
    }

    /// The record files of a store directory: every entry that is a valid user name (state,
    /// lock and temporary files start with a dot).
    static func userNames(_ path: [UInt8]) -> [[UInt8]] {
        var cPath = path.map { CChar(bitPattern: $0) } + [0]
        guard let dir = opendir(&cPath) else { return [] }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if (try? Store.validate(user: name)) != nil { names.append(name) }
        }
        return names.sorted { $0.lexicographicallyPrecedes($1) }
    }
}
