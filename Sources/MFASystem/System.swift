import CLibc

// The system calls the store makes, in the style of swift-system: errno is read in one place
// and thrown as a typed error, EINTR is retried in one helper, and every call goes through a
// `SystemCalls` type so tests can make any call site fail (swift-system's Mocking.swift idea).
// The store is generic over it; `LiveSystemCalls` is specialised away in the shipped module.

/// The system calls of the file store, each behaving like libc: a negative result with errno
/// set on failure. Static requirements, so a generic store pays no indirection.
public protocol SystemCalls {
    static func open(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: UInt32) -> Int32
    static func openat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: UInt32) -> Int32
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int
    static func write(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int
    static func pwrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ offset: Int64) -> Int
    static func fsync(_ fd: Int32) -> Int32
    static func fdatasync(_ fd: Int32) -> Int32
    static func renameat(_ fromDir: Int32, _ from: UnsafePointer<CChar>, _ toDir: Int32, _ to: UnsafePointer<CChar>) -> Int32
    static func unlinkat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32) -> Int32
    static func flock(_ fd: Int32, _ operation: Int32) -> Int32
    static func close(_ fd: Int32) -> Int32
    static func fstat(_ fd: Int32, _ status: UnsafeMutablePointer<stat>) -> Int32
    static func fstatat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ status: UnsafeMutablePointer<stat>, _ flags: Int32) -> Int32
    static func fchmod(_ fd: Int32, _ mode: UInt32) -> Int32
}

/// The real system calls.
public enum LiveSystemCalls: SystemCalls {
    @inline(__always) public static func open(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: UInt32) -> Int32 {
        clibc_open(path, flags, mode)
    }
    @inline(__always) public static func openat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: UInt32) -> Int32 {
        clibc_openat(dir, path, flags, mode)
    }
    @inline(__always) public static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        clibc_read(fd, buffer, count)
    }
    @inline(__always) public static func write(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
        clibc_write(fd, buffer, count)
    }
    @inline(__always) public static func pwrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ offset: Int64) -> Int {
        clibc_pwrite(fd, buffer, count, offset)
    }
    @inline(__always) public static func fsync(_ fd: Int32) -> Int32 { clibc_fsync(fd) }
    @inline(__always) public static func fdatasync(_ fd: Int32) -> Int32 { clibc_fdatasync(fd) }
    @inline(__always) public static func renameat(_ fromDir: Int32, _ from: UnsafePointer<CChar>, _ toDir: Int32,
                                                  _ to: UnsafePointer<CChar>) -> Int32 {
        clibc_renameat(fromDir, from, toDir, to)
    }
    @inline(__always) public static func unlinkat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32) -> Int32 {
        clibc_unlinkat(dir, path, flags)
    }
    @inline(__always) public static func flock(_ fd: Int32, _ operation: Int32) -> Int32 { clibc_flock(fd, operation) }
    @inline(__always) public static func close(_ fd: Int32) -> Int32 { clibc_close(fd) }
    @inline(__always) public static func fstat(_ fd: Int32, _ status: UnsafeMutablePointer<stat>) -> Int32 {
        clibc_fstat(fd, status)
    }
    @inline(__always) public static func fstatat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ status: UnsafeMutablePointer<stat>,
                                                 _ flags: Int32) -> Int32 {
        clibc_fstatat(dir, path, status, flags)
    }
    @inline(__always) public static func fchmod(_ fd: Int32, _ mode: UInt32) -> Int32 { clibc_fchmod(fd, mode) }
}

/// Runs `body` until it does not fail with EINTR; returns its result or throws with errno.
/// The operation's name is built only for an error (no allocation on the login path).
@inline(__always)
package func retryingOnEINTR(_ operation: @autoclosure () -> Message, _ body: () -> Int32) throws(MFAError) -> Int32 {
    while true {
        let r = body()
        if r >= 0 { return r }
        let e = Errno.current
        if e != .interrupted { throw .system(operation: operation(), errno: e) }
    }
}

/// Calls `body` with a NUL-terminated copy of `bytes`; refuses bytes that contain NUL.
package func withCPath<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws(MFAError) -> R) throws(MFAError) -> R {
    if bytes.contains(0) { throw .invalidOption("path contains NUL") }
    var z = bytes
    z.append(0)
    return try z.withUnsafeBufferPointer { (buf) throws(MFAError) -> R in
        guard let base = buf.baseAddress else { throw .invalidOption("empty path") }
        return try base.withMemoryRebound(to: CChar.self, capacity: buf.count) { (p) throws(MFAError) -> R in
            try body(p)
        }
    }
}

