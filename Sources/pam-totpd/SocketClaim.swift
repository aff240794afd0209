import CLibc
import MFASystem

/// One daemon per socket (docs/ARCHITECTURE.md, section 5.2). Without socket activation
/// pam-totpd claims its socket path before it binds: it holds an exclusive `flock` on
/// `PATH.lock` (created 0600 next to the socket, never removed, so it is never renamed under
/// a holder) for its whole life, and only the holder may remove a socket file there. A second
/// daemon on the same path finds the lock taken and exits with one line naming the path and
/// the live daemon (its pid from `SO_PEERCRED` on a connect). The kernel drops the lock when
/// the holder dies however it dies, so a socket file a killed daemon left behind (connect:
/// ECONNREFUSED) is replaced by the next one; one that something else still serves (systemd's
/// pam-totpd.socket, a daemon without the lock) is never taken.
enum SocketClaim {
    /// What a connect to a socket path finds.
    enum Probe: Equatable {
        /// Something accepts connections there (`pid` from SO_PEERCRED, nil if unknown:
        /// its backlog is full).
        case live(pid: Int32?)
        /// A socket file nobody listens on (ECONNREFUSED): left by a daemon that died.
        case stale
        /// Nothing at the path.
        case absent
    }

    /// Takes the path for this process: the lock held (the returned descriptor, close-on-exec,
    /// to be kept open until exit) and no stale socket in the way. Throws, naming the path and
    /// who serves it, when another daemon holds the lock or anything serves the socket.
    static func claim(_ path: String) throws(DaemonError) -> CInt {
        let lockPath = path + ".lock"
        let fd = clibc_open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DaemonError("cannot open the lock file \(lockPath): \(Errno.current.text.string)") }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG), st.st_uid == 0, st.st_mode & 0o022 == 0 else {
            close(fd)
            throw DaemonError("\(lockPath) must be a regular file owned by root that only root may write")
        }
        guard lockNow(fd) else {
            let e = Errno.current
            close(fd)
            guard e == .wouldBlock else { throw DaemonError("cannot lock \(lockPath): \(e.text.string)") }
            throw DaemonError(alreadyServed(path, by: holder(of: path, lockPath: lockPath)))
        }
        // The holder's pid, for a second daemon that cannot reach the socket (yet): informative only.
        var pid = Array("\(getpid())\n".utf8)
        if ftruncate(fd, 0) == 0 { _ = pwrite(fd, &pid, pid.count, 0) }
        var existing = stat()
        guard lstat(path, &existing) == 0 else {
            let e = Errno.current
            guard e == .noSuchFileOrDirectory else {
                close(fd)
                throw DaemonError("cannot inspect \(path): \(e.text.string)")
            }
            return fd
        }
        guard existing.st_mode & UInt32(S_IFMT) == UInt32(S_IFSOCK) else {
            close(fd)
            throw DaemonError("\(path) exists and is not a socket")
        }
        switch try probe(path) {
        case .live(let pid):
            // Served by something that does not take the lock: systemd's socket unit, an older daemon.
            close(fd)
            throw DaemonError(alreadyServed(path, by: describe(pid)))
        case .stale:
            guard unlink(path) == 0 || clibc_errno() == ENOENT else {
                let e = Errno.current
                close(fd)
                throw DaemonError("cannot remove the stale socket \(path): \(e.text.string)")
            }
        case .absent:
            break
        }
        return fd
    }

    /// `flock(LOCK_EX | LOCK_NB)`, retried on EINTR; false with errno set otherwise.
    private static func lockNow(_ fd: CInt) -> Bool {
        for _ in 0..<100 {
            if clibc_flock(fd, LOCK_EX | LOCK_NB) == 0 { return true }
            guard clibc_errno() == EINTR else { return false }
        }
        return false
    }

    static func alreadyServed(_ path: String, by who: String) -> String {
        "\(path) is already served by \(who): stop that daemon first, or give this one another --socket"
    }

    /// Who holds the lock: the socket's listener by SO_PEERCRED once it listens (a daemon that
    /// won a simultaneous start binds within milliseconds; waited for up to a second), else
    /// the pid the holder wrote into the lock file.
    private static func holder(of path: String, lockPath: String) -> String {
        for attempt in 0..<20 {
            if case .live(let pid)? = try? probe(path), let pid { return describe(pid) }
            if attempt < 19 { var t = timespec(tv_sec: 0, tv_nsec: 50_000_000); _ = clibc_nanosleep(&t, nil) }
        }
        let fd = clibc_open(lockPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)
        if fd >= 0 {
            defer { close(fd) }
            var bytes = [UInt8](repeating: 0, count: 16)
            let n = read(fd, &bytes, bytes.count)
            if n > 0, n <= bytes.count, let pid = Int32(String(decoding: bytes[0..<n].filter { $0 != 0x0A }, as: UTF8.self)), pid > 0 {
                return describe(pid) + ", which holds \(lockPath)"
            }
        }
        return "another pam-totpd, which holds \(lockPath)"
    }

    /// A connect to `path` (non-blocking: a full backlog answers EAGAIN at once).
    static func probe(_ path: String) throws(DaemonError) -> Probe {
        let fd = clibc_socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DaemonError("cannot tell whether \(path) is in use: socket: \(Errno.current.text.string)") }
        defer { close(fd) }
        for _ in 0..<100 {
            if clibc_connect_unix(fd, path) == 0 {
                var cred = PeerCred()
                var size = socklen_t(MemoryLayout<PeerCred>.size)
                let known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) == 0 && cred.pid > 0
                return .live(pid: known ? cred.pid : nil)
            }
            switch clibc_errno() {
            case EINTR: continue
            case ECONNREFUSED: return .stale
            case ENOENT: return .absent
            case EAGAIN, EINPROGRESS: return .live(pid: nil)
            default: throw DaemonError("cannot tell whether \(path) is in use: connect: \(Errno.current.text.string)")
            }
        }
        throw DaemonError("cannot tell whether \(path) is in use: connect: \(Errno.interrupted.text.string)")
    }

    /// "pid N (NAME)", NAME from /proc/N/comm (printable ASCII only), or "a live daemon".
    static func describe(_ pid: Int32?) -> String {
        guard let pid else { return "a live daemon (its pid unknown: its backlog is full)" }
        let fd = clibc_open("/proc/\(pid)/comm", O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { return "pid \(pid)" }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 32)
        let n = read(fd, &bytes, bytes.count)
        guard n > 0, n <= bytes.count else { return "pid \(pid)" }
        let name = bytes[0..<n].filter { $0 >= 0x20 && $0 < 0x7F }
        return name.isEmpty ? "pid \(pid)" : "pid \(pid) (\(String(decoding: name, as: UTF8.self)))"
    }
}
