import CLibc

/// A C errno value, typed once where a call failed (`Errno.current`) and carried as a value,
/// as swift-system's `Errno` is: callers compare with the names below, never with raw numbers,
/// and one property gives its text.
public struct Errno: Equatable, Sendable {
    public let rawValue: Int32

    public init(_ rawValue: Int32) { self.rawValue = rawValue }

    /// errno as the last failed call left it (read it before any other call).
    public static var current: Errno { Errno(clibc_errno()) }

    public static var interrupted: Errno { Errno(EINTR) }
    public static var wouldBlock: Errno { Errno(EAGAIN) }
    public static var noSuchFileOrDirectory: Errno { Errno(ENOENT) }
    public static var permissionDenied: Errno { Errno(EACCES) }
    public static var tooManySymbolicLinkLevels: Errno { Errno(ELOOP) }
    public static var notDirectory: Errno { Errno(ENOTDIR) }
    public static var fileExists: Errno { Errno(EEXIST) }
    public static var ioError: Errno { Errno(EIO) }
    public static var outOfRange: Errno { Errno(ERANGE) }
    public static var connectionRefused: Errno { Errno(ECONNREFUSED) }
    public static var inProgress: Errno { Errno(EINPROGRESS) }

    /// strerror's text (C locale messages), or "errno N" if there is none.
    @_optimize(size)  // cold: error text only
    public var text: Message {
        guard let text = strerror(rawValue) else { return "errno " + number }
        var bytes: [UInt8] = []
        var p = text
        while p.pointee != 0 && bytes.count < 256 {
            bytes.append(UInt8(bitPattern: p.pointee))
            p += 1
        }
        return Message(bytes)
    }

    /// The number, for log lines ("errno 28").
    public var number: Message { decimal(rawValue) }
}
