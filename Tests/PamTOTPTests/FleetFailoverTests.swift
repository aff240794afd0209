import FleetStore
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Failover as docs/FLEET.md describes it: a primary with a synchronous standby
/// (synchronous_standby_names, synchronous_commit = on), a host whose CONNINFO names both
/// (`host=A,B target_session_attrs=read-write`). The primary is killed right after a code is
/// accepted, the standby promoted: the code stays used and the failures stay counted on the new
/// primary, and the host's pam-totpd reconnects to it by itself. Real PostgreSQL 15 replication.
final class FleetFailoverTests: XCTestCase {
    var primary: PostgresCluster!
    var standby: PostgresCluster!
    var host: DaemonFixture!
    let db = "fleet"
    let secret = Array("fleetfailoversecret1".utf8)

    override func setUpWithError() throws {
        guard PostgresCluster.available else {
            XCTFail("PostgreSQL 15 not found: make check installs postgresql-15")
            throw XCTSkip("no PostgreSQL")
        }
        primary = try PostgresCluster(extraConfig: ["wal_level = replica", "max_wal_senders = 4"])
        try primary.psql("CREATE DATABASE \(db)")
        _ = try Migrator.migrate(conninfo: primary.conninfo(database: db))
        try primary.psql("UPDATE pam_totp.settings SET max_window = 3, max_failures = 100, min_lockout = 0", database: db)
        try primary.psql("CREATE ROLE failover_host LOGIN; GRANT pam_totp_host TO failover_host", database: db)
        var rng = SystemRandomNumberGenerator()
        try PostgresStore(pool: ConnectionPool(conninfo: primary.conninfo(database: db)))
            .enroll(user: Array("root".utf8), accountUID: 0,
                    factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret),
                    importedCodes: nil, using: &rng)
        standby = try PostgresCluster(standbyOf: primary, name: "standby1")
        // Synchronous from now on: a commit returns once standby1 has it.
        try primary.psql("ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (standby1)'")
        try primary.psql("SELECT pg_reload_conf()")
        XCTAssertTrue(waitUntil(timeout: 20) {
            (try? self.primary.psql("SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'")) == "sync"
        }, "the standby is synchronous")
        host = try DaemonFixture()
        try """
            backend = postgresql
            postgresql = host=\(primary.socketDirectory),\(standby.socketDirectory) port=\(primary.port) user=failover_host dbname=\(db) target_session_attrs=read-write
            socket = \(host.socketPath)
            adjacent_intervals = 3
            max_failures = 100
            lockout = 0

            """.write(toFile: host.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(host.config, 0o644), 0)
        try host.start()
    }

    override func tearDown() {
        host?.cleanup()
        standby?.stop()
        primary?.stop()
    }

    func ask(_ answer: String) throws -> AuthOutcome? {
        var o = ModuleOptions()
        o.backend = .postgresql
        o.adjacentIntervals = 3
        o.maxFailures = 100
        o.lockoutSeconds = 0
        let frame = try XCTUnwrap(DaemonRequest(operation: .authenticate, service: Array("fleet-failover".utf8), user: Array("root".utf8),
                                                options: o, answer: Array(answer.utf8)).encoded())
        let fd = DaemonTests.connectTo(host.socketPath)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        XCTAssertTrue(DaemonTests.send(fd, frame))
        guard let bytes = DaemonTests.readAll(fd), case .outcome(let outcome) = try DaemonReply.decode(bytes) else { return nil }
        return outcome
    }

    func code(_ offset: Int64) throws -> String { String(decoding: try currentCode(secret, offsetSteps: offset), as: UTF8.self) }

    func testAnAcceptedStepSurvivesPromotingTheSynchronousStandby() throws {
        awayFromStepBoundary(margin: 6)
        let used = try code(1)
        guard case .success? = try ask(used) else { return XCTFail("the primary accepts a fresh code") }
        for _ in 0..<3 { _ = try ask("000000") }
        // The primary dies the moment the login returned (no checkpoint, no clean shutdown).
        let pid = try XCTUnwrap(primary.postmasterPID)
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        primary.markStopped()
        try standby.promote()
        // While no host is reachable the daemon denies; once promoted it reconnects by itself.
        var afterwards: AuthOutcome? = nil
        XCTAssertTrue(waitUntil(timeout: 20) {
            afterwards = try? self.ask(used)
            if case .failed? = afterwards { return false }
            return afterwards != nil
        }, "the daemon reached the promoted standby: \(String(describing: afterwards))")
        guard case .wrongCode(replayed: true, let failures, _)? = afterwards else {
            return XCTFail("the code accepted before the failover works again after it: \(String(describing: afterwards))")
        }
        XCTAssertEqual(failures, 4, "the three wrong codes before the failover are still counted (and this replay)")
        guard case .success? = try ask(try code(2)) else { return XCTFail("a fresh code logs in on the new primary") }
        XCTAssertEqual(try standby.psql("SELECT pg_is_in_recovery()"), "f")
    }
}
