import CLibc
import FleetStore
import MFADaemon
import MFACommandLine
import MFAPolicy
import MFASystem

/// `pam-totpd deliver --config FILE`: fleet mode's sender (docs/FLEET.md, "Text-message and
/// email codes"). Hosts never see a code: the database makes it and queues the message in its
/// outbox, which only the role pam_totp_sender reads. This command, run as root on a machine
/// the admin chooses, logs in as a member of that role (the file's postgresql = or
/// postgresql_file =), waits with LISTEN pam_totp_outbox, claims each message
/// (outbox_claim), runs the file's sms_command or email_command as pam-totp-sender exactly as
/// pam-totpd does on one host, and records how it went (outbox_done).
///
/// At most once: a claim commits before the program runs and a claimed message is never
/// handed out again, so a deliverer killed mid-send (or whose outbox_done is lost) does not
/// send that message a second time; the user asks for another code. At-least-once would mean
/// texting a code twice after every crash or lost reply, and a code nobody received costs a
/// second request, which the limits already allow for.
struct Deliver: Command {
    static let name = "deliver"
    static let abstract = "Fleet mode: send the codes the database queues (as root; the file's database role must be in pam_totp_sender)."
    static let specs: [ArgumentSpec] = [PamTOTPD.configSpec]

    let config: String?

    init(_ arguments: Arguments) throws(CommandError) { config = arguments.string("--config") }

    /// How long one wait for a notification lasts before the outbox is looked at anyway: a
    /// notification missed while reconnecting, a message left waiting by another deliverer,
    /// and every notification behind a pooler in transaction mode (PgBouncer drops them: the
    /// LISTEN's server connection is not this client's between transactions). One cheap call
    /// every 2 s keeps a send within 3 s there (docs/FLEET.md: point deliver at PostgreSQL or a
    /// session pool and the notification wakes it at once).
    static let pollMilliseconds = 2_000

    func run() throws(CommandError) {
        Logger.bootstrap()
        let logger = Logger()
        let programs: Sending.Programs
        let conninfo: String
        do throws(DaemonError) {
            guard geteuid() == 0 else { throw DaemonError("deliver must run as root (it runs the senders as \(Sending.deliveryUser))") }
            let site = try PamTOTPD.siteOptions(config)
            guard site.backend == .postgresql else {
                throw DaemonError("deliver is fleet mode's: \(config ?? "the configuration") does not say backend = postgresql")
            }
            guard let p = try Sending.Programs(site: site) else {
                throw DaemonError("deliver needs sms_command or email_command in the configuration file")
            }
            programs = p
            conninfo = try PamTOTPD.fleetConninfo(site: site, configPath: config)
        } catch {
            printError(error.text)
            logger.error("deliver: \(error.text)")
            throw .exit(1)
        }
        logger.notice("deliver: started")
        var failures = 0
        while true {
            do throws(PQError) {
                let c = try PQConnection(conninfo: conninfo, timeoutMilliseconds: 5_000, statementTimeoutMilliseconds: 10_000)
                _ = try c.execute("LISTEN pam_totp_outbox")
                if failures > 0 { Self.say(logger, "deliver: connected to the database again") }
                failures = 0
                while true {
                    while let row = try c.call("SELECT id, kind, destination, code, host, minutes FROM pam_totp_api.outbox_claim()").first {
                        Self.send(row, programs, c, logger)
                    }
                    _ = try c.waitForNotification(timeoutMilliseconds: Self.pollMilliseconds)
                }
            } catch {
                failures += 1
                if error.sqlState == SQLState.insufficientPrivilege {
                    Self.say(logger, "deliver: the database refused: \(error.message) (grant pam_totp_sender to this role)", error: true)
                    throw .exit(1)
                }
                // Said once, not every second of an outage.
                if failures == 1 { Self.say(logger, "deliver: the database: \(error.message); trying again", error: true) }
                sleep(UInt32(min(failures, 10)))
            }
        }
    }

    /// Runs the sender for one claimed message and records how it went. The code and the full
    /// destination appear in no log line.
    static func send(_ row: [String?], _ programs: Sending.Programs, _ c: PQConnection, _ logger: Logger) {
        guard row.count == 6, let id = row[0], let kind = row[1].flatMap({ FactorKind(name: Array($0.utf8)) }),
              let destination = row[2].map({ Array($0.utf8) }) else { return }
        var code = Array((row[3] ?? "").utf8)
        defer { wipe(&code) }
        let host = Array((row[4] ?? "").utf8)
        let minutes = row[5].flatMap { Int64($0) } ?? 5
        let masked = FactorData(kind: kind, destination: destination)?.masked ?? []
        let what = "message \(id) (\(String(decoding: bytes(kind.name), as: UTF8.self)) to \(String(decoding: masked, as: UTF8.self)), for \(printable(host).string))"
        let failure: SendFailure? = code.isEmpty ? SendFailure("the message has no code", started: false)
            : programs.send(kind, destination, code, minutes: minutes, host: host)
        let detail = failure.map { $0.why.string }
        do throws(PQError) {
            _ = try c.call("SELECT pam_totp_api.outbox_done($1, $2, $3)", [.text(id), .text(failure == nil ? "true" : "false"),
                                                                             detail.map { .text($0) } ?? .null])
        } catch {
            say(logger, "deliver: \(what): \(failure == nil ? "sent" : "not sent"), but the database was not told: \(error.message)", error: true)
            return
        }
        if let detail {
            say(logger, "deliver: could not send \(what): \(detail); its code is void", error: true)
        } else {
            say(logger, "deliver: sent \(what)")
        }
    }

    /// One line to syslog and standard error.
    static func say(_ logger: Logger, _ line: String, error: Bool = false) {
        if error { logger.error(line) } else { logger.info(line) }
        printError(line)
    }
}
