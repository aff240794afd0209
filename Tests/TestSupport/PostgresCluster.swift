import Foundation

/// A throwaway PostgreSQL 15 cluster for the fleet tests (docs/ARCHITECTURE.md, section 8): initdb
/// under a temporary directory, run as the `postgres` system user (postgres refuses root),
/// listening only on a Unix socket in that directory; `stop()` removes it all. Debian's
/// postgresql-15 (make check installs it) provides the binaries and pgcrypto.
public final class PostgresCluster {
    public static let bin = "/usr/lib/postgresql/15/bin"
    public let directory: URL
    public var socketDirectory: String { directory.path }
    public var dataDirectory: String { directory.appendingPathComponent("data").path }
    public let port: Int
    /// Runs the server under this command (`/usr/sbin/ip netns exec NS`): its network namespace.
    public let launcher: [String]
    private var running = false

    /// The superuser's CONNINFO for `database`.
    public func conninfo(user: String = "postgres", database: String = "postgres") -> String {
        "host=\(socketDirectory) port=\(port) user=\(user) dbname=\(database)"
    }

    public static var available: Bool {
        FileManager.default.isExecutableFile(atPath: bin + "/initdb") && getpwnam("postgres") != nil
    }

    /// Starts a new cluster. `port` only names the socket file unless `listen` is given (then
    /// it also listens there, e.g. "127.0.0.1").
    public init(port: Int = 5432, listen: String = "", extraConfig: [String] = [], launcher: [String] = [],
                beforeStart: (PostgresCluster) throws -> Void = { _ in }) throws {
        self.port = port
        self.launcher = launcher
        directory = try makeTemporaryDirectory("pamtotp-fleet-pg")
        chmod(directory.path, 0o755)
        guard let pw = getpwnam("postgres") else { throw ClusterError("no postgres system user: install postgresql-15") }
        chown(directory.path, pw.pointee.pw_uid, pw.pointee.pw_gid)
        let initdb = try runCommand(["runuser", "-u", "postgres", "--", Self.bin + "/initdb", "-D", dataDirectory,
                                     "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
        guard initdb.status == 0 else { removeTemporaryDirectory(directory); throw ClusterError("initdb: " + initdb.stderr) }
        var conf = ["listen_addresses = '\(listen)'", "unix_socket_directories = '\(socketDirectory)'", "port = \(port)",
                    "fsync = off", "synchronous_commit = on", "full_page_writes = off", "max_connections = 100",
                    "log_min_messages = warning"]
        conf += extraConfig
        try (conf.joined(separator: "\n") + "\n").appendLine(to: dataDirectory + "/postgresql.conf")
        do { try beforeStart(self) } catch { removeTemporaryDirectory(directory); throw error }
        try start()
    }

    /// A streaming-replication standby of `primary` (pg_basebackup -R over the primary's Unix
    /// socket), in a directory of its own, reporting itself as `name` (for
    /// synchronous_standby_names). It is started, and stays a standby until `promote()`.
    public init(standbyOf primary: PostgresCluster, name: String) throws {
        port = primary.port
        launcher = primary.launcher
        directory = try makeTemporaryDirectory("pamtotp-fleet-pg-standby")
        chmod(directory.path, 0o755)
        guard let pw = getpwnam("postgres") else { throw ClusterError("no postgres system user: install postgresql-15") }
        chown(directory.path, pw.pointee.pw_uid, pw.pointee.pw_gid)
        let source = "host=\(primary.socketDirectory) port=\(primary.port) user=postgres application_name=\(name)"
        let backup = try runCommand(["runuser", "-u", "postgres", "--", Self.bin + "/pg_basebackup", "-d", source,
                                     "-D", dataDirectory, "-R", "-X", "stream", "-c", "fast"])
        guard backup.status == 0 else { removeTemporaryDirectory(directory); throw ClusterError("pg_basebackup: " + backup.stderr) }
        // Its own socket directory, and once promoted it waits for no standby of its own (it
        // has none); the rest of the primary's settings as copied.
        try "unix_socket_directories = '\(socketDirectory)'\nprimary_conninfo = '\(source)'\nsynchronous_standby_names = ''\n"
            .appendLine(to: dataDirectory + "/postgresql.conf")
        try start()
    }

    /// Promotes a standby to primary and waits until it takes writes.
    public func promote() throws {
        let r = try runCommand(["runuser", "-u", "postgres", "--", Self.bin + "/pg_ctl", "-D", dataDirectory, "-w", "-t", "30", "promote"])
        guard r.status == 0 else { throw ClusterError("pg_ctl promote: \(r.stderr)") }
    }

    public func start() throws {
        // Not through Process: the server it leaves running would inherit Foundation's
        // descriptors and waitUntilExit would never return. Every descriptor above 2 is closed.
        let status = spawnAndWait(launcher + ["/usr/sbin/runuser", "-u", "postgres", "--", Self.bin + "/pg_ctl", "-D", dataDirectory,
                                   "-l", directory.appendingPathComponent("log").path, "-w", "-t", "30", "start"])
        guard status == 0 else {
            let log = (try? String(contentsOfFile: directory.appendingPathComponent("log").path, encoding: .utf8)) ?? ""
            throw ClusterError("pg_ctl start: status \(status) \(log.suffix(2000))")
        }
        running = true
    }

    /// Stops the server: `immediate` is like a crash (no checkpoint; WAL replay at the next start).
    public func stopServer(immediate: Bool = false) throws {
        guard running else { return }
        let r = try runCommand(["runuser", "-u", "postgres", "--", Self.bin + "/pg_ctl", "-D", dataDirectory,
                                "-m", immediate ? "immediate" : "fast", "-w", "-t", "30", "stop"])
        guard r.status == 0 else { throw ClusterError("pg_ctl stop: \(r.stderr)") }
        running = false
    }

    /// The postmaster's pid (for SIGKILL tests).
    public var postmasterPID: pid_t? {
        guard let text = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8),
              let first = text.split(separator: "\n").first else { return nil }
        return pid_t(first)
    }

    /// Marks the server as stopped after the test killed it.
    public func markStopped() { running = false }

    public func stop() {
        try? stopServer(immediate: true)
        removeTemporaryDirectory(directory)
    }

    /// Runs SQL through psql as `user`; returns stdout (unaligned, tuples only), throws on error
    /// (its text starts with the SQLSTATE: `ERROR:  PT013: ...`, so tests can match the code).
    @discardableResult
    public func psql(_ sql: String, user: String = "postgres", database: String = "postgres") throws -> String {
        let r = try runCommand(["psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-h", socketDirectory,
                                "-p", String(port), "-U", user, "-d", database, "-c", sql])
        guard r.status == 0 else { throw ClusterError(r.stderr.trimmingCharacters(in: .whitespacesAndNewlines)) }
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

extension PostgresCluster {
    /// One login through the procedure pam_totp_api.login as `user`, or with `procedure`
    /// "login_at" on the caller's clock (the owner's: login_begin_at, then login_finish, each
    /// a statement of its own), then `select`, an expression over its result row's columns
    /// (outcome, label, step, digits, failures, locked_until, replayed, remaining).
    public func login(_ select: String, _ arguments: String, procedure: String = "login", user: String = "postgres",
                      database: String) throws -> String {
        let row: String
        if procedure == "login_at" {
            let attempt = try psql("SELECT pam_totp_api.login_begin_at(\(arguments))", user: user, database: database)
            row = try psql("SELECT * FROM pam_totp_api.login_finish(\(attempt))", user: user, database: database)
        } else {
            row = try psql("CALL pam_totp_api.\(procedure)(\(arguments))", user: user, database: database)
        }
        let v = row.split(separator: "|", omittingEmptySubsequences: false)
            .map { $0.isEmpty ? "NULL" : "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" }
        guard v.count == 8 else { throw ClusterError("login: not one verdict row: \(row)") }
        return try psql("SELECT \(select) FROM (SELECT \(v[0])::text AS outcome, \(v[1])::text AS label, \(v[2])::bigint AS step, "
                        + "\(v[3])::integer AS digits, \(v[4])::integer AS failures, \(v[5])::bigint AS locked_until, "
                        + "\(v[6])::boolean AS replayed, \(v[7])::integer AS remaining) v", database: database)
    }
}

public struct ClusterError: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

extension String {
    public func appendLine(to path: String) throws {
        guard let h = FileHandle(forWritingAtPath: path) else { throw ClusterError("cannot open \(path)") }
        defer { try? h.close() }
        h.seekToEndOfFile()
        h.write(Data(self.utf8))
    }
}

/// Runs a program with stdin/stdout/stderr on /dev/null and no other descriptor; its exit status.
public func spawnAndWait(_ arguments: [String]) -> Int32 {
    let null = open("/dev/null", O_RDWR | O_CLOEXEC)
    guard null >= 0 else { return -1 }
    defer { close(null) }
    let p = SpawnedProcess()
    guard (try? p.run(arguments, stdio: null)) != nil else { return -1 }
    p.waitUntilExit()
    return p.terminationStatus
}
