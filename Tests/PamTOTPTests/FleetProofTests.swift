import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// A host changes an enrolled user's factors or recovery codes only after that user proved
/// themselves through it (migration 008, docs/ARCHITECTURE.md, section 8). Before, any host role could
/// add a factor or recovery codes of its own for every enrolled user and then log in as them on
/// every host without reading a secret. Real PostgreSQL, each host as its own login role.
final class FleetProofTests: XCTestCase {
    var cluster: PostgresCluster!
    let db = "fleet"
    let phone = Array("proofphonesecret1234".utf8)
    let attacker = Array("attackersecret123456".utf8)

    override func setUpWithError() throws {
        cluster = try startFleetCluster(database: db)
        try sql("UPDATE pam_totp.settings SET max_window = 2, max_failures = 100, min_lockout = 0")
        for (role, group) in [("proof_host_a", "pam_totp_host"), ("proof_host_b", "pam_totp_host"), ("proof_admin", "pam_totp_admin")] {
            try sql("CREATE ROLE \(role) LOGIN; GRANT \(group) TO \(role)")
        }
    }

    override func tearDown() {
        cluster?.stop()
        cluster = nil
    }

    @discardableResult
    func sql(_ q: String) throws -> String { try cluster.psql(q, database: db) }

    func store(_ role: String) -> PostgresStore { PostgresStore(pool: ConnectionPool(conninfo: cluster.conninfo(user: role, database: db))) }

    func factor(_ label: String, _ secret: [UInt8]) throws -> Factor {
        let now = Int64(time(nil))
        return try Factor(label: Array(label.utf8), parameters: .default, created: now, enrolledStep: UInt64(now / 30), secret: secret)
    }

    let alice = Array("alice".utf8)
    func login(_ s: PostgresStore, _ answer: [UInt8]) -> AuthOutcome {
        var o = ModuleOptions()
        o.adjacentIntervals = 2
        o.maxFailures = 100
        o.lockoutSeconds = 0
        return s.login(user: alice, account: { () throws(MFAError) -> Account? in Account(name: self.alice, uid: 2001) },
                       answer: answer, at: Int64(time(nil)), options: o, process: 1)
    }

    func isProofRefusal(_ error: Error) -> Bool {
        if case .refused(.proofNeeded, _) = error as? MFAError { return true }
        return false
    }

