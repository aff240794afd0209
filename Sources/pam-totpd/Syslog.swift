import CLibc
import Glibc
import Logging

/// swift-log to syslog, facility authpriv, like the module (pam_syslog) and totp-enroll. Lines
/// carry what was asked and decided, never an answer, code or secret (DaemonService builds
/// them). Start-up errors also go to stderr.
struct SyslogLogHandler: LogHandler {
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider? = nil
    var logLevel: Logger.Level = .info

    static func bootstrap() {
        openlog("pam-totpd", LOG_PID, LOG_AUTHPRIV)
        LoggingSystem.bootstrap { _ in SyslogLogHandler() }
    }

    func log(event: LogEvent) {
        let priority: Int32
        switch event.level {
        case .trace, .debug: priority = LOG_DEBUG
        case .info: priority = LOG_INFO
        case .notice: priority = LOG_NOTICE
        case .warning: priority = LOG_WARNING
        case .error: priority = LOG_ERR
        case .critical: priority = LOG_CRIT
        }
        clibc_syslog(priority, event.message.description)
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}

/// One line on stderr (start-up errors, next to the syslog line).
func printError(_ text: String) {
    var line = Array(("pam-totpd: " + text + "\n").utf8)
    _ = line.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}
