import Foundation
import TestSupport
import XCTest

/// Debian's PgBouncer in front of a test cluster: run as the postgres user (it refuses root),
/// transaction pooling, `poolSize` server connections per (database, role), a server
/// connection checked before each use; trust authentication for `users`. Listens on 127.0.0.1.
final class PgBouncer {
    let directory: URL
    let port: Int
    private let process = SpawnedProcess()

    init(_ cluster: PostgresCluster, database: String, users: [String], poolSize: Int = 1) throws {
        directory = try makeTemporaryDirectory("pamtotp-pgbouncer")
        guard let pw = getpwnam("postgres") else { removeTemporaryDirectory(directory); throw XCTSkip("no postgres user") }
        port = try freeTCPPort()
        try users.map { "\"\($0)\" \"\"\n" }.joined().write(toFile: directory.path + "/users.txt", atomically: true, encoding: .utf8)
        try """
            [databases]
            \(database) = host=\(cluster.socketDirectory) port=\(cluster.port) dbname=\(database)
            [pgbouncer]
            listen_addr = 127.0.0.1
            listen_port = \(port)
            unix_socket_dir =
            auth_type = trust
            auth_file = \(directory.path)/users.txt
            pool_mode = transaction
            default_pool_size = \(poolSize)
            server_check_delay = 0
            logfile = \(directory.path)/pgbouncer.log
            pidfile = \(directory.path)/pgbouncer.pid

            """.write(toFile: directory.path + "/pgbouncer.ini", atomically: true, encoding: .utf8)
        for f in ["", "/users.txt", "/pgbouncer.ini"] { chown(directory.path + f, pw.pointee.pw_uid, pw.pointee.pw_gid) }
        let null = open("/dev/null", O_RDWR)
        defer { close(null) }
        try process.run(["/usr/sbin/runuser", "-u", "postgres", "--", "/usr/sbin/pgbouncer", directory.path + "/pgbouncer.ini"], stdio: null)
        let user = users.first ?? "postgres"
        guard waitUntil(timeout: 10, {
            (try? runCommand(["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", String(self.port), "-U", user, "-d", database,
                              "-c", "SELECT 1"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == "1"
        }) else {
            let log = log
            stop()
            throw ClusterError("PgBouncer does not answer: " + log)
        }
    }

    var log: String { (try? String(contentsOfFile: directory.path + "/pgbouncer.log", encoding: .utf8)) ?? "" }

    func conninfo(user: String, database: String) -> String { "host=127.0.0.1 port=\(port) user=\(user) dbname=\(database)" }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        process.waitUntilExit()
        removeTemporaryDirectory(directory)
    }
}
