import FleetStore
import MFAPolicy
import MFAWire
import TestSupport
import XCTest

/// What every fleet test class starts from: a throwaway PostgreSQL 15 (`PostgresCluster`)
/// with `database` made and the schema migrated. A machine without PostgreSQL fails the class
/// (make check installs it), and nothing is left behind if a step fails.
func startFleetCluster(database: String) throws -> PostgresCluster {
    guard PostgresCluster.available else {
        XCTFail("PostgreSQL 15 not found: make check installs postgresql-15")
        throw XCTSkip("no PostgreSQL")
    }
    let cluster = try PostgresCluster()
    do {
        try cluster.psql("CREATE DATABASE \(database)")
        _ = try Migrator.migrate(conninfo: cluster.conninfo(database: database))
    } catch {
        cluster.stop()
        throw error
    }
    return cluster
}

/// One request as root to the pam-totpd at `socketPath`, as pam_totp.so sends it in fleet mode
/// (no lockout, 100 failures allowed).
func askFleetDaemon(_ socketPath: String, _ op: DaemonOperation, service: String, answer: String) throws -> DaemonReply {
    var o = ModuleOptions()
    o.backend = .postgresql
    o.maxFailures = 100
    o.lockoutSeconds = 0
    let frame = try XCTUnwrap(DaemonRequest(operation: op, service: Array(service.utf8), user: Array("root".utf8),
                                            options: o, answer: Array(answer.utf8)).encoded())
    let fd = DaemonTests.connectTo(socketPath)
    XCTAssertGreaterThanOrEqual(fd, 0, "connect to \(socketPath)")
    defer { close(fd) }
    XCTAssertTrue(DaemonTests.send(fd, frame))
    return try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd), "no reply from \(socketPath)"))
}