    func testAHostChangesAnEnrolledUsersFactorsOnlyAfterTheirCode() throws {
        let a = store("proof_host_a"), b = store("proof_host_b"), admin = store("proof_admin")
        var rng = SystemRandomNumberGenerator()
        awayFromStepBoundary(margin: 4)
        // Host A enrols alice's first factor: no proof exists yet (trust on first use), and the
        // enrolment itself lets A finish it (recovery codes).
        try a.enroll(user: alice, accountUID: 2001, factor: try factor("phone", phone), importedCodes: nil, using: &rng)
        let (_, set) = RecoverySet.generate(count: 10, iterations: 1_000, using: &rng)
        XCTAssertFalse(try a.replaceRecovery(user: alice, accountUID: 2001, set: set))

        // Host B, compromised, has never seen alice prove anything: it cannot add its own
        // factor, replace her recovery codes with its own, or remove her factor.
        let (attackerCodes, attackerSet) = RecoverySet.generate(count: 10, iterations: 1_000, using: &rng)
        XCTAssertThrowsError(try b.enroll(user: alice, accountUID: 2001, factor: try factor("evil", attacker), importedCodes: nil, using: &rng)) {
            XCTAssertTrue(self.isProofRefusal($0), "\($0)")
        }
        XCTAssertThrowsError(try b.enroll(user: alice, accountUID: 2001, factor: try factor("evil", attacker), importedCodes: attackerCodes, using: &rng)) {
            XCTAssertTrue(self.isProofRefusal($0), "\($0)")
        }
        XCTAssertThrowsError(try b.replaceRecovery(user: alice, accountUID: 2001, set: attackerSet)) { XCTAssertTrue(self.isProofRefusal($0), "\($0)") }
        XCTAssertThrowsError(try b.removeFactor(user: alice, accountUID: 2001, label: Array("phone".utf8), mayRemoveLast: true)) {
            XCTAssertTrue(self.isProofRefusal($0), "\($0)")
        }
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors"), "phone")
        guard case .wrongCode = login(b, attackerCodes[0]) else { return XCTFail("the attacker's recovery code must not log in") }

        // After alice logs in through B with her code, B may change her enrolment (for 10 minutes).
        guard case .success = login(b, try currentCode(phone, offsetSteps: 1)) else { return XCTFail("alice logs in on B") }
        try b.enroll(user: alice, accountUID: 2001, factor: try factor("tablet", attacker), importedCodes: nil, using: &rng)
        XCTAssertEqual(try sql("SELECT string_agg(label, ',' ORDER BY id) FROM pam_totp.factors"), "phone,tablet")
        // ...and once that proof has expired, no more.
        try sql("UPDATE pam_totp.users SET proof_until = 0")
        XCTAssertThrowsError(try b.removeFactor(user: alice, accountUID: 2001, label: Array("tablet".utf8), mayRemoveLast: false)) {
            XCTAssertTrue(self.isProofRefusal($0), "\($0)")
        }
        XCTAssertThrowsError(try a.removeFactor(user: alice, accountUID: 2001, label: Array("tablet".utf8), mayRemoveLast: false),
                             "A's enrolment proof has expired too")
        // A proof through A does not let B act.
        guard case .success = login(a, try currentCode(phone, offsetSteps: 2)) else { return XCTFail("alice logs in on A") }
        XCTAssertThrowsError(try b.replaceRecovery(user: alice, accountUID: 2001, set: attackerSet))
        XCTAssertEqual(try a.removeFactor(user: alice, accountUID: 2001, label: Array("tablet".utf8), mayRemoveLast: false), 1)
        // A wrong code is no proof.
        try sql("UPDATE pam_totp.users SET proof_until = 0")
        guard case .wrongCode = login(b, Array("000000".utf8)) else { return XCTFail("wrong code") }
        XCTAssertThrowsError(try b.replaceRecovery(user: alice, accountUID: 2001, set: attackerSet))
        // The admin role needs no proof.
        try admin.enroll(user: alice, accountUID: 2001, factor: try factor("spare", attacker), importedCodes: nil, using: &rng)
        XCTAssertEqual(try admin.removeFactor(user: alice, accountUID: 2001, label: Array("spare".utf8), mayRemoveLast: false), 1)
        // The helpers behind the entry points are for their owner only.
        for call in ["SELECT pam_totp_api.lock_for_change('alice')",
                     "SELECT pam_totp_api.require_proof('alice')",
                     "SELECT * FROM pam_totp_api.judge('alice', '000000', NULL, 0, 1, 10, 100, false)",
                     "SELECT pam_totp_api.login_begin_at('alice', 2001, '000000', 0, 1, 10, 300, false)"] {
            XCTAssertThrowsError(try cluster.psql(call, user: "proof_host_b", database: db), call) {
                XCTAssertTrue("\($0)".contains("permission denied"), "\(call): \($0)")
            }
        }
        XCTAssertEqual(try sql("SELECT string_agg(label, ',') FROM pam_totp.factors"), "phone")
    }
    /// A nondeterministic collation of the host's own (pg_temp, TEMP is PUBLIC's by default)
    /// made every name comparison inside the SECURITY DEFINER bodies case-insensitive: host B
    /// enrolled a first factor for 'ALICE' (no proof needed, and the enrolment recorded B's
    /// proof), then passed 'alice' COLLATE pg_temp.ci and require_proof found ALICE's proof. Its
    /// factor and recovery codes went to alice (migration 008 refuses such a call).
    func testAHostsOwnCollationDoesNotLendAnotherNamesProof() throws {
        let a = store("proof_host_a")
        var rng = SystemRandomNumberGenerator()
        awayFromStepBoundary(margin: 4)
        try a.enroll(user: alice, accountUID: 2001, factor: try factor("phone", phone), importedCodes: nil, using: &rng)
        try sql("UPDATE pam_totp.users SET proof_until = 0")
        let ci = "CREATE COLLATION pg_temp.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false); "
        // B's own first factor for a name that differs from alice's only in case: allowed (trust on first use).
        try cluster.psql("SELECT pam_totp_api.enroll('ALICE', 2001, 'x', 'sha1', 6, 30, 0, 0, '\\x6174746163b6b572736563726574313233343536')",
                         user: "proof_host_b", database: db)
        let evil = "'\\x617474616365727365637265743132333435ff'"
        for call in ["SELECT pam_totp_api.enroll('alice' COLLATE pg_temp.ci, 2001, 'evil', 'sha1', 6, 30, 0, 0, \(evil))",
                     "SELECT pam_totp_api.enroll('alice', 2001, 'evil' COLLATE pg_temp.ci, 'sha1', 6, 30, 0, 0, \(evil))",
                     "SELECT pam_totp_api.replace_recovery('alice' COLLATE pg_temp.ci, 2001, 1, 1000, '\\x0000000000000000'::bytea, ARRAY['\\x00'::bytea], NULL)",
                     "SELECT pam_totp_api.remove_factor('alice' COLLATE pg_temp.ci, 2001, 'phone', true)",
                     "CALL pam_totp_api.login('alice' COLLATE pg_temp.ci, 2001, '000000', 1, 10, 300, false)"] {
            XCTAssertThrowsError(try cluster.psql(ci + call, user: "proof_host_b", database: db), call) {
                XCTAssertTrue("\($0)".contains(Refusal.bytewiseNames.sqlState + ":"), "\(call): \($0)")
            }
        }
        XCTAssertEqual(try sql("SELECT string_agg(user_name || '/' || label, ',' ORDER BY id) FROM pam_totp.factors"), "alice/phone,ALICE/x")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.recovery"), "0")
        XCTAssertEqual(try sql("SELECT proof_until || ':' || failures FROM pam_totp.users WHERE name = 'alice'"), "0:0")
        // A deterministic collation other than the default still compares byte for byte: allowed.
        XCTAssertThrowsError(try cluster.psql("SELECT pam_totp_api.enroll('alice' COLLATE \"C\", 2001, 'evil', 'sha1', 6, 30, 0, 0, \(evil))",
                                              user: "proof_host_b", database: db)) {
            XCTAssertTrue("\($0)".contains(Refusal.proofNeeded.sqlState + ":"), "\($0)")
        }
        guard case .success = login(a, try currentCode(phone, offsetSteps: 1)) else { return XCTFail("alice logs in on A") }
    }
    /// A role a DBA granted an API function directly (not through pam_totp_host) keeps no
    /// access once init-database runs again: the API is re-created whole from sql/api.sql, and
    /// reaches login roles only through the two group roles.
    func testADirectGrantDoesNotSurviveInitDatabase() throws {
        try cluster.psql("CREATE DATABASE upgraded")
        let conninfo = cluster.conninfo(database: "upgraded")
        _ = try Migrator.migrate(conninfo: conninfo)
        try cluster.psql("""
            CREATE ROLE proof_direct LOGIN;
            GRANT USAGE ON SCHEMA pam_totp_api TO proof_direct;
            GRANT EXECUTE ON FUNCTION pam_totp_api.enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea, text, text, text),
                                      pam_totp_api.replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[], text),
                                      pam_totp_api.remove_factor(text, bigint, text, boolean, text),
                                      pam_totp_api.lock_for_change(text) TO proof_direct
            """, database: "upgraded")
        XCTAssertEqual(try cluster.psql("SELECT has_function_privilege('proof_direct', 'pam_totp_api.lock_for_change(text)', 'EXECUTE')",
                                        database: "upgraded"), "t")
        _ = try Migrator.migrate(conninfo: conninfo)
        XCTAssertEqual(try cluster.psql("""
            SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname LIKE 'pam_totp%' AND has_function_privilege('proof_direct', p.oid, 'EXECUTE')
            """, database: "upgraded"), "0")
        XCTAssertThrowsError(try cluster.psql("SELECT pam_totp_api.lock_for_change('alice')",
                                              user: "proof_direct", database: "upgraded")) {
            XCTAssertTrue("\($0)".contains("permission denied"), "\($0)")
        }
        try cluster.psql("DROP DATABASE upgraded")
    }
}
