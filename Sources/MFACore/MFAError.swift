/// Every failure MFACore can report. Each case maps to exactly one PAM return code in
/// PamTOTP's single `switch` (see README, "Error mapping"). Messages never contain secrets,
/// codes or the contents of a record: only what went wrong and where.
public enum MFAError: Error, Equatable, Sendable {
    /// A module argument or configuration value is unknown or out of range.
    case invalidOption(Message)
    /// Base32 text that is not a valid RFC 4648 encoding.
    case invalidBase32
    /// OTP parameters outside what we support (digits 6–8, period 1–3600 s, ...).
    case invalidParameters(Message)
    /// The user name cannot name a record (empty, too long, '/', leading '.', control bytes).
    case invalidUserName
    /// A factor label that is empty, too long or contains control characters.
    case invalidLabel
    /// The store directory or a record failed a safety check (owner, mode, type, symlink).
    case insecureStore(Message)
    /// A record exists but does not parse as a known format version.
    case corruptRecord(Message)
    /// A system call failed; `operation` names it, `errno` is the value.
    case system(operation: Message, errno: Int32)
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

/// A log-safe description of an error: never a secret, a code or record contents.
@_optimize(size)  // cold: not on a login's path
public func describe(_ error: MFAError) -> Message {
    switch error {
    case .invalidOption(let what): return "configuration error: " + what
    case .invalidBase32: return "record holds invalid Base32"
    case .invalidParameters(let what): return "invalid parameters: " + what
    case .invalidUserName: return "user name cannot be enrolled"
    case .invalidLabel: return "invalid factor label"
    case .insecureStore(let what): return "insecure store: " + what
    case .corruptRecord(let what): return "corrupt record: " + what
    case .system(let operation, let errno): return operation + " failed (errno " + decimal(errno) + ")"
    case .lockTimeout: return "timed out waiting for the record lock"
    case .clockOutOfRange: return "system clock out of range"
    case .malformed(let what): return "malformed message from pam-totpd: " + what
    case .daemon(let what): return "pam-totpd: " + what
    case .unconfirmed(let what): return "pam-totpd: " + what + " — pam-totpd did not confirm the change, so it may or may not have been made"
    }
}
