import CLibc
import FleetStore
import MFACommandLine
import MFACrypto
import MFAPolicy
import MFASystem

/// The admin connection of add-host and remove-host: `--admin CONNINFO` (as init-database), or
/// the configuration's database (`--config FILE`, which must then name a role with
/// pam_totp_admin).
struct AdminDatabase {
    static let specs: [ArgumentSpec] = [
        .option("--admin", "CONNINFO", "A libpq CONNINFO of a role with pam_totp_admin (default: the configuration's postgresql; keep passwords in ~/.pgpass, not here)."),
        PamTOTPD.configSpec,
    ]

    let admin: String?
    let config: String?

    init(_ arguments: Arguments) {
        admin = arguments.string("--admin")
        config = arguments.string("--config")
    }

    func connect() throws(DaemonError) -> PQConnection {
        let conninfo: String
        if let admin {
            try Self.check(admin)
            conninfo = admin
        } else {
            let site = try PamTOTPD.siteOptions(config)
            conninfo = try PamTOTPD.fleetConninfo(site: site, configPath: config)
        }
        do throws(PQError) {
            return try PQConnection(conninfo: conninfo, timeoutMilliseconds: 10_000, statementTimeoutMilliseconds: 10_000)
        } catch {
            throw DaemonError("cannot reach the database: \(error.message)")
        }
    }

    /// `--admin CONNINFO` (init-database's too): one libpq takes, with no password in it.
    static func check(_ admin: String) throws(DaemonError) {
        let checked = checkConninfo(admin)
        if let error = checked.error { throw DaemonError("--admin is not a valid CONNINFO: \(error)") }
        // Every local user can read a command line (/proc/PID/cmdline) while it runs.
        if checked.hasPassword {
            throw DaemonError("--admin must not hold a password (any local user can read a command line): use ~/.pgpass, PGPASSFILE, a client certificate or peer authentication")
        }
    }

    static func refused(_ e: PQError) -> DaemonError {
        DaemonError(e.sqlState == SQLState.insufficientPrivilege
                    ? "the database refused: this role has no pam_totp_admin (\(e.message))"
                    : e.sqlState == nil ? "cannot reach the database: \(e.message)" : "the database refused: \(e.message)")
    }
}

/// `pam-totpd add-host NAME [--credential FILE]`: a host's own credential (docs/FLEET.md,
/// "Host credentials"). The database makes the key (so it is in no statement's text or log)
/// and returns it once; it is written to FILE (created, root 0600), or to standard output.
struct AddHost: Command {
    static let name = "add-host"
    static let abstract = "Give a host its own credential (a key the database makes); the host's configuration names it with host_credential = FILE."
    static let specs: [ArgumentSpec] = [
        .argument("NAME", "The host's name in the audit trail: 1 to 63 letters, digits, dots, underscores and hyphens."),
        .option("--credential", "FILE", "Write the credential to FILE (created, mode 0600; it must not exist). Default: standard output."),
    ] + AdminDatabase.specs

    let host: String
    let file: String?
    let database: AdminDatabase

    init(_ arguments: Arguments) throws(CommandError) {
        host = try arguments.required("NAME")
        file = arguments.string("--credential")
        database = AdminDatabase(arguments)
    }

    func run() throws(CommandError) {
        Logger.bootstrap()
        do throws(DaemonError) {
            try add()
        } catch {
            printError(error.text)
            throw .exit(1)
        }
    }

    func add() throws(DaemonError) {
        guard HostCredential.validName(Array(host.utf8)) else {
            throw DaemonError("a host's name is 1 to 63 letters, digits, dots, underscores and hyphens, the first a letter or digit: \(host)")
        }
        // The file first (it must not exist): then nothing is added that could not be written.
        var fd: CInt = -1
        if let file {
            guard !file.isEmpty else { throw DaemonError("--credential needs a file name") }
            fd = clibc_open(file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw DaemonError("cannot create \(file) (\(Errno.current.text.string)); it must not exist") }
        }
        var written = false
        defer {
            if fd >= 0 { close(fd) }
            if let file, !written { _ = unlink(file) }
        }
        let c = try database.connect()
        var text: [UInt8] = []
        defer { for i in text.indices { text[i] = 0 } }
        var failure: String? = nil
        do throws(PQError) {
            _ = try c.execute("BEGIN")
            let rows = try c.execute("SELECT encode(pam_totp_api.add_host($1), 'hex')", [.text(host)])
            if let hex = rows.first?.first ?? nil, hex.utf8.count == 64 {
                text = HostCredential.line(host: host, hexKey: hex)
            }
            if HostCredential.parse(text) == nil {
                failure = "the database returned a malformed key: nothing was added"
            } else if fd >= 0 && !(writeAll(fd, text) && fsync(fd) == 0) {
                // Written before the key is committed: a key nobody holds is never added.
                failure = "cannot write \(file ?? "") (\(Errno.current.text.string)): nothing was added"
            }
            _ = try c.execute(failure == nil ? "COMMIT" : "ROLLBACK")
        } catch {
            _ = try? c.execute("ROLLBACK")
            throw AdminDatabase.refused(error)
        }
        if let failure { throw DaemonError(failure) }
        written = true
        if fd < 0 {
            _ = writeAll(1, text)
        } else {
            printError("pam-totpd: host \(host) added; its credential is in \(file ?? "") (copy it to the host, root 0600, and set host_credential = PATH there)")
        }
    }

    func writeAll(_ fd: CInt, _ bytes: [UInt8]) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && Errno.current.rawValue == EINTR { continue }
            guard n > 0 else { return false }
            off += n
        }
        return true
    }
}

/// `pam-totpd remove-host NAME`: the host's key is deleted, so its next call is refused (with or
/// without a credential: a role of that name too) until it is added again.
struct RemoveHost: Command {
    static let name = "remove-host"
    static let abstract = "Revoke a host at once: its credential (and a role of that name) may no longer call the database."
    static let specs: [ArgumentSpec] = [.argument("NAME", "The host's name.")] + AdminDatabase.specs

    let host: String
    let database: AdminDatabase

    init(_ arguments: Arguments) throws(CommandError) {
        host = try arguments.required("NAME")
        database = AdminDatabase(arguments)
    }

    func run() throws(CommandError) {
        Logger.bootstrap()
        do throws(DaemonError) {
            guard HostCredential.validName(Array(host.utf8)) else { throw DaemonError("no such host: \(host)") }
            let c = try database.connect()
            let rows: [[String?]]
            do throws(PQError) {
                rows = try c.execute("SELECT pam_totp_api.remove_host($1)", [.text(host)])
            } catch { throw AdminDatabase.refused(error) }
            guard rows.first?.first ?? nil == "t" else { throw DaemonError("host \(host) was removed already") }
            print("pam-totpd: host \(host) removed: its calls are refused from now on")
        } catch {
            printError(error.text)
            throw .exit(1)
        }
    }
}
