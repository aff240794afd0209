import Foundation
import TestSupport
import XCTest

/// pam-totpd links no database client: libpq is loaded only in fleet mode (CLibPQ, dlopen), so a
/// host without fleet mode needs neither libpq nor the TLS, Kerberos and LDAP libraries it pulls
/// in (a new admin's trial: the package's libpq5 dependency brought them onto every host). Here
/// libpq is hidden in a private mount namespace (/dev/null bound over it), as on a host without
/// it: files mode starts and answers, fleet mode says what to install. The package side (no
/// libpq5 in pam-totp's Depends, pam-totp-fleet bringing it) is checked by make deb-test.
final class LibpqAtRunTimeTests: XCTestCase {
    var root: URL!

    override func setUpWithError() throws {
        guard FileManager.default.isExecutableFile(atPath: daemonURL.path) else { throw XCTSkip("pam-totpd not built") }
        root = try makeTemporaryDirectory("pamtotp-libpq")
    }

    override func tearDown() {
        if let root { removeTemporaryDirectory(root) }
    }

    /// Where the system's libpq.so.5 is (ldconfig's cache).
    func libpqPath() throws -> String {
        let r = try runCommand(["ldconfig", "-p"])
        let line = try XCTUnwrap(r.stdout.split(separator: "\n").first { $0.contains("libpq.so.5 ") }, "libpq5 not installed")
        return try XCTUnwrap(line.components(separatedBy: "=> ").last).trimmingCharacters(in: .whitespaces)
    }

    /// Runs pam-totpd with libpq hidden; `afterStart` (a shell fragment) runs once the socket is
    /// there, then the daemon is stopped.
    func withoutLibpq(_ config: String, socket: String) throws -> CommandResult {
        try runCommand(["unshare", "-m", "sh", "-c", """
            mount --bind /dev/null "$0" || exit 97
            "$1" --config "$2" --socket "$3" & pid=$!
            for i in $(seq 100); do [ -S "$3" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
            if [ -S "$3" ]; then echo SOCKET-UP; kill $pid; fi
            wait $pid
            """, try libpqPath(), daemonURL.path, config, socket])
    }

    func testNoLibpqInTheBinaryAndOnlyFleetModeNeedsIt() throws {
        let needed = try runCommand(["readelf", "-d", daemonURL.path])
        XCTAssertEqual(needed.status, 0, needed.stderr)
        XCTAssertTrue(needed.stdout.contains("NEEDED"), needed.stdout)
        for lib in ["libpq", "libssl", "libcrypto", "krb5", "ldap"] {
            XCTAssertFalse(needed.stdout.contains(lib), "pam-totpd links \(lib): \(needed.stdout)")
        }

        let store = root.appendingPathComponent("store").path
        XCTAssertEqual(mkdir(store, 0o700), 0)
        let files = root.appendingPathComponent("files.conf").path
        try "store = \(store)\n".write(toFile: files, atomically: true, encoding: .utf8)
        let filesRun = try withoutLibpq(files, socket: root.appendingPathComponent("files.socket").path)
        XCTAssertNotEqual(filesRun.status, 97, "could not hide libpq: \(filesRun.stderr)")
        XCTAssertTrue(filesRun.stdout.contains("SOCKET-UP"), "files mode needs no libpq: \(filesRun.stdout) \(filesRun.stderr)")

        let fleet = root.appendingPathComponent("fleet.conf").path
        try "backend = postgresql\npostgresql = host=/nonexistent dbname=pam_totp\n".write(toFile: fleet, atomically: true, encoding: .utf8)
        let fleetRun = try withoutLibpq(fleet, socket: root.appendingPathComponent("fleet.socket").path)
        XCTAssertFalse(fleetRun.stdout.contains("SOCKET-UP"), fleetRun.stdout)
        XCTAssertNotEqual(fleetRun.status, 0)
        XCTAssertTrue(fleetRun.stderr.contains("fleet mode needs libpq") && fleetRun.stderr.contains("apt install pam-totp-fleet"),
                      fleetRun.stderr)
        // init-database says the same, and nothing else is tried.
        let initRun = try runCommand(["unshare", "-m", "sh", "-c", "mount --bind /dev/null \"$0\" && exec \"$1\" init-database --admin 'host=/nonexistent dbname=x'",
                                      try libpqPath(), daemonURL.path])
        XCTAssertNotEqual(initRun.status, 0)
        XCTAssertTrue(initRun.stderr.contains("apt install pam-totp-fleet"), initRun.stderr)
    }
}
