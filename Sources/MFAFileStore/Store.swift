import CLibc
import MFACrypto
import MFAPolicy
import MFASystem

/// The file store in the production configuration (the real system calls).
public typealias Store = FileStore<LiveSystemCalls>

/// The root-owned store of enrolment records: `<directory>/<user>`, one file per user.
///
/// Every access goes through a directory file descriptor opened once and checked (a directory,
/// owned by the effective uid, no group/other permissions); records are opened relative to it
/// with O_NOFOLLOW and checked with fstat (regular, same owner, mode 0600 or stricter, one
/// link, bounded size). Updates take a per-user lock file (flock with a timeout), write a temp
/// file with O_EXCL, fsync it, close it (checked), rename it over the record and fsync the
/// directory, so a crash at any point leaves the old record or the new one. Lock and temp
/// names start with '.', which no user name may, so they can never collide with a record.
/// Generic over its system calls so tests can make each one fail (SystemCalls).
public final class FileStore<Sys: SystemCalls> {
    public static var defaultDirectory: [UInt8] { ModuleOptions.defaultStore }
    public static var maxUserNameLength: Int { 128 }
    public static var defaultLockTimeoutMilliseconds: Int { 5_000 }

    let directory: OwnedFD<Sys>
    let owner: UInt32
    public let lockTimeoutMilliseconds: Int

