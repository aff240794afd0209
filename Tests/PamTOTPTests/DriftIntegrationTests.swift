import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Clock drift out of process: pamtester through a service in /etc/pam.d, the host's clock set
/// with faketime, a "device" whose clock runs ahead of it. The drift is learned from accepted
/// codes, kept in the state file across processes, followed, and bounded.
final class DriftIntegrationTests: XCTestCase {
    var root: URL!
    var store: URL!
    var service = ""
    let secret = Array("12345678901234567890".utf8)
    let t: Int64 = 2_200_000_010  // 10 s into a step

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d")
        root = try makeTemporaryDirectory("pam_totp_drift")
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        service = "pam_totp_drift_\(getpid())"
        try "auth required \(moduleURL.path) store=\(store.path) adjacent_intervals=5\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        for user in ["drifter", "steady"] {
            try Store(path: Array(store.path.utf8)).write(user: Array(user.utf8), record: UserRecord(factors: [
                try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
            ]))
        }
    }

    override func tearDown() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        if let root { removeTemporaryDirectory(root) }
    }

    /// pamtester at host time `host`, answering the code of a device `ahead` steps in front.
    func login(_ user: String, host: Int64, ahead: Int64) throws -> Int32 {
        let code = String(decoding: try TOTP.code(secret: secret, parameters: .default, at: host + ahead * 30), as: UTF8.self)
        return try runCommand(["faketime", "@\(host)", "pamtester", service, user, "authenticate"], input: code + "\n").status
    }

    func drift(_ user: String) throws -> Int64 {
        try Store(path: Array(store.path.utf8)).readState(user: Array(user.utf8)).drift(forLabel: Array("phone".utf8))
    }

    func testDriftIsLearnedFollowedAndBounded() throws {
        XCTAssertEqual(try login("drifter", host: t, ahead: 3), 0)
        XCTAssertEqual(try drift("drifter"), 3)
        // Seven ahead: outside ±5 of the host, inside ±5 of the learned +3; learned, bounded to +5.
        XCTAssertEqual(try login("drifter", host: t + 600, ahead: 7), 0)
        XCTAssertEqual(try drift("drifter"), 5)
        // The same device offset for a user whose drift was never learned: outside the window.
        XCTAssertNotEqual(try login("steady", host: t + 600, ahead: 7), 0)
        XCTAssertEqual(try drift("steady"), 0)
        // Never more than 2N steps from the host's clock: +11 is refused, +10 accepted.
        XCTAssertNotEqual(try login("drifter", host: t + 1200, ahead: 11), 0)
        XCTAssertEqual(try login("drifter", host: t + 1200, ahead: 10), 0)
        XCTAssertEqual(try drift("drifter"), 5)
        // The window is still 2N+1 steps: centred on +5, one step behind the host is out.
        XCTAssertNotEqual(try login("drifter", host: t + 1800, ahead: -1), 0)
    }
}
