import CLibc
import FleetStore
import MFADaemon
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// pam-totpd: answers pam_totp.so for callers without root (screen lockers) over a Unix socket
/// (docs/ARCHITECTURE.md, section 5.2). All policy is MFADaemon's (DaemonService, the limits); this is transport.
@main
struct PamTOTPD: Command {
    static let name = "pam-totpd"
    static let abstract = "Answer pam_totp.so for callers without root (screen lockers) over a Unix socket."
    static let discussion = """
        Runs in the foreground as root. Under systemd socket activation (LISTEN_FDS) it serves \
        the socket it is given and exits after a minute without connections. With \
        backend = postgresql it serves the fleet's database instead of this host's files. \
        See pam-totpd(8).
        """
    static let configSpec = ArgumentSpec.option("--config", "FILE", "The configuration file (default /etc/security/pam_totp.conf).")
    static let specs: [ArgumentSpec] = [
        configSpec,
        .option("--socket", "PATH", "The socket to listen on (default: the configuration's socket, else /run/pam-totp/socket)."),
    ]

    static let program = Program(name: name, abstract: abstract, discussion: discussion, root: Subcommand(PamTOTPD.self),
                                 rootIsSubcommand: false, subcommands: [Subcommand(InitDatabase.self), Subcommand(ImportFiles.self), Subcommand(Deliver.self),
                                                                          Subcommand(AddHost.self), Subcommand(RemoveHost.self)],
                                 optionsBeforeSubcommand: ["--config"])

    static func main() {
        program.main(processArguments().dropFirst().map { String(decoding: $0, as: UTF8.self) })
    }

    let config: String?
    let socket: String?

    init(_ arguments: Arguments) {
        config = arguments.string("--config")
        socket = arguments.string("--socket")
    }

    func run() throws(CommandError) {
        Logger.bootstrap()
        let logger = Logger()
        do throws(DaemonError) {
            guard geteuid() == 0 else { throw DaemonError("must run as root (it reads the root-only store)") }
            let site = try Self.siteOptions(config)
            let socketPath = socket ?? String(decoding: site.socket, as: UTF8.self)
            guard socketPath.hasPrefix("/"), socketPath.utf8.count <= ModuleOptions.maxSocketPathLength else {
                throw DaemonError("the socket must be an absolute path of at most \(ModuleOptions.maxSocketPathLength) bytes: \(socketPath)")
            }
            var limits = Self.limits()
            limits.trustedUIDs = Self.trustedUIDs(site, logger: logger)
            let activated = Self.activatedSocket()
            if activated != nil { limits.idleExitSeconds = 60 }
            if activated == nil {
                // One daemon per socket, claimed before the backend starts (a second daemon
                // opens no database connection); the lock is held until exit, never closed.
                try Self.prepareDirectory(socketPath)
                _ = try SocketClaim.claim(socketPath)
            }
            let backend = try Self.backend(site: site, configPath: config, workers: limits.workers, trustedUIDs: limits.trustedUIDs)
            try Self.serve(backend, limits: limits, socketPath: socketPath, activated: activated, logger: logger)
        } catch {
            printError(error.text)
            logger.error("\(error.text)")
            throw .exit(1)
        }
    }

