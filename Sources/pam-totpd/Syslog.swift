import CLibc
import MFASystem

/// Lines to syslog, facility authpriv, like the module (pam_syslog) and totp-enroll. Lines
/// carry what was asked and decided, never an answer, code or secret (DaemonService builds
/// them). Start-up errors also go to stderr.
struct Logger: Sendable {
    enum Level: Sendable {
        case info, notice, warning, error

        var priority: Int32 {
            switch self {
            case .info: return LOG_INFO
            case .notice: return LOG_NOTICE
            case .warning: return LOG_WARNING
            case .error: return LOG_ERR
            }
        }
    }

    /// Opens the log as pam-totpd's (once, before the first line). openlog keeps the pointer
    /// it is given: the name is copied to memory that lives as long as the process.
    static func bootstrap() { openlog(strdup("pam-totpd"), LOG_PID, LOG_AUTHPRIV) }

    func log(level: Level, _ line: String) { clibc_syslog(level.priority, line) }
    /// A line already in bytes (DaemonService's, one per request): made a C string here, with no
    /// String in between. A NUL inside would only end the line early (printable() escapes them).
    func log(level: Level, _ line: Message) {
        var bytes = line.bytes
        bytes.append(0)
        bytes.withUnsafeBytes { clibc_syslog(level.priority, $0.baseAddress?.assumingMemoryBound(to: CChar.self)) }
    }
    func info(_ line: String) { log(level: .info, line) }
    func notice(_ line: String) { log(level: .notice, line) }
    func warning(_ line: String) { log(level: .warning, line) }
    func error(_ line: String) { log(level: .error, line) }
}

/// One line on stderr (start-up errors, next to the syslog line).
func printError(_ text: String) {
    var line = Array(("pam-totpd: " + text + "\n").utf8)
    _ = line.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}
