import Foundation
import MFACore
import TestSupport
import XCTest

/// totp-enroll on a host in fleet mode (README "Fleet"): it does not reach the database yet,
/// so it must refuse rather than write local files that no login reads; `--config` is root only.
final class FleetEnrollGuardTests: XCTestCase {
    func testFleetModeRefusesLocalEnrolmentAndConfigIsRootOnly() throws {
        guard FileManager.default.isExecutableFile(atPath: enrollURL.path) else { throw XCTSkip("totp-enroll not built") }
        let root = try makeTemporaryDirectory("pamtotp-fleet-enroll")
        defer { removeTemporaryDirectory(root) }
        XCTAssertEqual(chmod(root.path, 0o755), 0)
        let store = root.appendingPathComponent("store").path
        let config = root.appendingPathComponent("pam_totp.conf").path
        try "backend = postgresql\npostgresql = host=/nonexistent dbname=x\nstore = \(store)\n".write(toFile: config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(config, 0o644), 0)
        for args in [["list", "--user", "root"], ["enroll", "--user", "root", "--secret", "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ", "--code", "000000"],
                     ["remove", "phone", "--user", "root"], ["unlock", "--user", "root"]] {
            let r = try runCommand([enrollURL.path] + args + ["--config", config])
            XCTAssertNotEqual(r.status, 0, args.joined(separator: " "))
            XCTAssertTrue(r.stderr.contains("fleet mode"), "\(args): \(r.stderr)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: store), "nothing was written locally")
        // An explicit --store still works (root moving files before import-files).
        XCTAssertEqual(mkdir(store, 0o700), 0)
        let explicit = try runCommand([enrollURL.path, "list", "--user", "root", "--store", store, "--config", config])
        XCTAssertFalse(explicit.stderr.contains("fleet mode"), explicit.stderr)
        // Not root: --config is refused before anything is read.
        let asNobody = try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                                       enrollURL.path, "list", "--config", config])
        XCTAssertNotEqual(asNobody.status, 0)
        XCTAssertTrue(asNobody.stderr.contains("root only"), asNobody.stderr)
    }
}
