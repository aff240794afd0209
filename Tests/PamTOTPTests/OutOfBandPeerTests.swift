import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Text-message codes end to end against real peers (issue 19):
///
/// - through gammu-smsd: the shipped example sender (docs/examples/sms-gammu, its settings
///   line pointed at the test's outbox) run by pam-totpd as `pam-totp-sender`, queueing a file
///   in the outbox of a real gammu-smsd (files service) whose phone is gammu's dummy driver;
///   the code is read back from the message gammu-smsd reports transmitted (its SentSMSPath),
///   and logs in through the real libpam;
/// - through a real OpenSSH sshd and `ssh` client driven by `expect` over keyboard-interactive:
///   an app user with a backup phone presses Enter at the first prompt, gets the text (a spool
///   sender, as in OutOfBandLoginTests), types the code and the remote command runs.
///
/// Needs root (pam-totpd, the delivery user, /etc/pam.d, sshd). Skips only when a peer program
/// (gammu-smsd, gammu-smsd-inject; sshd, ssh, expect) is not installed (make test-deps).
final class OutOfBandPeerTests: XCTestCase {
    var daemon: DaemonFixture?
    var pam: PAMFixture?
    var createdSender = false
    var gammu: Process?
    var world: SSHDWorld?
    let number = "+15105551234"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pam-totpd runs as root and the sender as pam-totp-sender")
        createdSender = try makeSenderUser()
    }

    override func tearDown() {
        if let gammu { stopProcess(gammu, grace: 5) }
        gammu = nil
        world?.cleanup()
        world = nil
        daemon?.cleanup()
        daemon = nil
        pam?.cleanup()
        pam = nil
        if createdSender { _ = try? runCommand(["userdel", "pam-totp-sender"]) }
    }

    var sender: (uid: uid_t, gid: gid_t) {
        get throws {
            let pw = try XCTUnwrap(getpwnam("pam-totp-sender"))
            return (pw.pointee.pw_uid, pw.pointee.pw_gid)
        }
    }

    /// A root-owned 0755 program in `dir` (pam-totpd refuses one anyone but root may change).
    func program(_ dir: URL, _ name: String, _ text: String) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chown(path, 0, 0), 0)
        XCTAssertEqual(chmod(path, 0o755), 0)
        return path
    }

    func read(_ path: String) -> String {
        (try? Data(contentsOf: URL(fileURLWithPath: path))).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    func files(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).sorted()
    }

    /// The last 6-digit number (a word of its own) in `text`.
    func lastCode(in text: String) -> String? {
        guard let r = try? NSRegularExpression(pattern: "\\b([0-9]{6})\\b") else { return nil }
        guard let last = r.matches(in: text, range: NSRange(text.startIndex..., in: text)).last,
              let range = Range(last.range(at: 1), in: text) else { return nil }
        return String(text[range])
    }

    // MARK: - gammu-smsd on its dummy phone

    /// A queued text file as the files service moved it to SentSMSPath: the number from its
    /// name (OUT<priority><date>_<time>_<serial>_<number>_<note>.txt), the text UTF-16 after a
    /// byte order mark (what docs/examples/sms-gammu writes).
    static func textFile(name: String, data: Data) -> SMSBackup.Entry? {
        let fields = name.split(separator: "_")
        guard name.hasSuffix(".txt"), fields.count == 5, Array(data.prefix(2)) == [0xFE, 0xFF],
              let text = String(data: data.dropFirst(2), encoding: .utf16BigEndian) else { return nil }
        return SMSBackup.Entry(number: String(fields[3]), state: "Sent", text: text)
    }

    /// A gammu .smsbackup file (what the files service keeps in SentSMSPath), one entry per
    /// `[SMSBackupNNN]` section: its number, state and text, the text decoded from its `TextNN`
    /// lines (UCS-2, big-endian hex). gammu-smsd 1.42 leaves the queued message and, after it,
    /// the transmitted one (with the network's reference) in the file: two sections, one message.
    struct SMSBackup {
        struct Entry: Equatable { var number = "", state = "", text = "" }
        var entries: [Entry] = []

        init(_ file: String) {
            var units: [UInt16] = []
            func flush() {
                if !entries.isEmpty { entries[entries.count - 1].text = String(decoding: units, as: UTF16.self) }
                units = []
            }
            for raw in file.split(whereSeparator: \.isNewline) {  // CRLF lines
                let line = raw.trimmingCharacters(in: .whitespaces)
                if line.hasPrefix("[SMSBackup") { flush(); entries.append(Entry()); continue }
                guard !entries.isEmpty, !line.hasPrefix(";"), let eq = line.firstIndex(of: "=") else { continue }
                let key = line[..<eq].trimmingCharacters(in: .whitespaces)
                let value = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
                if key == "Number" { entries[entries.count - 1].number = value.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
                if key == "State" { entries[entries.count - 1].state = value }
                if key.hasPrefix("Text"), key.count > 4, key.dropFirst(4).allSatisfy(\.isNumber) {
                    let hex = Array(value.utf8)
                    var i = 0
                    while i + 4 <= hex.count, let unit = UInt16(String(decoding: hex[i..<i + 4], as: UTF8.self), radix: 16) {
                        units.append(unit)
                        i += 4
                    }
                }
            }
            flush()
        }

        /// The text, when every section is the same message.
        var text: String? { Set(entries.map(\.text)).count == 1 ? entries[0].text : nil }
    }

    /// The shipped gammu-smsd sender, a real gammu-smsd (files service, dummy phone), a
    /// phone-only user logging in through libpam with the code from the transmitted message.
    func testATextThroughGammuSmsdOnItsDummyPhoneLogsInOnce() throws {
        for tool in ["/usr/bin/gammu-smsd", "/usr/bin/gammu-smsd-inject"] {
            guard FileManager.default.isExecutableFile(atPath: tool) else { throw XCTSkip("\(tool) is not installed (make test-deps: gammu-smsd)") }
        }
        let daemon = try DaemonFixture()
        self.daemon = daemon
        let pam = try PAMFixture()
        self.pam = pam
        let (senderUID, senderGID) = try sender

        // ROOT/gammu (0755): the configuration (0644, read by gammu-smsd-inject as the delivery
        // user), the dummy phone's directory, and the files service's folders; the outbox as the
        // example says (the delivery user's group, 2770), the rest root's.
        let g = daemon.root.appendingPathComponent("gammu")
        let phone = g.appendingPathComponent("phone"), inbox = g.appendingPathComponent("inbox")
        let outbox = g.appendingPathComponent("outbox"), sent = g.appendingPathComponent("sent")
        let errors = g.appendingPathComponent("error")
        for dir in [g, phone, inbox, outbox, sent, errors] { XCTAssertEqual(mkdir(dir.path, 0o755), 0, dir.path) }
        XCTAssertEqual(chown(outbox.path, 0, senderGID), 0)
        XCTAssertEqual(chmod(outbox.path, 0o2770), 0)
        let smsdLog = g.appendingPathComponent("smsd.log").path
        let smsdrc = g.appendingPathComponent("smsdrc").path
        try """
            [gammu]
            model = dummy
            connection = none
            device = \(phone.path)/

            [smsd]
            service = files
            logfile = \(smsdLog)
            debuglevel = 1
            inboxpath = \(inbox.path)/
            outboxpath = \(outbox.path)/
            sentsmspath = \(sent.path)/
            errorsmspath = \(errors.path)/
            commtimeout = 1
            loopsleep = 1
            statusfrequency = 0
            checksecurity = 0
            checkbattery = 0
            checksignal = 0

            """.write(toFile: smsdrc, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(smsdrc, 0o644), 0)

        // gammu-smsd in the foreground; up once it talks to the (dummy) phone.
        let smsd = Process()
        smsd.executableURL = URL(fileURLWithPath: "/usr/bin/gammu-smsd")
        smsd.arguments = ["-c", smsdrc]
        smsd.standardInput = FileHandle.nullDevice
        smsd.standardOutput = FileHandle.nullDevice
        smsd.standardError = FileHandle.nullDevice
        try smsd.run()
        gammu = smsd
        XCTAssertTrue(waitUntil(timeout: 10) { self.read(smsdLog).contains("Starting phone communication") || !smsd.isRunning },
                      read(smsdLog))
        XCTAssertTrue(smsd.isRunning, "gammu-smsd exited: \(read(smsdLog))")

        // The example as shipped, its settings line pointed at this gammu-smsd's outbox.
        let senders = daemon.root.appendingPathComponent("senders")
        XCTAssertEqual(mkdir(senders.path, 0o755), 0)
        var lines = try String(contentsOf: packageRoot.appendingPathComponent("docs/examples/sms-gammu"), encoding: .utf8)
            .components(separatedBy: "\n")
        for (key, value) in ["OUTBOX": outbox.path] {
            let i = try XCTUnwrap(lines.firstIndex { $0.hasPrefix(key + "=") }, "sms-gammu has no \(key)= line")
            lines[i] = key + "=" + value
        }
        let program = try program(senders, "sms-gammu", lines.joined(separator: "\n"))
        try "store = \(daemon.store)\nsms_command = \(program)\n".write(toFile: daemon.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
        try daemon.start()

        let s = try Store(path: Array(daemon.store.utf8))
        try s.write(user: Array("nobody".utf8), record: UserRecord(uid: 65534, factors: [
            try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array(number.utf8), created: 1_700_000_000),
        ]))
        try pam.service("gammu", ["auth required MODULE config=\(daemon.config) store=\(daemon.store) socket=\(daemon.socketPath) max_failures=100 lockout=0"])

        // What gammu-smsd transmitted: one file in SentSMSPath, once it is there.
        var message: SMSBackup?
        let conversation = Conversation(answer: nil)
        conversation.respond = { [self] prompts in
            guard prompts.last == "Code sent to +1******1234: " else { return nil }
            guard waitUntil(timeout: 15, { !files(sent).isEmpty }) else { return nil }
            usleep(200_000)  // renamed in whole, but let a slow disk settle
            message = files(sent).first.map { name in
                var backup = SMSBackup("")
                let data = FileManager.default.contents(atPath: sent.appendingPathComponent(name).path) ?? Data()
                if let entry = Self.textFile(name: name, data: data) { backup.entries = [entry] }
                return backup
            }
            return message?.text.flatMap { lastCode(in: $0) }.map { Array($0.utf8) }
        }
        let context = { [self] in "\n--- pam-totpd ---\n\(daemon.output)\n--- gammu-smsd ---\n\(read(smsdLog))" }
        XCTAssertEqual(pam.authenticate(service: "gammu", user: "nobody", conversation: conversation), PAM_SUCCESS,
                       "\(conversation.prompts)" + context())
        XCTAssertEqual(conversation.prompts, ["Code sent to +1******1234: "])
        let sms = try XCTUnwrap(message, "nothing in gammu-smsd's sent folder" + context())
        XCTAssertFalse(sms.entries.isEmpty, "no message in the sent file")
        XCTAssertEqual(Set(sms.entries.map(\.number)), [number], "sent to the number")
        XCTAssertEqual(Set(sms.entries.map(\.state)), ["Sent"])
        let text = try XCTUnwrap(sms.text, "one message: \(sms.entries)")
        XCTAssertTrue(text.contains("is your sign-in code for"), text)
        let code = try XCTUnwrap(lastCode(in: text))
        XCTAssertEqual(files(sent).count, 1, "one message: \(files(sent))")
        XCTAssertEqual(files(outbox), [], "nothing left queued")
        XCTAssertEqual(files(errors), [], "nothing failed")
        // Queued by the delivery user (the outbox file's owner, kept by gammu-smsd's rename),
        // and transmitted by gammu-smsd to the number.
        var st = stat()
        XCTAssertEqual(stat(sent.appendingPathComponent(files(sent)[0]).path, &st), 0)
        XCTAssertEqual(st.st_uid, senderUID, "queued by pam-totp-sender")
        XCTAssertTrue(read(smsdLog).contains("(total: 1) to \(number)"), read(smsdLog))

        // The same code again: refused, and nothing more is sent.
        let again = Conversation(answer: Array(code.utf8))
        XCTAssertEqual(pam.authenticate(service: "gammu", user: "nobody", conversation: again), PAM_AUTH_ERR, "\(again.prompts)")
        usleep(2_500_000)  // gammu-smsd's loop (1 s): a second message would be in sent/ by now
        XCTAssertEqual(files(sent).count + files(outbox).count, 1, "still one message: \(files(sent)) \(files(outbox))" + context())
    }

    // MARK: - sshd, keyboard-interactive

    /// The client for the sshd test (SSHDTests' with these answers; the spool in PAMTOTP_SPOOL):
    /// the password, Enter at pam_totp's first prompt, and at "Code sent to" the last 6-digit
    /// number in the spool; it prints the prompts answered (P password, E Enter, C the code).
    static let enterThenCodeScript = SSHDWorld.clientScript(answering: #"""
                -ex "Password:" { send -- "$env(PAMTOTP_PASSWORD)\r"; append seen P }
                -ex "Verification code (Enter: text message to +1******1234): " { send -- "\r"; append seen E }
                -ex "Code sent to +1******1234: " {
                    set f [open $env(PAMTOTP_SPOOL)]
                    set data [read $f]
                    close $f
                    set code [lindex [regexp -all -inline {\m[0-9]{6}\M} $data] end]
                    send -- "$code\r"
                    append seen C
                }

        """#)

    /// The shipped password stack (pam.d/sshd) in a real sshd: an app user with a backup phone
    /// types the password, Enter at the code prompt, the texted code, and gets the shell.
    func testSSHKeyboardInteractiveEnterTextsTheCodeAndItOpensTheShell() throws {
        for tool in ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/expect"] {
            guard FileManager.default.isExecutableFile(atPath: tool) else { throw XCTSkip("\(tool) is not installed (make test-deps)") }
        }
        let daemon = try DaemonFixture()
        self.daemon = daemon
        let (senderUID, senderGID) = try sender

        // The spool sender (as OutOfBandLoginTests): appends the destination, its uid, the text.
        let senders = daemon.root.appendingPathComponent("senders")
        let spoolDir = daemon.root.appendingPathComponent("spool")
        XCTAssertEqual(mkdir(senders.path, 0o755), 0)
        XCTAssertEqual(mkdir(spoolDir.path, 0o700), 0)
        XCTAssertEqual(chown(spoolDir.path, senderUID, senderGID), 0)
        let spool = spoolDir.appendingPathComponent("messages").path
        let program = try program(senders, "sms", "#!/bin/sh\n{ printf 'to %s uid %s\\n' \"$PAM_TOTP_DESTINATION\" \"$(id -u)\"; cat; printf '\\n--\\n'; } >> \(spool)\n")

        // sshd on the shipped password stack, its pam_totp line also given pam-totpd's socket;
        // pam-totpd on that stack's store (where the user's app factor was enrolled).
        let world = try SSHDWorld()
        self.world = world
        let server = try world.server("sshd", moduleArguments: "config=\(daemon.config) socket=\(daemon.socketPath)", tag: "oob")
        try "store = \(server.store.path)\nsms_command = \(program)\n".write(toFile: daemon.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
        try daemon.start()
        let user = try XCTUnwrap(world.users[.enrolled])
        let store = try Store(path: Array(server.store.path.utf8))
        var record = try XCTUnwrap(try store.read(user: Array(user.name.utf8)), "totp-enroll enrolled \(user.name)")
        XCTAssertEqual(record.factors.map(\.kind), [.totp])
        record.factors.append(try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array(number.utf8), created: 1_700_000_000))
        try store.write(user: Array(user.name.utf8), record: record)

        let script = world.root.appendingPathComponent("enter-then-code.exp")
        try Self.enterThenCodeScript.write(to: script, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["PAMTOTP_PASSWORD"] = user.password
        environment["PAMTOTP_SPOOL"] = spool
        let before = server.log().utf8.count
        let r = try runCommand(["expect", "-f", script.path, String(server.port), user.name, SSHDServer.remoteCommand, "-"],
                               environment: environment)
        let output = r.stdout + r.stderr
        let log = String(decoding: Array(server.log().utf8).dropFirst(before), as: UTF8.self)
        let context = "\n--- client ---\n\(output)\n--- sshd ---\n\(log)\n--- pam-totpd ---\n\(daemon.output)\n--- spool ---\n\(read(spool))"
        let prompts = output.components(separatedBy: "\n").last { $0.hasPrefix("EXPECT-PROMPTS:") }
            .map { String($0.dropFirst("EXPECT-PROMPTS:".count)).trimmingCharacters(in: .whitespacesAndNewlines) }
        XCTAssertEqual(prompts, "PEC", "password, Enter, the texted code" + context)
        XCTAssertTrue(output.contains("A code can be sent to you:") && output.contains("1  text message to +1******1234 (mobile)"),
                      "the choices were shown" + context)
        XCTAssertTrue(output.contains(SSHDServer.remoteOutput), "the remote command did not run" + context)
        XCTAssertEqual(r.status, 0, context)
        XCTAssertTrue(log.contains("Accepted keyboard-interactive/pam for \(user.name) from 127.0.0.1"), context)
        // One text, to the number, sent as the delivery user; its code used up.
        let messages = read(spool)
        XCTAssertEqual(messages.components(separatedBy: "\n--\n").count - 1, 1, "one message" + context)
        XCTAssertTrue(messages.hasPrefix("to \(number) uid \(senderUID)\n"), context)
        XCTAssertTrue(messages.contains("is your sign-in code for"), context)
        XCTAssertNil(try store.readState(user: Array(user.name.utf8)).pending, "the code was used" + context)
    }
}
