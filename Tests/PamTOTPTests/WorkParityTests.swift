import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Review finding 16: an unenrolled user's decoy must cost what an enrolled user's check
/// costs, and a recovery-code-shaped answer must cost the same whether or not the user has
/// recovery codes. (A name that is no account at all costs what NSS costs to say so — with
/// Debian's `passwd: files systemd` it loads libnss_systemd — and the password module in the
/// same stack pays that look-up too; it is printed, not asserted.) Measured in instructions with callgrind (deterministic for the same binary and input,
/// whatever the machine's load), through pamtester and the shipped module: not a timed test.
final class WorkParityTests: XCTestCase {
    var dir: URL!
    var store: URL!
    var services: [String] = []
    let secretB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: /etc/pam.d services")
        dir = try makeTemporaryDirectory("pam_totp_parity")
        store = dir.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
    }

    override func tearDown() {
        for s in services { unlink("/etc/pam.d/" + s) }
        if let dir { removeTemporaryDirectory(dir) }
    }

    func enrol(_ user: String) throws {
        let code = try XCTUnwrap(try runCommand(["oathtool", "--totp", "-b", secretB32]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines).nilIfEmpty)
        let r = try runCommand([enrollURL.path, "--user", user, "--store", store.path, "--name", "phone",
                                "--secret", "-", "--code", code, "--qr", "none"], input: secretB32 + "\n")
        XCTAssertEqual(r.status, 0, r.stderr)
    }

    /// Instructions of one pamtester authenticate of `user` answering `answer`.
    func instructions(_ service: String, _ user: String, _ answer: String) throws -> Int {
        let out = dir.appendingPathComponent("cg.\(services.count).\(UInt32.random(in: 0...UInt32.max))").path
        let r = try runCommand(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                "pamtester", service, user, "authenticate"], input: answer + "\n")
        XCTAssertTrue(r.stderr.contains("Authentication failure"), "\(user): \(r.stdout)\(r.stderr)")
        let line = r.stderr.split(separator: "\n").first { $0.contains("Collected :") } ?? ""
        let digits = line.split(separator: ":").last?.filter(\.isNumber) ?? ""
        return try XCTUnwrap(Int(digits), "no callgrind total in: \(r.stderr)")
    }

    func testUnknownUsersAndUsersWithoutRecoveryCodesCostTheSameWork() throws {
        // Accounts that exist (NSS resolves them): one enrolled, one with recovery codes, one
        // without a factor; and a name that is no account.
        let plain = "daemon", withCodes = "bin", unenrolled = "sys", unknown = "nosuchuser\(getpid())"
        try enrol(plain)
        try enrol(withCodes)
        let rc = try runCommand([enrollURL.path, "recovery-codes", "--user", withCodes, "--store", store.path])
        XCTAssertEqual(rc.status, 0, rc.stderr)
        let service = "pam_totp_parity_\(getpid())"
        services.append(service)
        try "auth required \(moduleURL.path) store=\(store.path)\n".write(toFile: "/etc/pam.d/" + service,
                                                                           atomically: true, encoding: .utf8)
        let floorService = service + "_floor"
        services.append(floorService)
        try "auth required pam_deny.so\n".write(toFile: "/etc/pam.d/" + floorService, atomically: true, encoding: .utf8)
        let floor = try instructions(floorService, plain, "000000")

        // A wrong 6-digit code: enrolled vs unknown (the decoy).
        let wrong = "000000" == (try runCommand(["oathtool", "--totp", "-b", secretB32]).stdout.prefix(6)) ? "111111" : "000000"
        let enrolled = try instructions(service, plain, wrong) - floor
        let decoy = try instructions(service, unenrolled, wrong) - floor
        let noAccount = try instructions(service, unknown, wrong) - floor
        // A wrong recovery-code-shaped answer: with and without recovery codes, and unknown.
        let recoveryShaped = "1234-5678-9012"
        let withSet = try instructions(service, withCodes, recoveryShaped) - floor
        let withoutSet = try instructions(service, plain, recoveryShaped) - floor
        let unknownShaped = try instructions(service, unenrolled, recoveryShaped) - floor
        print("WorkParity: above pam_deny — wrong code: enrolled \(enrolled), unenrolled \(decoy), no such account \(noAccount); "
              + "recovery-shaped: with codes \(withSet), without \(withoutSet), unenrolled \(unknownShaped)")

        let ratio = Double(max(enrolled, decoy)) / Double(max(1, min(enrolled, decoy)))
        XCTAssertLessThanOrEqual(ratio, 1.5, "decoy \(decoy) vs enrolled \(enrolled) instructions")
        // The PBKDF2 dominates these: they must be within a few percent of each other.
        for (name, n) in [("without codes", withoutSet), ("unenrolled", unknownShaped)] {
            let r = Double(max(n, withSet)) / Double(max(1, min(n, withSet)))
            XCTAssertLessThanOrEqual(r, 1.05, "recovery-shaped answer \(name): \(n) vs with codes \(withSet)")
        }
    }
}

private extension String {
    var nilIfEmpty: String? { isEmpty ? nil : self }
}
