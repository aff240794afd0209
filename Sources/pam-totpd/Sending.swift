import CLibc
import MFADaemon
import MFAPolicy
import MFASystem

// How pam-totpd sends a code (issue "Text-message and email codes", "Delivery"): the configured
// program, run by MFADaemon's `deliver` as the delivery user, with the message built from the
// configuration's templates. DaemonService decides whether to send; this only sends.

enum Sending {
    /// The unprivileged system user every sender runs as (created by the install).
    static let deliveryUser = "pam-totp-sender"
    /// How long a sender may run before it is killed with its process group.
    static let timeoutMilliseconds = 10_000

    /// The sender for `site`'s configuration; nil when it names no program (nothing is sent).
    /// Every template is checked here, so a bad one stops pam-totpd at start, not at a login.
    static func sender(site: ModuleOptions, workers: Int) throws(DaemonError) -> CodeSender? {
        guard let programs = try Programs(site: site) else { return nil }
        let host = hostName()
        let perMinute = site.oobMaxPerMinute
        // At most half the workers wait on senders at once: logins always have the rest (rule 15).
        let concurrent = max(1, workers / 2)
        let counts = Locked<(minute: Int64, sent: Int, running: Int)>((0, 0, 0))
        return CodeSender(takeSlot: {
            let minute = Int64(time(nil)) / 60
            return counts.withLock { c in
                if c.minute != minute { c = (minute, 0, c.running) }
                guard c.sent < perMinute else { return false }
                c.sent += 1
                return true
            }
        }, send: { kind, destination, code, minutes in
            let started = counts.withLock { c -> Bool in
                guard c.running < concurrent else { return false }
                c.running += 1
                return true
            }
            guard started else { return SendFailure("too many senders running at once", started: false) }
            defer { counts.withLock { c in c.running -= 1 } }
            return programs.send(kind, destination, code, minutes: minutes, host: host)
        })
    }

    /// A configuration's sending programs and message templates (`sms_command`,
    /// `email_command`, `sms_text`, `email_subject`, `email_text`) and the delivery user: what
    /// runs a send, for pam-totpd's own logins and for `pam-totpd deliver` alike.
    struct Programs: Sendable {
        let sms: [UInt8]?
        let email: [UInt8]?
        let smsText: MessageTemplate
        let subject: MessageTemplate
        let emailText: MessageTemplate
        let uid: UInt32
        let gid: UInt32

        /// nil when `site` names no program. Checks every template, the delivery user and the
        /// programs (a regular file, root's, writable by root only: whoever could change one
        /// would read every code it sends).
        init?(site: ModuleOptions) throws(DaemonError) {
            guard site.smsCommand != nil || site.emailCommand != nil else { return nil }
            smsText = try template(site.smsText, "sms_text", needsCode: true, or: MessageTemplate.defaultSMS)
            subject = try template(site.emailSubject, "email_subject", needsCode: false, or: MessageTemplate.defaultEmailSubject)
            emailText = try template(site.emailText, "email_text", needsCode: true, or: MessageTemplate.defaultEmailText)
            guard let pw = getpwnam(deliveryUser) else {
                throw DaemonError("sms_command or email_command is set, but there is no user \(deliveryUser) to run it as "
                                  + "(make install and the package create it: useradd --system --no-create-home --shell /usr/sbin/nologin \(deliveryUser))")
            }
            uid = UInt32(pw.pointee.pw_uid)
            gid = UInt32(pw.pointee.pw_gid)
            guard uid != 0, gid != 0 else { throw DaemonError("the user \(deliveryUser) must not be root or in group root") }
            for (name, program) in [("sms_command", site.smsCommand), ("email_command", site.emailCommand)] {
                if let program, let refused = checkSenderProgram(program) {
                    throw DaemonError("\(name) \(String(decoding: program, as: UTF8.self)): \(refused.description.string)")
                }
            }
            sms = site.smsCommand
            email = site.emailCommand
        }