    /// Opens and checks the store directory. `path` must be absolute.
    public init(path: [UInt8], lockTimeoutMilliseconds: Int = 5_000) throws(MFAError) {
        guard path.first == 0x2F else { throw .invalidOption("store must be an absolute path") }
        // "link/" would resolve through a symlink despite O_NOFOLLOW: drop trailing slashes.
        var path = path
        while path.count > 1 && path.last == 0x2F { path.removeLast() }
        let fd: Int32
        do throws(MFAError) {
            fd = try withCPath(path) { (p) throws(MFAError) -> Int32 in
                try retryingOnEINTR("open store") {
                    Sys.open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0)
                }
            }
        } catch {
            if case .system(_, let e) = error, e == .tooManySymbolicLinkLevels || e == .notDirectory {
                throw .insecureStore("store is a symlink or not a directory")
            }
            throw error
        }
        let owned = OwnedFD<Sys>(fd)
        let st = try FileStatus(Sys.self, fd: fd)
        let me = clibc_geteuid()
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
        try readWithIdentity(user: user)?.record
    }

    /// The user's record and the file it was read from, still open: while it is open its inode
    /// cannot be reused, so `isCurrent` can tell later, by identity alone, that the record was
    /// not replaced (records are only ever replaced by rename, never changed in place).
    func readWithIdentity(user: [UInt8]) throws(MFAError) -> (record: UserRecord, file: OwnedFD<Sys>, identity: FileIdentity)? {
        try Self.validate(user: user)
        guard let (file, st) = try openChecked(user, flags: O_RDONLY, what: "record") else { return nil }
        var bytes = try readBounded(Sys.self, file.raw, limit: UserRecord.maxSize,
                                    expected: st.size > Int64(UserRecord.maxSize) ? UserRecord.maxSize + 1 : Int(st.size))
        defer { wipe(&bytes) }
        return (try UserRecord.parse(bytes), file, st.identity)
    }

    /// True when `user`'s record is still the file with `identity`.
    func isCurrent(_ name: [UInt8], identity: FileIdentity) -> Bool {
        var st = stat()
        let r = (try? withCPath(name) { (p) throws(MFAError) -> Int32 in
            Sys.fstatat(directory.raw, p, &st, AT_SYMLINK_NOFOLLOW)
        }) ?? -1
        return r == 0 && FileStatus(st).identity == identity
    }

    /// Runs `body` holding the user's lock. The lock file is created on demand and never
    /// renamed or removed (except by `purge`), so every process locks the same inode.
    public func withLock<R>(user: [UInt8], _ body: () throws(MFAError) -> R) throws(MFAError) -> R {
        try Self.validate(user: user)
        return try withLockFile(Self.lockName(user), body)
    }

    /// Runs `body` holding the lock file `name` (a name starting with '.', never a user's).
    func withLockFile<R>(_ name: [UInt8], _ body: () throws(MFAError) -> R) throws(MFAError) -> R {
        var waited = 0
        while true {
            let fd = try withCPath(name) { (p) throws(MFAError) -> Int32 in
                do throws(MFAError) {
                    return try retryingOnEINTR("open lock") {
                        Sys.openat(directory.raw, p, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
                    }
                } catch {
                    if case .system(_, let e) = error, e == .tooManySymbolicLinkLevels { throw .insecureStore("lock file is a symlink") }
                    throw error
                }
            }
            let lock = OwnedFD<Sys>(fd)
            let st = try checkFile(lock.raw, what: "lock file")
            while Sys.flock(lock.raw, LOCK_EX | LOCK_NB) != 0 {
                let e = Errno.current
                guard e == .wouldBlock || e == .interrupted else { throw .system(operation: "flock", errno: e) }
                guard waited < lockTimeoutMilliseconds else { throw .lockTimeout }
                sleepMilliseconds(10)
                waited += 10
            }
            // `purge` removes the lock file: a lock taken on a removed inode excludes nobody
            // who opens the name afterwards. Only the file linked under the name counts.
            if isCurrent(name, identity: st.identity) {
                return try body()  // closing the descriptor (OwnedFD.deinit) releases the lock
            }
            waited += 10  // bounded however often the file is removed under us
            guard waited < lockTimeoutMilliseconds else { throw .lockTimeout }
        }
    }

    static func lockName(_ user: [UInt8]) -> [UInt8] {
        var name: [UInt8] = []
        name.append(literal: ".lock.")
        return name + user
    }

    /// Atomically replaces the user's record. Takes the lock; callers that read-modify-write
    /// use `withLock` and `writeLocked` instead.
    public func write(user: [UInt8], record: UserRecord) throws(MFAError) {
        try withLock(user: user) { () throws(MFAError) in try writeLocked(user: user, record: record) }
    }

    /// Replaces the record; the caller must hold the user's lock.
    public func writeLocked(user: [UInt8], record: UserRecord) throws(MFAError) {
        try Self.validate(user: user)
        var bytes = record.serialized()
        defer { wipe(&bytes) }
        try replaceFile(user, contents: bytes)
    }

    /// Atomically replaces (or creates) `name` with `contents`: temp file with O_EXCL, fsync,
    /// close, renameat, fsync of the directory. The caller holds the lock that covers `name`.
    /// The rename is the commit: a failure before it leaves the old file (and no temp file) and
    /// is reported; after it the change has happened, so the directory fsync is best effort (if
    /// it fails, a crash may bring back the old file: old or new, never a mix).
    func replaceFile(_ name: [UInt8], contents: [UInt8]) throws(MFAError) {
        var temp: [UInt8] = []
        temp.append(literal: ".tmp.")
        temp += name
        try withCPath(temp) { (tp) throws(MFAError) in
            // A temp left by a crashed writer is stale: we hold the lock. Remove and retry once.
            let flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC
            var fd = try createTemp(tp, flags: flags)
            if fd < 0 {
                _ = Sys.unlinkat(directory.raw, tp, 0)
                fd = try createTemp(tp, flags: flags)
            }
            if fd < 0 { throw .system(operation: "create temp file", errno: .fileExists) }
            let file = OwnedFD<Sys>(fd)
            do throws(MFAError) {
                _ = try retryingOnEINTR("fchmod") { Sys.fchmod(file.raw, 0o600) }
                try writeAll(Sys.self, file.raw, contents)
                _ = try retryingOnEINTR("fsync") { Sys.fsync(file.raw) }
                try file.close("close temp file")
                try withCPath(name) { (up) throws(MFAError) in
                    _ = try retryingOnEINTR("rename") { Sys.renameat(directory.raw, tp, directory.raw, up) }
                }
            } catch {
                _ = Sys.unlinkat(directory.raw, tp, 0)
                throw error
            }
        }
        syncDirectory()
    }

    /// fsync of the store directory after a commit (a rename or an unlink): best effort, since
    /// the change it makes durable has already happened and an operation that reports failure
    /// must have changed nothing.
    func syncDirectory() {
        while Sys.fsync(directory.raw) != 0 && Errno.current == .interrupted {}
    }

    /// Creates the temp file; -1 if it exists already.
    private func createTemp(_ path: UnsafePointer<CChar>, flags: Int32) throws(MFAError) -> Int32 {
        while true {
            let fd = Sys.openat(directory.raw, path, flags, 0o600)
            if fd >= 0 { return fd }
            let e = Errno.current
            if e == .interrupted { continue }
            if e == .fileExists { return -1 }
            throw .system(operation: "create temp file", errno: e)
        }
    }

    /// Deletes the user's record, then the state; the caller must hold the user's lock. The
    /// record's removal is the commit; what follows is best effort: a state left behind belongs
    /// to the removed record's id and is never applied to a new record (UserState.adopted).
    public func removeLocked(user: [UInt8]) throws(MFAError) {
        try Self.validate(user: user)
        try unlink(user)
        syncDirectory()
        try? unlink(Self.stateName(user))
        syncDirectory()
    }

    /// Removes `name` from the store; a missing file is not an error.
    func unlink(_ name: [UInt8]) throws(MFAError) {
        try withCPath(name) { (p) throws(MFAError) in
            if Sys.unlinkat(directory.raw, p, 0) != 0 {
                let e = Errno.current
                if e != .noSuchFileOrDirectory { throw .system(operation: "unlink", errno: e) }
            }
        }
    }

    @discardableResult
    func checkFile(_ fd: Int32, what: Message) throws(MFAError) -> FileStatus {
        let st = try FileStatus(Sys.self, fd: fd)
        guard st.isRegular else { throw .insecureStore(what + " is not a regular file") }
        guard st.owner == owner else { throw .insecureStore(what + " has the wrong owner") }
        guard !st.groupOrOtherAccess else { throw .insecureStore(what + " is accessible to group or other") }
        guard st.links == 1 else { throw .insecureStore(what + " has more than one link") }
        return st
    }

    /// Opens `name` in the store with O_NOFOLLOW and checks it; nil if it does not exist.
    func openChecked(_ name: [UInt8], flags: Int32, what: Message) throws(MFAError) -> (file: OwnedFD<Sys>, status: FileStatus)? {
        let fd: Int32
        do throws(MFAError) {
            fd = try withCPath(name) { (p) throws(MFAError) -> Int32 in
                try retryingOnEINTR("open " + what) {
                    Sys.openat(directory.raw, p, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0)
                }
            }
        } catch {
            if case .system(_, let e) = error {
                if e == .noSuchFileOrDirectory { return nil }
                if e == .tooManySymbolicLinkLevels { throw .insecureStore(what + " is a symlink") }
            }
            throw error
        }
        let file = OwnedFD<Sys>(fd)
        return (file, try checkFile(file.raw, what: what))
    }
}