/// Which file a descriptor or name refers to: two names with the same identity are one file.
package struct FileIdentity: Equatable {
    package var device: UInt64
    package var inode: UInt64
}

/// File type and permission facts from fstat(2).
package struct FileStatus {
    package var mode: UInt32
    package var owner: UInt32
    package var links: UInt64
    package var size: Int64
    package var identity: FileIdentity

    package var isRegular: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
    package var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
    /// Any permission bit for group or other.
    package var groupOrOtherAccess: Bool { mode & 0o077 != 0 }

    package init(_ st: stat) {
        mode = UInt32(st.st_mode)
        owner = UInt32(st.st_uid)
        links = UInt64(st.st_nlink)
        size = Int64(st.st_size)
        identity = FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    package init<Sys: SystemCalls>(_: Sys.Type, fd: Int32) throws(MFAError) {
        var st = stat()
        _ = try retryingOnEINTR("fstat") { Sys.fstat(fd, &st) }
        self.init(st)
    }
}

/// A descriptor closed on every path out of a scope (or earlier, checked, by `close()`).
package final class OwnedFD<Sys: SystemCalls> {
    package private(set) var raw: Int32
    package init(_ raw: Int32) { self.raw = raw }

    /// Closes now and reports a failure (NFS and some filesystems report write errors only
    /// here). EINTR still closed the descriptor on Linux, so it is not an error.
    package func close(_ operation: Message) throws(MFAError) {
        let fd = raw
        raw = -1
        if Sys.close(fd) != 0 {
            let e = Errno.current
            if e != .interrupted { throw .system(operation: operation, errno: e) }
        }
    }

    deinit { if raw >= 0 { _ = Sys.close(raw) } }
}

package func sleepMilliseconds(_ ms: Int) {
    var ts = timespec(tv_sec: 0, tv_nsec: ms * 1_000_000)
    var rem = timespec()
    while clibc_nanosleep(&ts, &rem) != 0 && Errno.current == .interrupted { ts = rem }
}

/// Writes all of `bytes` (at the file offset, or with pwrite at `offset`), retrying short
/// writes and EINTR.
package func writeAll<Sys: SystemCalls>(_: Sys.Type, _ fd: Int32, _ bytes: [UInt8], at offset: Int? = nil) throws(MFAError) {
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBytes { buf -> Int in
            guard let base = buf.baseAddress else { return 0 }
            if let offset { return Sys.pwrite(fd, base + done, buf.count - done, Int64(offset + done)) }
            return Sys.write(fd, base + done, buf.count - done)
        }
        if n < 0 {
            let e = Errno.current
            if e == .interrupted { continue }
            throw .system(operation: offset == nil ? "write" : "pwrite", errno: e)
        }
        if n == 0 { throw .system(operation: "write", errno: .ioError) }
        done += n
    }
}

/// Reads the whole file, at most `limit` bytes; throws `corruptRecord` if it holds more.
/// `expected` (the size fstat reported) sizes the buffer, so a small record costs a small
/// buffer; a file that grows while we read is still cut off at `limit`. The buffer is not
/// zeroed first: only the bytes read become the array (zeroing 4 KB per login is measurable).
package func readBounded<Sys: SystemCalls>(_: Sys.Type, _ fd: Int32, limit: Int, expected: Int) throws(MFAError) -> [UInt8] {
    if expected > limit || limit < 0 { throw .corruptRecord("record too large") }
    // One byte more than fstat said, to see whether the file grew since; rarely, the rest is
    // read in chunks, never past limit + 1 bytes.
    let capacity = min(max(expected, 0), limit) + 1
    var failure: Errno? = nil
    func readInto(_ base: UnsafeMutableRawPointer, _ room: Int) -> Int {
        var total = 0
        while total < room {
            let n = Sys.read(fd, base + total, room - total)
            if n < 0 {
                let e = Errno.current
                if e == .interrupted { continue }
                failure = e
                break
            }
            if n == 0 { break }
            total += n
        }
        return total
    }
    var out = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
        initialized = buffer.baseAddress.map { readInto($0, capacity) } ?? 0
    }
    var filled = out.count == capacity
    while failure == nil && filled && out.count <= limit {
        let room = min(out.count, limit + 1 - out.count)
        let more = [UInt8](unsafeUninitializedCapacity: room) { buffer, initialized in
            initialized = buffer.baseAddress.map { readInto($0, room) } ?? 0
        }
        out += more
        filled = more.count == room
    }
    if let failure {
        wipe(&out)
        throw .system(operation: "read", errno: failure)
    }
    if out.count > limit { wipe(&out); throw .corruptRecord("record too large") }
    return out
}