    /// Room for many connections (each holds a descriptor until its deadline), and the limits
    /// that follow from the descriptors there are.
    static func limits() -> Limits {
        var nofile = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max {
            nofile.rlim_cur = nofile.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &nofile)
        }
        var limits = Limits()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &nofile) == 0 {
            limits.maxConnections = max(16, min(limits.maxConnections, Int(clamping: nofile.rlim_cur) - 64))
        }
        return limits
    }

    /// What answers requests: DaemonService on the configuration's backend.
    struct Backend {
        let handle: RequestHandlerFunction
        let handleAdmin: AdminHandlerFunction
        let name: String
        /// Run by the event loop at least every 10 s: fleet mode closes idle database connections.
        var housekeeping: @Sendable () -> Void = {}

        init<S: TOTPStore>(_ service: DaemonService<S>, name: String) {
            handle = { request, peer, now in service.handleDeferring(request, peer: peer, at: now, account: AccountCache.shared.lookup) }
            handleAdmin = { request, peer, now in
                var rng = SystemRandomNumberGenerator()
                return service.handleAdmin(request, peer: peer, at: now, using: &rng)
            }
            self.name = name
        }
    }

    /// The uids of `trusted_callers`, looked up once at start; a name with no account is left
    /// out with a warning (it gains nothing until it exists and pam-totpd restarts).
    static func trustedUIDs(_ site: ModuleOptions, logger: Logger) -> [UInt32] {
        var uids: [UInt32] = []
        for name in site.trustedCallers {
            let text = String(decoding: name, as: UTF8.self)
            if let pw = getpwnam(text), pw.pointee.pw_uid != 0 {
                uids.append(UInt32(pw.pointee.pw_uid))
                logger.info("trusted caller \(text) (uid \(pw.pointee.pw_uid)) may ask about any user (trusted_callers)")
            } else {
                logger.warning("trusted_callers: no such account \(text) (or it is root): left out")
            }
        }
        return uids
    }

    static func backend(site: ModuleOptions, configPath: String?, workers: Int, trustedUIDs: [UInt32] = []) throws(DaemonError) -> Backend {
        switch site.backend {
        case .files:
            return Backend(DaemonService<Store>(site: site, openStore: Self.openStore,
                                                sender: try Sending.sender(site: site, workers: workers), trustedUIDs: trustedUIDs),
                           name: "store " + String(decoding: site.store, as: UTF8.self))
        case .postgresql:
            let store = try Self.fleetStore(site: site, configPath: configPath, workers: workers)
            let service = DaemonService<PostgresStore>(site: site, openStore: { (_: [UInt8]) throws(MFAError) -> PostgresStore in store },
                                                       auditTrail: { (user, since, after, limit) throws(MFAError) -> [AuditEvent] in
                                                           try store.auditTrail(user: user, since: since, after: after, limit: limit)
                                                       }, trustedUIDs: trustedUIDs)
            var backend = Backend(service, name: "backend postgresql")
            backend.housekeeping = { store.pool.closeIdle() }
            return backend
        }
    }

    /// Listens (on the socket systemd passed, or on `socketPath`) and answers until idle.
    static func serve(_ backend: Backend, limits: Limits, socketPath: String, activated: CInt?, logger: Logger) throws(DaemonError) {
        let listener: CInt
        if let fd = activated {
            // systemd owns the socket (and starts one daemon per socket unit): no lock is taken.
            listener = fd
        } else {
            listener = try Self.listen(socketPath)
            // Every local user may connect; each request is authorised by SO_PEERCRED.
            guard chmod(socketPath, 0o666) == 0 else { throw DaemonError("cannot chmod \(socketPath): \(Errno.current.text.string)") }
        }
        let state = ServerState(limits: limits, handle: backend.handle, handleAdmin: backend.handleAdmin,
                                pool: try WorkerPool(threads: limits.workers), logger: logger, housekeeping: backend.housekeeping)
        let server = try Server(state: state, listener: listener)
        logger.notice("listening on \(activated != nil ? "the socket systemd passed" : socketPath) (\(backend.name))")
        try server.run()
    }

    /// A listening Unix stream socket at `path` (backlog 512).
    static func listen(_ path: String) throws(DaemonError) -> CInt {
        let fd = CLibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DaemonError("cannot listen on \(path): \(Errno.current.text.string)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw DaemonError("the socket path is too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, CLibc.listen(fd, 512) == 0 else {
            let e = Errno.current
            close(fd)
            throw DaemonError("cannot listen on \(path): \(e.text.string)")
        }
        return fd
    }

    /// The daemon's settings: `--config FILE` (required to exist), else the default file if
    /// there is one. A broken or unsafe file is an error that says where.
    static func siteOptions(_ config: String?) throws(DaemonError) -> ModuleOptions {
        var arguments: [[UInt8]] = []
        if let config { arguments.append(Array(("config=" + config).utf8)) }
        do throws(MFAError) {
            return try ModuleOptions.load(arguments)
        } catch {
            if case .invalidOption(let m) = error { throw DaemonError("configuration error: " + m.string) }
            throw DaemonError("configuration error: \(error)")
        }
    }

    static func openStore(_ path: [UInt8]) throws(MFAError) -> Store { try Store(path: path) }

    /// Fleet mode: the CONNINFO checked (libpq parses it; a password in it needs a root-only
    /// 0600 file), one connection made to prove the server is there, then the pool.
    static func fleetStore(site: ModuleOptions, configPath: String?, workers: Int) throws(DaemonError) -> PostgresStore {
        let conninfo = try fleetConninfo(site: site, configPath: configPath)
        let credential = try site.hostCredential.map { (path) throws(DaemonError) in try Self.hostCredential(String(decoding: path, as: UTF8.self)) }
        let pool = ConnectionPool(conninfo: conninfo, maxIdle: workers, connectTimeoutMilliseconds: site.dbConnectTimeout * 1000,
                                  idleTimeoutMilliseconds: site.dbIdleTimeout * 1000)
        let store = PostgresStore(pool: pool, credential: credential)
        var failure: PQError? = nil
        do throws(PQError) { try store.probe() } catch { failure = error }
        if let e = failure {
            let fix = e.sqlState.flatMap { Refusal(sqlState: $0) }?.isHostCredential == true
                ? "host_credential: pam-totpd add-host NAME --credential FILE"
                : "run pam-totpd init-database, and grant pam_totp_host to this host's role"
            throw DaemonError(e.sqlState == nil ? "cannot reach the database: \(e.message)" : "the database refused: \(e.message) (\(fix))")
        }
        return store
    }

    /// `host_credential = PATH`: a root-only file as add-host writes it (HostCredential).
    static func hostCredential(_ path: String) throws(DaemonError) -> HostCredential {
        var bytes = try rootOnlyFile(path, setting: "host_credential")
        defer { for i in bytes.indices { bytes[i] = 0 } }
        guard let credential = HostCredential.parse(bytes) else {
            throw DaemonError("host_credential \(path) is not a host credential (one line, as pam-totpd add-host writes it)")
        }
        return credential
    }

    /// The configuration's CONNINFO (postgresql = or the root-only postgresql_file), checked:
    /// libpq loads and parses it, and a password in it is only in a root-only file.
    static func fleetConninfo(site: ModuleOptions, configPath: String?) throws(DaemonError) -> String {
        if site.postgresql != nil && site.postgresqlFile != nil {
            throw DaemonError("set one of postgresql = CONNINFO and postgresql_file = PATH, not both")
        }
        let raw: [UInt8]
        if let path = site.postgresqlFile {
            raw = try Self.credentialsFile(String(decoding: path, as: UTF8.self))
        } else if let inline = site.postgresql {
            raw = inline
        } else {
            throw DaemonError("backend = postgresql needs postgresql = CONNINFO (or postgresql_file = PATH) in the configuration file")
        }
        let conninfo = String(decoding: raw, as: UTF8.self)
        // libpq is loaded now, and only in fleet mode (CLibPQ): a host without it is told what to install.
        do throws(PQError) { try PQLibrary.load() } catch { throw DaemonError(error.message) }
        let checked = checkConninfo(conninfo)
        if let error = checked.error { throw DaemonError("postgresql = CONNINFO is not valid: \(error)") }
        if let warning = conninfoTLSWarning(conninfo) {
            printError("warning: " + warning)
            Logger().warning("\(warning)")
        }
        if checked.hasPassword && site.postgresqlFile == nil {  // postgresql_file: its own root-only mode was checked
            let path = configPath ?? String(decoding: ModuleOptions.defaultConfigFile, as: UTF8.self)
            var st = stat()
            guard stat(path, &st) == 0, st.st_uid == 0, st.st_mode & 0o077 == 0 else {
                throw DaemonError("\(path) holds a database password: it must be owned by root with mode 0600 (or use passfile= or a client certificate)")
            }
        }
        return conninfo
    }

    /// The CONNINFO in `postgresql_file`: a regular file owned by root that nobody else may
    /// read or write (it may hold a password), one line of at most 4096 bytes.
    static func credentialsFile(_ path: String) throws(DaemonError) -> [UInt8] {
        var bytes = try rootOnlyFile(path, setting: "postgresql_file")
        guard !bytes.isEmpty else { throw DaemonError("postgresql_file \(path) must hold one CONNINFO of 1 to 4096 bytes") }
        var line = bytes
        for i in bytes.indices { bytes[i] = 0 }
        while let last = line.last, last == 0x0A || last == 0x0D || last == 0x20 { line.removeLast() }
        guard !line.isEmpty, !line.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw DaemonError("postgresql_file \(path) must hold one CONNINFO line")
        }
        return line
    }

    /// A regular file owned by root that nobody else may read or write (it holds a secret), of
    /// at most 4096 bytes; `setting` names it in errors.
    static func rootOnlyFile(_ path: String, setting: String) throws(DaemonError) -> [UInt8] {
        let fd = clibc_open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)
        guard fd >= 0 else { throw DaemonError("cannot open \(setting) \(path) (\(Errno.current.text.string))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG), st.st_uid == 0, st.st_mode & 0o077 == 0 else {
            throw DaemonError("\(setting) \(path) must be a regular file owned by root with mode 0600 or 0400")
        }
        var bytes = [UInt8](repeating: 0, count: 4097)
        let n = read(fd, &bytes, bytes.count)
        guard n >= 0, n <= 4096 else {
            for i in bytes.indices { bytes[i] = 0 }
            throw DaemonError("\(setting) \(path) must hold at most 4096 bytes")
        }
        let content = Array(bytes[0..<n])
        for i in bytes.indices { bytes[i] = 0 }
        return content
    }

    /// The listening socket systemd passed (LISTEN_FDS=1 for this pid: fd 3), checked to be a
    /// listening Unix stream socket; nil when not socket-activated.
    static func activatedSocket() -> CInt? {
        guard let fds = getenv("LISTEN_FDS").map({ String(cString: $0) }),
              let pid = getenv("LISTEN_PID").map({ String(cString: $0) }), pid == String(getpid()) else { return nil }
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDNAMES")
        guard fds == "1" else { return nil }
        var type: CInt = 0, listening: CInt = 0, domain: CInt = 0
        var size = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &size) == 0, type == CInt(SOCK_STREAM.rawValue),
              getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening == 1,
              getsockopt(3, SOL_SOCKET, SO_DOMAIN, &domain, &size) == 0, domain == AF_UNIX else { return nil }
        _ = clibc_fcntl_int(3, F_SETFD, FD_CLOEXEC)
        return 3
    }

    /// The socket's directory, created 0755 if missing (what may be at the socket path itself
    /// is `SocketClaim`'s to decide).
    static func prepareDirectory(_ path: String) throws(DaemonError) {
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            let dir = String(path[..<slash])
            if mkdir(dir, 0o755) == 0 { _ = chmod(dir, 0o755) } else if clibc_errno() != EEXIST {
                throw DaemonError("cannot create \(dir): \(Errno.current.text.string)")
            }
        }
    }
}

/// A start-up failure: one line on stderr and in the log, exit 1.
struct DaemonError: Error {
    let text: String
    init(_ text: String) { self.text = text }
}
