import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// A new admin's trial: in fleet mode a database password in the configuration file made it
/// root-only (0600, as pam-totpd requires), the module running as the user (a screen locker,
/// pamtester under setpriv) could not read it, and the user got "Error in service module" with
/// no prompt and no clear reason. The module never needs the credentials: `postgresql_file =`
/// names a root-only file only pam-totpd reads, the configuration stays readable by all, and a
/// configuration the module cannot read is one clear log line.
final class FleetCredentialsTests: XCTestCase {
    var cluster: PostgresCluster!
    var daemon: DaemonFixture?
    var account: ThrowawayAccount?
    var capture: SyslogCapture?
    let service = "pamtotp_fleetcred_\(getpid())"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs /etc/pam.d; the test makes an account")
        guard PostgresCluster.available else { return XCTFail("PostgreSQL 15 not found: make check installs postgresql-15") }
        cluster = try PostgresCluster()
        try cluster.psql("CREATE DATABASE fleet")
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: "fleet"))
        try cluster.psql("CREATE ROLE pamtotp_cred_host LOGIN PASSWORD 'not-this-one'; GRANT pam_totp_host TO pamtotp_cred_host", database: "fleet")
        account = try ThrowawayAccount(prefix: "totpcred")
    }

    override func tearDown() {
        daemon?.cleanup()
        _ = capture?.stop()
        account?.delete()
        unlink("/etc/pam.d/" + service)
        cluster?.stop()
    }

    /// pamtester as the throwaway account (a caller without root), answering `000000`.
    func pamtesterAsUser(_ config: String) throws -> CommandResult {
        let a = try XCTUnwrap(account)
        try "auth required \(moduleURL.path) config=\(config)\n".write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        let command = ["setpriv", "--reuid", "\(a.uid)", "--regid", "\(a.gid)", "--clear-groups", "pamtester", service, a.name, "authenticate"]
        return try runCommand(capture?.wrap(command) ?? command, input: "000000\n")
    }

    func testCredentialsInARootOnlyFileKeepLockersWorking() throws {
        let d = try DaemonFixture()
        daemon = d
        let secrets = try makeTemporaryDirectory("pam_totp_fleetcred")
        defer { removeTemporaryDirectory(secrets) }
        let secretFile = secrets.appendingPathComponent("conninfo").path
        try "\(cluster.conninfo(user: "pamtotp_cred_host", database: "fleet")) password=not-this-one\n"
            .write(toFile: secretFile, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(secretFile, 0o600), 0)
        try "backend = postgresql\npostgresql_file = \(secretFile)\nsocket = \(d.socketPath)\n"
            .write(toFile: d.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(d.config, 0o644), 0)
        try d.start()
        let r = try pamtesterAsUser(d.config)
        XCTAssertTrue(r.stderr.contains("Authentication failure") || r.stdout.contains("Authentication failure"),
                      "asked, answered, denied like a wrong code: \(r.stdout) \(r.stderr)")
        // The credentials' file must be root's alone.
        XCTAssertEqual(chmod(secretFile, 0o644), 0)
        d.cleanup()
        daemon = nil
        let again = try DaemonFixture()
        daemon = again
        try "backend = postgresql\npostgresql_file = \(secretFile)\nsocket = \(again.socketPath)\n"
            .write(toFile: again.config, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try again.start()) { XCTAssertTrue("\($0)".contains("mode 0600"), "\($0)") }
    }

    func testAConfigurationTheModuleCannotReadIsOneClearLogLine() throws {
        let d = try DaemonFixture()
        daemon = d
        capture = try SyslogCapture(scratch: d.root)
        // The old way: the password in the configuration, which pam-totpd wants root-only.
        try "backend = postgresql\npostgresql = \(cluster.conninfo(user: "pamtotp_cred_host", database: "fleet")) password=not-this-one\nsocket = \(d.socketPath)\n"
            .write(toFile: d.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(d.config, 0o600), 0)
        try d.start()
        let r = try pamtesterAsUser(d.config)
        XCTAssertFalse(r.stdout.contains("successfully"), r.stdout)
        let lines = capture?.stop() ?? []
        XCTAssertTrue(lines.contains { $0.contains("cannot read \(d.config) (permission denied)") && $0.contains("postgresql_file") },
                      "no clear line: \(lines.suffix(5))")
        XCTAssertFalse(lines.contains { $0.contains("not-this-one") }, "the password was logged")
    }
}
