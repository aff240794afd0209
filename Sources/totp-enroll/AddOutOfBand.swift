import CLibc
import MFAImport
import MFAPamStacks
import MFACommandLine
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire

/// `totp-enroll add-phone NUMBER`: a factor whose codes pam-totpd sends by text message.
struct AddPhone: Command {
    static let name = "add-phone"
    static let abstract = "Enrol a phone number: sign-in codes sent by text message (saved after you type the code sent)."
    static let discussion = """
        NUMBER is in E.164 form: + then the country code and number, no spaces (e.g. +15105551234). \
        pam-totpd sends a code to it; the phone is saved only after you type that code back. \
        Standard message rates may apply.
        """
    static let specs: [ArgumentSpec] = [.argument("number", "The phone number, E.164 (+15105551234).")] + OutOfBandEnrolment.specs

    let enrolment: OutOfBandEnrolment
    init(_ arguments: Arguments) throws(CommandError) { enrolment = try OutOfBandEnrolment(arguments, kind: .sms, argument: "number") }
    func run() throws(CommandError) { try enrolment.run() }
}

/// `totp-enroll add-email ADDRESS`: a factor whose codes pam-totpd sends by email.
struct AddEmail: Command {
    static let name = "add-email"
    static let abstract = "Enrol an email address: sign-in codes sent by email (saved after you type the code sent)."
    static let discussion = "pam-totpd sends a code to ADDRESS; the address is saved only after you type that code back."
    static let specs: [ArgumentSpec] = [.argument("address", "The email address (name@example.com).")] + OutOfBandEnrolment.specs

    let enrolment: OutOfBandEnrolment
    init(_ arguments: Arguments) throws(CommandError) { enrolment = try OutOfBandEnrolment(arguments, kind: .email, argument: "address") }
    func run() throws(CommandError) { try enrolment.run() }
}

/// What add-phone and add-email share: checks, proof of the caller, the code sent by
/// pam-totpd (only it sends), the code typed back, one commit. A wrong code, end of input,
/// Ctrl-C, expiry or a failed send saves nothing.
struct OutOfBandEnrolment {
    static let specs: [ArgumentSpec] = TargetOptions.specs + [
        .option("--name", "NAME", "A name for this factor, shown at sign-in and by `list` (default: phone or email)."),
    ]

    let kind: FactorKind
    let channel: Channel
    let destination: [UInt8]
    let target: TargetOptions
    let name: String?

    init(_ arguments: Arguments, kind: FactorKind, argument: String) throws(CommandError) {
        self.kind = kind
        guard let channel = kind.channel else { throw CLIError("codes of this kind are not sent") }
        self.channel = channel
        destination = Array(try arguments.required(argument).utf8)
        target = TargetOptions(arguments)
        name = try newFactorName(arguments)
        // Checked first: a malformed destination is an error showing the expected form, and nothing is sent.
        do throws(MFAError) { try FactorData(kind: kind, destination: destination)?.validate() } catch { throw CLIError(error) }
    }

