import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The syslog lines of this features, captured (SyslogCapture, as LogHygieneTests):
/// a large clock-drift jump, an exempt user, and a first-login enrolment offer — each logged,
/// none with a secret or a code.
final class AdminLogTests: XCTestCase {
    var root: URL!
    var store: URL!
    var capture: SyslogCapture?
    var services: [String] = []
    let tag = "al" + String(String(getpid()).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(String($0))!)) })
    let secret = Array("12345678901234567890".utf8)

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs service files in /etc/pam.d and the test binds the syslog socket (run as root)")
        root = try makeTemporaryDirectory("pam_totp_adminlog")
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        capture = try SyslogCapture(scratch: root)
    }

    override func tearDown() {
        _ = capture?.stop()
        capture = nil
        for s in services { unlink("/etc/pam.d/" + s) }
        if let root { removeTemporaryDirectory(root) }
    }

    func service(_ name: String, _ arguments: String) throws -> String {
        let full = tag + "_" + name
        services.append(full)
        try "auth required \(moduleURL.path) store=\(store.path) \(arguments)\n"
            .write(toFile: "/etc/pam.d/" + full, atomically: true, encoding: .utf8)
        return full
    }

    func pamtester(_ service: String, _ user: String, _ answer: String, at t: Int64? = nil) throws -> CommandResult {
        guard let capture else { throw XCTSkip("no capture") }
        let command = (t.map { ["faketime", "@\($0)"] } ?? []) + ["pamtester", service, user, "authenticate"]
        return try runCommand(capture.wrap(command), input: answer + "\n")
    }

    func testDriftJumpExemptAndEnrolmentOfferAreLoggedWithoutSecrets() throws {
        let user = tag + "drift"
        try Store(path: Array(store.path.utf8)).write(user: Array(user.utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
        ]))
        let t: Int64 = 2_300_000_010
        let plain = try service("drift", "adjacent_intervals=5")
        let ahead = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: t + 4 * 30), as: UTF8.self)
        XCTAssertEqual(try pamtester(plain, user, ahead, at: t).status, 0)

        let conf = root.appendingPathComponent("pam_totp.conf")
        try "[service \(tag)_exempt]\nexempt\n".write(to: conf, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(conf.path, 0o644), 0)
        let exempt = try service("exempt", "config=\(conf.path)")
        XCTAssertNotEqual(try pamtester(exempt, user, "").status, 0, "PAM_IGNORE alone is no success")

        let enrol = try service("enrol", "enroll_at_login=2999-12-31")
        let offered = try pamtester(enrol, "nobody", "000000")
        XCTAssertNotEqual(offered.status, 0)
        let key = try XCTUnwrap(offered.stdout.split(separator: "\n").first { $0.hasPrefix("Key: ") }).dropFirst(5)
            .replacingOccurrences(of: " ", with: "")

        let lines = capture?.stop() ?? []
        capture = nil
        let ours = lines.filter { $0.contains(tag) || $0.contains("nobody") }
        let all = ours.joined(separator: "\n")
        XCTAssertTrue(all.contains("clock drift of user \(user), factor phone, jumped from 0 to +4 steps (check the device's clock)"), all)
        XCTAssertTrue(all.contains("user \(user) is exempt ([service \(exempt)] at \(conf.path):1): not asked for a code"), all)
        XCTAssertTrue(all.contains("offering enrolment at login to user nobody"), all)
        XCTAssertTrue(all.contains("enrolment at login for user nobody failed: the code did not verify; nothing saved"), all)
        for needle in [key, key.lowercased(), "otpauth", ahead, hex(secret), Base32.encodeString(secret)] {
            XCTAssertFalse(all.contains(needle), "a secret or code in syslog: \(needle)")
        }
    }
}
