import CLibc

/// The root-owned store of enrolment records: `<directory>/<user>`, one file per user.
///
/// Every access goes through a directory file descriptor opened once and checked (a directory,
/// owned by the effective uid, no group/other permissions); records are opened relative to it
/// with O_NOFOLLOW and checked with fstat (regular, same owner, mode 0600 or stricter, one
/// link, bounded size). Updates take a per-user lock file (flock with a timeout), write a temp
/// file with O_EXCL, fsync it, rename it over the record and fsync the directory, so a crash at
/// any point leaves the old record or the new one. Lock and temp names start with '.', which no
/// user name may, so they can never collide with a record.
public final class Store {
    public static let defaultDirectory: [UInt8] = Array("/var/lib/pam-totp".utf8)
    public static let maxUserNameLength = 128
    public static let defaultLockTimeoutMilliseconds = 5_000

    let directory: OwnedFD
    let owner: UInt32
    public let lockTimeoutMilliseconds: Int

    /// Opens and checks the store directory. `path` must be absolute.
    public init(path: [UInt8], lockTimeoutMilliseconds: Int = Store.defaultLockTimeoutMilliseconds) throws(MFAError) {
        guard path.first == 0x2F else { throw .invalidOption("store must be an absolute path") }
        // "link/" would resolve through a symlink despite O_NOFOLLOW: drop trailing slashes.
        var path = path
        while path.count > 1 && path.last == 0x2F { path.removeLast() }
        let fd: Int32
        do throws(MFAError) {
            fd = try withCPath(path) { (p) throws(MFAError) -> Int32 in
                try retryingOnEINTR("open store") {
                    clibc_open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0)
                }
            }
        } catch {
            if case .system(_, let e) = error, e == ELOOP || e == ENOTDIR {
                throw .insecureStore("store is a symlink or not a directory")
            }
            throw error
        }
        let owned = OwnedFD(fd)
        let st = try FileStatus(fd: fd)
        let me = UInt32(geteuid())
        guard st.isDirectory else { throw .insecureStore("store is not a directory") }
        guard st.owner == me else { throw .insecureStore("store directory has the wrong owner") }
        guard !st.groupOrOtherAccess else { throw .insecureStore("store directory is accessible to group or other") }
        self.directory = owned
        self.owner = me
        self.lockTimeoutMilliseconds = lockTimeoutMilliseconds
    }

    /// A user name names a record only if it is 1–128 printable ASCII bytes without '/' and
    /// does not start with '.'. Anything else cannot be enrolled.
    public static func validate(user: [UInt8]) throws(MFAError) {
        guard let first = user.first, first != 0x2E, user.count <= maxUserNameLength else { throw .invalidUserName }
        for c in user where c <= 0x20 || c >= 0x7F || c == 0x2F { throw .invalidUserName }
    }

    /// The user's record, or nil when the user has none.
    public func read(user: [UInt8]) throws(MFAError) -> UserRecord? {
        try Store.validate(user: user)
        guard let file = try openChecked(user, flags: O_RDONLY, what: "record") else { return nil }
        let st = try FileStatus(fd: file.raw)
        var bytes = try readBounded(file.raw, limit: UserRecord.maxSize,
                                    expected: st.size > Int64(UserRecord.maxSize) ? UserRecord.maxSize + 1 : Int(st.size))
        defer { wipe(&bytes) }
        return try UserRecord.parse(bytes)
    }

    /// Runs `body` holding the user's lock. The lock file is created on demand and never
    /// renamed or removed, so every process locks the same inode.
    public func withLock<R>(user: [UInt8], _ body: () throws(MFAError) -> R) throws(MFAError) -> R {
        try Store.validate(user: user)
        let name = Array(".lock.".utf8) + user
        let fd = try withCPath(name) { (p) throws(MFAError) -> Int32 in
            do throws(MFAError) {
                return try retryingOnEINTR("open lock") {
                    clibc_openat(directory.raw, p, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
                }
            } catch {
                if case .system(_, let e) = error, e == ELOOP { throw .insecureStore("lock file is a symlink") }
                throw error
            }
        }
        let lock = OwnedFD(fd)
        try checkFile(lock.raw, what: "lock file")
        var waited = 0
        while flock(lock.raw, LOCK_EX | LOCK_NB) != 0 {
            let e = clibc_errno()
            guard e == EWOULDBLOCK || e == EINTR else { throw .system(operation: "flock", errno: e) }
            guard waited < lockTimeoutMilliseconds else { throw .lockTimeout }
            sleepMilliseconds(10)
            waited += 10
        }
        return try body()  // closing the descriptor (OwnedFD.deinit) releases the lock
    }

    /// Atomically replaces the user's record. Takes the lock; callers that read-modify-write
    /// use `withLock` and `writeLocked` instead.
    public func write(user: [UInt8], record: UserRecord) throws(MFAError) {
        try withLock(user: user) { () throws(MFAError) in try writeLocked(user: user, record: record) }
    }

    /// Replaces the record; the caller must hold the user's lock.
    public func writeLocked(user: [UInt8], record: UserRecord) throws(MFAError) {
        try Store.validate(user: user)
        var bytes = record.serialized()
        defer { wipe(&bytes) }
        try replaceFile(user, contents: bytes)
    }

    /// Atomically replaces (or creates) `name` with `contents`: temp file with O_EXCL, fsync,
    /// renameat, fsync of the directory. The caller holds the lock that covers `name`.
    func replaceFile(_ name: [UInt8], contents: [UInt8]) throws(MFAError) {
        let temp = Array(".tmp.".utf8) + name
        try withCPath(temp) { (tp) throws(MFAError) in
            // A temp left by a crashed writer is stale: we hold the lock. Remove and retry once.
            var fd = clibc_openat(directory.raw, tp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if fd < 0 && clibc_errno() == EEXIST {
                _ = unlinkat(directory.raw, tp, 0)
                fd = clibc_openat(directory.raw, tp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            }
            if fd < 0 { throw .system(operation: "create temp file", errno: clibc_errno()) }
            let file = OwnedFD(fd)
            do throws(MFAError) {
                _ = try retryingOnEINTR("fchmod") { fchmod(file.raw, 0o600) }
                try writeAll(file.raw, contents)
                _ = try retryingOnEINTR("fsync") { fsync(file.raw) }
                try withCPath(name) { (up) throws(MFAError) in
                    _ = try retryingOnEINTR("rename") { renameat(directory.raw, tp, directory.raw, up) }
                }
            } catch {
                _ = unlinkat(directory.raw, tp, 0)
                throw error
            }
        }
        _ = try retryingOnEINTR("fsync store") { fsync(directory.raw) }
    }

    /// Deletes the user's record and state; the caller must hold the user's lock.
    public func removeLocked(user: [UInt8]) throws(MFAError) {
        try Store.validate(user: user)
        for name in [user, Store.stateName(user)] {
            try withCPath(name) { (p) throws(MFAError) in
                if unlinkat(directory.raw, p, 0) != 0 {
                    let e = clibc_errno()
                    if e != ENOENT { throw .system(operation: "unlink", errno: e) }
                }
            }
        }
        _ = try retryingOnEINTR("fsync store") { fsync(directory.raw) }
    }

    func checkFile(_ fd: Int32, what: Message) throws(MFAError) {
        let st = try FileStatus(fd: fd)
        guard st.isRegular else { throw .insecureStore(what + " is not a regular file") }
        guard st.owner == owner else { throw .insecureStore(what + " has the wrong owner") }
        guard !st.groupOrOtherAccess else { throw .insecureStore(what + " is accessible to group or other") }
        guard st.links == 1 else { throw .insecureStore(what + " has more than one link") }
    }
}
