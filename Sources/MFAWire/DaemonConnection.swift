import CLibc
import MFAPolicy
import MFASystem

// Talking to pam-totpd (docs/ARCHITECTURE.md, section 5.2): one connection per request, no threads, and
// connect + send + reply bounded by one deadline. Shared by the module (its `authenticate` and
// `lookup` requests) and totp-enroll (AdminProtocol). Every failure is a `.daemon` error, which
// the module turns into PAM_AUTHINFO_UNAVAIL.

public enum DaemonConnection {
    /// The whole exchange, connect to the last reply byte.
    public static let timeoutMilliseconds: Int64 = 5_000
    /// A request that sends a code: pam-totpd waits for the user's lock (up to 5 s) and then
    /// for the sender (up to 10 s).
    public static let sendTimeoutMilliseconds: Int64 = 20_000

    /// Sends `frame` to the daemon listening on `path` and returns its whole reply frame, which
    /// starts with `replyMagic` (DaemonProtocol's, or AdminProtocol's). Only root's listener is
    /// spoken to: a socket in a directory others can write could otherwise be anyone's,
    /// collecting codes and secrets and answering "success".
    public static func exchange(_ frame: [UInt8], socket path: [UInt8], replyMagic: [UInt8],
                                timeout: Int64 = timeoutMilliseconds) throws(MFAError) -> [UInt8] {
        var sent = false
        return try exchange(frame, socket: path, replyMagic: replyMagic, sent: &sent, timeout: timeout)
    }

    /// `exchange`, telling the caller whether the whole request had been sent when it failed:
    /// after that the daemon may have carried it out even though no reply came.
    public static func exchange(_ frame: [UInt8], socket path: [UInt8], replyMagic: [UInt8],
                                sent: inout Bool, timeout: Int64 = timeoutMilliseconds) throws(MFAError) -> [UInt8] {
        sent = false
        let deadline = clibc_monotonic_ms() + min(max(timeout, 1), sendTimeoutMilliseconds)
        let fd = clibc_socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .daemon("cannot create a socket (errno " + Errno.current.number + ")") }
        defer { _ = clibc_close(fd) }
        try connect(fd, path, deadline: deadline)
        let owner = clibc_peer_uid(fd)
        guard owner == 0 else {
            throw .daemon("refusing " + printable(path) + ": its listener runs as uid "
                          + (owner < 0 ? "unknown" : decimal(owner)) + ", not root")
        }
        try sendAll(fd, frame, deadline: deadline)
        sent = true
        var header = try receive(fd, count: DaemonProtocol.headerSize, deadline: deadline)
        guard let total = DaemonProtocol.frameLength(header: header, magic: replyMagic) else { throw .malformed("reply header") }
        header += try receive(fd, count: total - DaemonProtocol.headerSize, deadline: deadline)
        return header
    }

    /// Connects, retrying while the daemon's backlog is full (EAGAIN on a non-blocking Unix socket).
    private static func connect(_ fd: Int32, _ path: [UInt8], deadline: Int64) throws(MFAError) {
        var cPath = path
        cPath.append(0)
        while true {
            let rc = cPath.withUnsafeBufferPointer { p -> Int32 in
                guard let base = p.baseAddress else { return -1 }
                return base.withMemoryRebound(to: CChar.self, capacity: p.count) { clibc_connect_unix(fd, $0) }
            }
            if rc == 0 { return }
            let e = Errno.current
            if e == .interrupted { continue }
            if e == .wouldBlock || e == .inProgress {
                guard clibc_monotonic_ms() < deadline else { throw .daemon("timed out connecting to " + printable(path)) }
                _ = clibc_poll(nil, 0, 10)  // back off 10 ms: the backlog is full
                continue
            }
            if e == .noSuchFileOrDirectory || e == .connectionRefused {
                throw .daemon("not running: cannot connect to " + printable(path) + " (errno " + e.number + ")")
            }
            throw .daemon("cannot connect to " + printable(path) + " (errno " + e.number + ")")
        }
    }

    /// Waits until `fd` is ready for `events` or the deadline passes.
    private static func wait(_ fd: Int32, _ events: Int16, deadline: Int64, doing what: Message) throws(MFAError) {
        while true {
            let left = deadline - clibc_monotonic_ms()
            guard left > 0 else { throw .daemon("no reply within 5 s (" + what + ")") }
            var p = pollfd(fd: fd, events: events, revents: 0)
            let rc = clibc_poll(&p, 1, Int32(min(left, 5_000)))
            if rc > 0 { return }
            if rc < 0, case let e = Errno.current, e != .interrupted { throw .daemon(what + " failed (errno " + e.number + ")") }
        }
    }

    private static func sendAll(_ fd: Int32, _ bytes: [UInt8], deadline: Int64) throws(MFAError) {
        var offset = 0
        while offset < bytes.count {
            try wait(fd, Int16(POLLOUT), deadline: deadline, doing: "sending")
            let n = bytes.withUnsafeBufferPointer { p -> Int in
                guard let base = p.baseAddress else { return -1 }
                return clibc_send(fd, base + offset, p.count - offset)
            }
            if n > 0 { offset += n; continue }
            let e = Errno.current
            if n < 0 && (e == .interrupted || e == .wouldBlock) { continue }
            throw .daemon("connection lost while sending (errno " + e.number + ")")
        }
    }

    private static func receive(_ fd: Int32, count: Int, deadline: Int64) throws(MFAError) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count)
        var chunk = [UInt8](repeating: 0, count: 512)
        while out.count < count {
            try wait(fd, Int16(POLLIN), deadline: deadline, doing: "reading the reply")
            let want = min(chunk.count, count - out.count)
            let n = chunk.withUnsafeMutableBufferPointer { p -> Int in
                guard let base = p.baseAddress else { return -1 }
                return clibc_read(fd, base, want)
            }
            if n > 0 { out.append(contentsOf: chunk[0..<min(n, want)]); continue }
            if n == 0 { throw .daemon("closed the connection without a reply") }
            let e = Errno.current
            if e == .interrupted || e == .wouldBlock { continue }
            throw .daemon("connection lost while reading (errno " + e.number + ")")
        }
        return out
    }
}
