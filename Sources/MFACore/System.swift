import CLibc

// Thin wrappers over the libc calls the store needs, in the style of swift-system: errno is
// read in one place and thrown as a typed error, EINTR is retried in one helper.

/// Runs `body` until it does not fail with EINTR; returns its result or throws with errno.
@inline(__always)
func retryingOnEINTR(_ operation: Message, _ body: () -> Int32) throws(MFAError) -> Int32 {
    while true {
        let r = body()
        if r >= 0 { return r }
        let e = clibc_errno()
        if e != EINTR { throw .system(operation: operation, errno: e) }
    }
}

/// Calls `body` with a NUL-terminated copy of `bytes`; refuses bytes that contain NUL.
func withCPath<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws(MFAError) -> R) throws(MFAError) -> R {
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

/// File type and permission facts from fstat(2).
struct FileStatus {
    var mode: UInt32
    var owner: UInt32
    var links: UInt64
    var size: Int64

    var isRegular: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
    var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
    /// Any permission bit for group or other.
    var groupOrOtherAccess: Bool { mode & 0o077 != 0 }

    init(fd: Int32) throws(MFAError) {
        var st = stat()
        _ = try retryingOnEINTR("fstat") { fstat(fd, &st) }
        mode = UInt32(st.st_mode)
        owner = UInt32(st.st_uid)
        links = UInt64(st.st_nlink)
        size = Int64(st.st_size)
    }
}

/// Closes on every path out of a scope.
final class OwnedFD {
    let raw: Int32
    init(_ raw: Int32) { self.raw = raw }
    deinit { _ = close(raw) }
}

func sleepMilliseconds(_ ms: Int) {
    var ts = timespec(tv_sec: 0, tv_nsec: ms * 1_000_000)
    var rem = timespec()
    while nanosleep(&ts, &rem) != 0 && clibc_errno() == EINTR { ts = rem }
}

/// Writes all of `bytes` (at the file offset, or with pwrite at `offset`), retrying short
/// writes and EINTR.
func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int? = nil) throws(MFAError) {
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBufferPointer { buf -> Int in
            guard let base = buf.baseAddress else { return 0 }
            if let offset { return pwrite(fd, base + done, buf.count - done, off_t(offset + done)) }
            return write(fd, base + done, buf.count - done)
        }
        if n < 0 {
            let e = clibc_errno()
            if e == EINTR { continue }
            throw .system(operation: "write", errno: e)
        }
        if n == 0 { throw .system(operation: "write", errno: EIO) }
        done += n
    }
}

/// Reads the whole file, at most `limit` bytes; throws `corruptRecord` if it holds more.
/// `expected` (the size fstat reported) sizes the buffer, so a small record costs a small
/// buffer; a file that grows while we read is still cut off at `limit`.
func readBounded(_ fd: Int32, limit: Int, expected: Int) throws(MFAError) -> [UInt8] {
    if expected > limit { throw .corruptRecord("record too large") }
    var out = [UInt8](repeating: 0, count: max(expected, 0) + 1)
    var total = 0
    while true {
        if total == out.count {
            if out.count > limit { break }
            out += [UInt8](repeating: 0, count: min(out.count, limit + 1 - out.count))
        }
        let n = out.withUnsafeMutableBufferPointer { buf -> Int in
            guard let base = buf.baseAddress else { return 0 }
            return read(fd, base + total, buf.count - total)
        }
        if n < 0 {
            let e = clibc_errno()
            if e == EINTR { continue }
            wipe(&out)
            throw .system(operation: "read", errno: e)
        }
        if n == 0 { break }
        total += n
    }
    if total > limit { wipe(&out); throw .corruptRecord("record too large") }
    out.removeLast(out.count - total)  // shrinks in place: no copy of the contents
    return out
}