        /// Runs the program for `kind` with `destination` in its environment
        /// (`PAM_TOTP_DESTINATION`, never on its command line) and the message on its standard
        /// input; nil when it exited 0.
        func send(_ kind: FactorKind, _ destination: [UInt8], _ code: [UInt8], minutes: Int64, host: [UInt8]) -> SendFailure? {
            let program: [UInt8]?
            // The message holds the code: built in one buffer reserved whole before the code is
            // in it (no growth leaves a copy behind) and wiped after the send (issue 36).
            var message: [UInt8] = []
            let m = UInt64(max(minutes, 0))
            switch kind {
            case .sms:
                program = sms
                smsText.render(code: code, host: host, minutes: m, into: &message)
            case .email:
                program = email
                // The subject line, a blank line, the text: the sender writes the headers (docs/examples/email-sendmail).
                message.reserveCapacity(9 &+ subject.renderedLength(code: code, host: host, minutes: m) &+ 2
                                        &+ emailText.renderedLength(code: code, host: host, minutes: m) &+ 1)
                message.append(literal: "Subject: ")
                subject.render(code: code, host: host, minutes: m, into: &message)
                message.append(0x0A)
                message.append(0x0A)
                emailText.render(code: code, host: host, minutes: m, into: &message)
                message.append(0x0A)
            case .totp, .hotp:
                return SendFailure("not a kind that is sent", started: false)
            }
            defer { wipe(&message) }
            guard let program else {
                return SendFailure(Message(Array(bytes(kind.name))) + " codes are not sent: the configuration has no "
                                   + Message(Array(bytes(kind.name))) + "_command", started: false)
            }
            let result = deliver(program: program, kind: Array(bytes(kind.name)), destination: destination, message: message,
                                 uid: uid, gid: gid, timeoutMilliseconds: timeoutMilliseconds)
            // What the program printed may repeat the message: read by nothing after this.
            defer { wipeInPlace(result.output.bytes) }
            if result.isSent { return nil }
            var ran = true
            if case .couldNotStart = result.outcome { ran = false }
            // The program's output may repeat the destination or the message (a mailer's
            // "recipient not accepted"): both are masked out of the log line.
            let output = scrubbed(result.output.bytes, kind: kind, destination: destination, code: code)
            return SendFailure(printable(program) + " " + result.summary + (output.isEmpty ? "" : ": " + Message(output)), started: ran)
        }
    }

    /// `output` with every occurrence of `destination` replaced by its mask and of `code` by
    /// "***" (the output is already escaped for a log line; both are plain ASCII there).
    /// A number is also masked without its "+" (a gateway's "15105551234").
    static func scrubbed(_ output: [UInt8], kind: FactorKind, destination: [UInt8], code: [UInt8]) -> [UInt8] {
        let masked = FactorData(kind: kind, destination: destination)?.masked ?? []
        // The destination first (a code inside the number must not unmask part of it); the
        // copies that still hold the code are wiped (issue 36).
        var first = replacing(output, destination, with: masked)
        let plus = destination.first == 0x2B && masked.first == 0x2B
        var second = plus ? replacing(first, Array(destination.dropFirst()), with: Array(masked.dropFirst())) : []
        let out = replacing(plus ? second : first, code, with: literal("***"))
        wipe(&first)
        wipe(&second)
        return out
    }

    static func replacing(_ bytes: [UInt8], _ needle: [UInt8], with replacement: [UInt8]) -> [UInt8] {
        guard !needle.isEmpty, bytes.count >= needle.count else { return bytes }
        var out: [UInt8] = []
        // Reserved whole (at most bytes.count / needle.count replacements): no growth leaves a
        // partial copy behind.
        out.reserveCapacity(bytes.count &+ (bytes.count / needle.count &+ 1) &* replacement.count)
        var i = 0
        while i < bytes.count {
            if i + needle.count <= bytes.count && bytes[i..<(i + needle.count)].elementsEqual(needle) {
                out += replacement
                i += needle.count
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return out
    }

    static func template(_ text: [UInt8]?, _ name: String, needsCode: Bool, or fallback: MessageTemplate) throws(DaemonError) -> MessageTemplate {
        guard let text else { return fallback }
        do throws(MFAError) { return try MessageTemplate(text, needsCode: needsCode) } catch {
            throw DaemonError("\(name): \(describe(error).string)")
        }
    }
}
