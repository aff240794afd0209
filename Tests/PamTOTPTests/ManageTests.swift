import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// totp-enroll list / recovery-codes / remove, as root on a private store, with the effects
/// checked through the real module (pam_start_confdir).
final class ManageTests: XCTestCase {
    var fixture: PAMFixture!
    let secretB32 = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
    var secret: [UInt8] = []

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "--user and --store are root-only")
        fixture = try PAMFixture()
        try fixture.service("totp", ["auth required MODULE STORE max_failures=50"])
        secret = try Base32.decode(Array(secretB32.utf8))
    }

    override func tearDown() { fixture?.cleanup() }

    func tool(_ args: [String], input: String = "") throws -> CommandResult {
        try runCommand([enrollURL.path] + args + ["--store", fixture.store.path], input: input)
    }

    /// Enrols `label` with `key` (Base32; the fixture's secret by default: a secret can be
    /// enrolled only once per user).
    func enrol(_ label: String, key: String? = nil) throws {
        awayFromStepBoundary()
        let b32 = key ?? secretB32
        let code = String(decoding: try currentCode(try Base32.decode(Array(b32.utf8))), as: UTF8.self)
        let r = try tool(["enroll", "--user", "nobody", "--name", label, "--secret", b32, "--code", code, "--qr", "none"])
        XCTAssertEqual(r.status, 0, r.stderr)
    }

    func auth(_ answer: [UInt8]) -> Int32 {
        fixture.authenticate(service: "totp", user: "nobody", conversation: Conversation(answer: answer))
    }

    func testListShowsFactorsButNeverTheSecret() throws {
        let empty = try tool(["list", "--user", "nobody"])
        XCTAssertEqual(empty.status, 0, empty.stderr)
        XCTAssertTrue(empty.stdout.contains("no factors"), empty.stdout)
        try enrol("phone")
        let r = try tool(["list", "--user", "nobody"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = r.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        XCTAssertEqual(lines.first, ["LABEL", "ALGORITHM", "DIGITS", "PERIOD", "CREATED", "LAST", "USED"])
        let phone = try XCTUnwrap(lines.first { $0.first == "phone" })
        XCTAssertEqual(Array(phone[1...3]), ["SHA1", "6", "30s"])
        XCTAssertTrue(phone.contains("UTC"))
        XCTAssertFalse(phone.contains("never"), "the enrolment code's step counts as the last use")
        XCTAssertTrue(r.stdout.contains("Recovery codes: none"), r.stdout)
        for needle in [secretB32, secretB32.lowercased(), hex(secret)] { XCTAssertFalse(r.stdout.contains(needle)) }
    }

    func testRecoveryCodesWorkOnceAndRegeneratingInvalidatesTheOldSet() throws {
        let none = try tool(["recovery-codes", "--user", "nobody"])
        XCTAssertNotEqual(none.status, 0, "no factor yet")
        XCTAssertTrue(none.stderr.contains("enrol one first"), none.stderr)
        try enrol("phone")
        let r1 = try tool(["recovery-codes", "--user", "nobody"])
        XCTAssertEqual(r1.status, 0, r1.stderr)
        let codes1 = r1.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
        XCTAssertEqual(codes1.count, 10)
        XCTAssertEqual(Set(codes1).count, 10)
        // Only hashes are stored.
        let stored = try String(contentsOf: fixture.store.appendingPathComponent("nobody"), encoding: .utf8)
        for c in codes1 { XCTAssertFalse(stored.contains(c.replacingOccurrences(of: "-", with: ""))) }
        XCTAssertEqual(stored.components(separatedBy: "recovery-code ").count - 1, 10)
        // Each works once at the PAM prompt (as typed, with dashes, or without).
        XCTAssertEqual(auth(Array(codes1[0].utf8)), PAM_SUCCESS)
        XCTAssertEqual(auth(Array(codes1[0].utf8)), PAM_AUTH_ERR)
        XCTAssertEqual(auth(Array(codes1[1].replacingOccurrences(of: "-", with: "").utf8)), PAM_SUCCESS)
        XCTAssertTrue(try tool(["list", "--user", "nobody"]).stdout.contains("Recovery codes: 8 of 10 unused"))
        // Regenerating replaces the set; TOTP keeps working with the same secret.
        let r2 = try tool(["recovery-codes", "--user", "nobody"])
        XCTAssertEqual(r2.status, 0, r2.stderr)
        XCTAssertTrue(r2.stdout.contains("previous codes no longer work"), r2.stdout)
        let codes2 = r2.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
        XCTAssertEqual(auth(Array(codes1[2].utf8)), PAM_AUTH_ERR, "old set is gone")
        XCTAssertEqual(auth(Array(codes2[2].utf8)), PAM_SUCCESS)
        XCTAssertEqual(auth(try currentCode(secret, offsetSteps: 1)), PAM_SUCCESS, "the TOTP factor is untouched")
    }

    func testRemove() throws {
        try enrol("phone")
        try enrol("tablet", key: "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ")
        let missing = try tool(["remove", "laptop", "--user", "nobody"])
        XCTAssertNotEqual(missing.status, 0)
        XCTAssertTrue(missing.stderr.contains("no factor named \"laptop\""), missing.stderr)
        let r = try tool(["remove", "tablet", "--user", "nobody"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.contains("1 factor left"), r.stdout)
        let rec = try XCTUnwrap(try Store(path: Array(fixture.store.path.utf8)).read(user: Array("nobody".utf8)))
        XCTAssertEqual(rec.factors.map(\.label), [Array("phone".utf8)])
        // Root may remove the last one: the user is then unenrolled.
        XCTAssertEqual(try tool(["remove", "phone", "--user", "nobody"]).status, 0)
        XCTAssertNil(try Store(path: Array(fixture.store.path.utf8)).read(user: Array("nobody".utf8)))
        XCTAssertEqual(auth(try currentCode(secret, offsetSteps: 1)), PAM_AUTH_ERR)
    }
}
