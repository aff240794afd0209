import CLibc

/// Every failure the library can report. Each case maps to exactly one PAM return code in
/// PamTOTP's single `switch` (pam_totp(8), RETURN VALUES). Messages never contain secrets,
/// codes or the contents of a record: only what went wrong and where.
public enum MFAError: Error, Equatable, Sendable {
    /// A module argument or configuration value is unknown or out of range.
    case invalidOption(Message)
    /// Base32 text that is not a valid RFC 4648 encoding.
    case invalidBase32
    /// Input outside what is accepted (digits 6–8, period 1–3600 s, a file that does not
    /// parse...), said in free text; a refusal the caller can act on is `refused`.
    case invalidParameters(Message)
    /// A request refused for a named reason (`Refusal`), with the text the user is told.
    case refused(Refusal, Message)
    /// The user name cannot name a record (empty, too long, '/', leading '.', control bytes).
    case invalidUserName
    /// A factor label that is empty, too long or contains control characters.
    case invalidLabel
    /// The store directory or a record failed a safety check (owner, mode, type, symlink).
    case insecureStore(Message)
    /// A record exists but does not parse as a known format version.
    case corruptRecord(Message)
    /// A system call failed; `operation` names it, `errno` says why.
    case system(operation: Message, errno: Errno)
    /// The per-user lock could not be taken within the timeout.
    case lockTimeout
    /// The clock reads before the Unix epoch, or too far out to compute a time step.
    case clockOutOfRange
    /// A message between the module and pam-totpd that does not decode (names which).
    case malformed(Message)
    /// pam-totpd could not be asked: not running, not answering in time, or the connection
    /// broke (says which).
    case daemon(Message)
    /// A change was sent to pam-totpd (or it reported its own store unavailable) and not
    /// confirmed: it may or may not have been made. Made by DaemonStore, never sent.
    case unconfirmed(Message)
}

/// Text for errors and log lines as UTF-8 bytes. Embedded Swift cannot compare `String`s
/// without Unicode normalization tables, so messages are bytes; literals convert directly.
public struct Message: Equatable, Sendable, ExpressibleByStringLiteral {
    public var bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public init(stringLiteral value: StaticString) {
        bytes = Array(UnsafeBufferPointer(start: value.utf8Start, count: value.utf8CodeUnitCount))
    }

    public static func + (lhs: Message, rhs: Message) -> Message { Message(lhs.bytes + rhs.bytes) }

    /// For the CLI and tests (not used inside the module).
    public var string: String { String(decoding: bytes, as: UTF8.self) }
}

/// Who reads an error's text: a log line (pam_syslog, pam-totpd's log) names what failed
/// where, with errno's number; the user at a terminal (totp-enroll) is told what it means.
public enum Audience: Sendable {
    case log, user
}

/// The one text of an error, for `audience`: never a secret, a code or record contents.
@_optimize(size)  // cold: not on a login's path
public func describe(_ error: MFAError, for audience: Audience = .log) -> Message {
    let user = audience == .user
    switch error {
    case .invalidOption(let what): return user ? what : "configuration error: " + what
    case .invalidBase32:
        return user ? "the secret is not valid Base32 (RFC 4648: letters A-Z and digits 2-7)" : "record holds invalid Base32"
    case .invalidParameters(let what): return user ? what : "invalid parameters: " + what
    case .refused(_, let what): return user ? what : "refused: " + what
    case .invalidUserName: return user ? "this user name cannot be enrolled" : "user name cannot be enrolled"
    case .invalidLabel:
        return user ? "the factor name must be 1 to 64 characters without control characters" : "invalid factor label"
    case .insecureStore(let what): return (user ? "refusing an insecure store: " : "insecure store: ") + what
    case .corruptRecord(let what): return (user ? "the existing record is unreadable: " : "corrupt record: ") + what
    case .system(let operation, let errno):
        return user ? operation + " failed: " + errno.text : operation + " failed (errno " + errno.number + ")"
    case .lockTimeout: return user ? "timed out waiting for the record lock; try again" : "timed out waiting for the record lock"
    case .clockOutOfRange: return user ? "the system clock is out of range" : "system clock out of range"
    case .malformed(let what): return "malformed message from pam-totpd: " + what
    case .daemon(let what): return "pam-totpd: " + what
    case .unconfirmed(let what): return "pam-totpd: " + what + " — pam-totpd did not confirm the change, so it may or may not have been made"
    }
}

@_optimize(size)  // cold: not on a login's path
package func describeErrno(_ error: MFAError) -> Message {
    if case .system(_, let e) = error {
        if e == .tooManySymbolicLinkLevels { return ": it is a symlink" }
        return ": errno " + e.number
    }
    return ""
}