    func run() throws(CommandError) {
        let context = try target.context()
        let store = try context.openStore()
        let label = name ?? "\(channel.defaultLabel)"
        let factor: Factor
        do throws(MFAError) {
            factor = try Factor(outOfBand: kind, label: Array(label.utf8), destination: destination, created: Int64(time(nil)))
        } catch { throw CLIError(error) }
        try checkEnrollable(store, context, label: label, secret: nil)
        if let record = try storeCall({ () throws(MFAError) in try store.status(user: context.user) })?.record,
           record.factors.contains(where: { $0.kind == kind && $0.destination == destination }) {
            throw CLIError(MFAError.refusal(channel.taken))
        }
        // Not root: prove who you are (password, and a current code if you have a factor).
        try Proof.require(context, store: store, code: nil)

        let site = try siteOptions()
        let masked = String(decoding: factor.maskedDestination, as: UTF8.self)
        print("Sending a code by \(channel.medium) to \(masked).\(channel.countryLimited ? " Standard message rates may apply." : "")")
        let sentAt = try Self.send(factor, context: context, socket: site.socket)
        let again = "run totp-enroll \(channel.addCommand) again"
        while true {
            writeStderr("Code sent to \(masked): ")
            guard var answer = Self.readCode() else { throw CLIError("no code entered; nothing was saved") }
            defer { wipe(&answer) }
            var rng = SystemRandomNumberGenerator()
            // Checked, counted and (if right) saved in one step under the user's lock (fleet
            // mode: by the database, through pam-totpd).
            let check = try storeCall { () throws(MFAError) -> EnrolmentCheck in
                switch store {
                case .files(let files):
                    return try files.confirmEnrolment(user: context.user, accountUID: context.uid, factor: factor, sentAt: sentAt,
                                                      answer: answer, at: Int64(time(nil)), options: site, using: &rng)
                case .daemon:
                    return try Self.confirmThroughDaemon(.confirmEnrolment(user: context.user, uid: context.uid, factor: factor,
                                                                           sentAt: sentAt, answer: answer), socket: site.socket)
                }
            }
            switch check {
            case .enrolled:
                Audit.log("enrolled \(channel.defaultLabel) factor \"\(Audit.safe(label))\" (\(masked))", context: context)
                print("Enrolled \(channel.destinationNoun) \(masked) as \"\(shown(label))\" for \(context.userName).")
                return
            case .wrong(let left) where left > 0:
                warn("that is not the code sent; try again (\(left) left)")
            case .wrong:
                throw CLIError("the code did not match; nothing was saved, \(again)")
            case .expired:
                throw CLIError("the code sent has expired or was replaced; nothing was saved, \(again)")
            }
        }
    }

    /// Asks pam-totpd to send the enrolment code to `factor`: when it was sent.
    static func send(_ factor: Factor, context: CallerContext, socket: [UInt8]) throws(CommandError) -> Int64 {
        let request = AdminRequest.sendEnrolmentCode(user: context.user, uid: context.uid, factor: factor)
        guard let frame = request.encoded() else { throw CLIError("the request does not fit in a frame") }
        do throws(MFAError) {
            let reply = try AdminReply.decode(try DaemonConnection.exchange(frame, socket: socket, replyMagic: DaemonProtocol.adminReplyMagic,
                                                                              timeout: DaemonConnection.sendTimeoutMilliseconds))
            switch reply {
            case .number(let t): return t
            case .refused(let why): throw MFAError.daemon(why)
            case .failed(let e): throw e
            default: throw MFAError.malformed("unexpected reply")
            }
        } catch {
            throw CLIError("no code was sent, nothing was saved: \(CLIError.text(error))")
        }
    }

    /// The code typed back: one line of standard input without its spaces and line end; nil at
    /// end of input before any byte. Read a byte at a time into a buffer reserved whole (no
    /// growth leaves a copy behind) that the caller wipes; nothing else holds it (no String):
    /// a code must not stay in freed memory (issue 36). Bytes past `maxCodeLine` are dropped.
    static func readCode() -> [UInt8]? {
        var line: [UInt8] = []
        line.reserveCapacity(maxCodeLine)
        var byte: UInt8 = 0
        var sawAny = false
        defer { byte = 0 }
        while true {
            let n = read(0, &byte, 1)
            if n < 0 && clibc_errno() == EINTR { continue }
            guard n == 1 else { break }
            sawAny = true
            if byte == 0x0A { break }
            if byte != 0x20 && byte != 0x0D && line.count < maxCodeLine { line.append(byte) }
        }
        guard sawAny else {
            wipe(&line)
            return nil
        }
        return line
    }

    static let maxCodeLine = 256

    /// Fleet mode: pam-totpd asks the database (admin request `confirmEnrolment`).
    static func confirmThroughDaemon(_ request: AdminRequest, socket: [UInt8]) throws(MFAError) -> EnrolmentCheck {
        guard var frame = request.encoded() else { throw .invalidParameters("the request does not fit in a frame") }
        defer { wipe(&frame) }  // it holds the code typed back
        let reply = try AdminReply.decode(try DaemonConnection.exchange(frame, socket: socket, replyMagic: DaemonProtocol.adminReplyMagic))
        switch reply {
        case .number(let n):
            guard let check = EnrolmentCheck(number: n) else { throw .malformed("unexpected reply") }
            return check
        case .refused(let why): throw .daemon(why)
        case .failed(let e): throw e
        default: throw .malformed("unexpected reply")
        }
    }
}
