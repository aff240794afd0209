import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Text-message and email codes end to end: the shipped module through the real libpam
/// (pam_start_confdir) and pamtester, pam-totpd sending through a real program run as the
/// delivery user (a spool sender that appends the destination and the message to a file),
/// totp-enroll add-phone with verify before commit.
final class OutOfBandLoginTests: XCTestCase {
    var daemon: DaemonFixture!
    var pam: PAMFixture!
    var senders: SenderSpool!
    var spool: String { senders.path }
    var service = ""
    let number = "+15105551234"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pam-totpd runs as root and the sender as pam-totp-sender")
        daemon = try DaemonFixture()
        pam = try PAMFixture()
        senders = try SenderSpool(in: daemon.root)
        try writeSender("failing-sms", "#!/bin/sh\necho 'gateway says no' >&2\nexit 3\n")
        try writeConfig(sms: "sms")
        service = "pam_totp_oob_\(getpid())"
    }

    override func tearDown() {
        daemon?.cleanup()
        pam?.cleanup()
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        senders?.cleanup()
    }

    func writeSender(_ name: String, _ text: String) throws { try senders.writeSender(name, text) }

    func writeConfig(sms: String, extra: String = "") throws {
        try "store = \(daemon.store)\nsms_command = \(daemon.root.path)/senders/\(sms)\n\(extra)"
            .write(toFile: daemon.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
    }

    /// Enrols `user` (bound to `uid`) with a phone and, if `app`, an app factor.
    func enrolPhone(_ user: String, uid: uid_t, app: [UInt8]? = nil) throws {
        let s = try Store(path: Array(daemon.store.utf8))
        var factors = [try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array(number.utf8), created: 1_700_000_000)]
        if let app { factors.insert(try Factor(label: Array("app".utf8), parameters: .default, created: 1_700_000_000, secret: app), at: 0) }
        try s.write(user: Array(user.utf8), record: UserRecord(uid: UInt32(uid), factors: factors))
    }

    var messages: String { senders.messages }
    func lastCode() -> String? { senders.lastCode }

    func line(_ extra: String = "") -> String {
        "auth required MODULE config=\(daemon.config) store=\(daemon.store) socket=\(daemon.socketPath) max_failures=100 lockout=0 \(extra)"
    }

    // MARK: In process (root: sshd, login, su, sudo)

    /// A user whose only factor is a phone: the code is sent at once, the prompt says where,
    /// and the code logs in once.
    func testAPhoneOnlyUserGetsTheCodeAtOnceAndItLogsInOnce() throws {
        try daemon.start()
        try enrolPhone("nobody", uid: 65534)
        try pam.service("oob", [line()])
        let conversation = Conversation(answer: nil)
        conversation.respond = { [self] prompts in prompts.last?.hasPrefix("Code sent to +1******1234") == true ? lastCode().map { Array($0.utf8) } : nil }
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: conversation), PAM_SUCCESS, daemon.output + messages)
        XCTAssertEqual(conversation.prompts, ["Code sent to +1******1234: "])
        let pw = try XCTUnwrap(getpwnam("pam-totp-sender"))
        XCTAssertTrue(messages.hasPrefix("to \(number) uid \(pw.pointee.pw_uid)\n"), "sent to the number, as the delivery user: \(messages)")
        XCTAssertTrue(messages.contains("is your sign-in code for"), messages)
        let code = try XCTUnwrap(lastCode())
        // The same code again: refused (single use); within the resend interval nothing new is sent.
        let again = Conversation(answer: Array(code.utf8))
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: again), PAM_AUTH_ERR)
        XCTAssertTrue(again.prompts.contains { $0.contains("wait") }, "\(again.prompts)")
        XCTAssertEqual(messages.components(separatedBy: "\n--\n").count - 1, 1, "one message: \(messages)")
        XCTAssertEqual(try daemon.state("nobody").failures, 0, "a refused send counts nothing against the user")
    }

    /// Issue 36 (the fourth review): a destination is limited whoever asks. Three accounts with
    /// one number, each under its own limits, get 2 messages to it in all with
    /// `oob_destination_max_per_hour = 2`; the third is refused with a reason, nothing counted
    /// against that user. With `oob_allowed_prefixes = +44` a +1 number is sent nothing.
    func testADestinationIsLimitedWhateverTheAccount() throws {
        try writeConfig(sms: "sms", extra: "oob_destination_max_per_hour = 2\n")
        try daemon.start()
        for (user, uid) in [("nobody", 65534), ("daemon", 1), ("bin", 2)] { try enrolPhone(user, uid: uid_t(uid)) }
        try pam.service("oob", [line()])
        var prompts: [String: [String]] = [:]
        for user in ["nobody", "daemon", "bin"] {
            let c = Conversation(answer: nil)
            c.respond = { _ in Array("000000".utf8) }
            XCTAssertEqual(pam.authenticate(service: "oob", user: user, conversation: c), PAM_AUTH_ERR)
            prompts[user] = c.prompts
        }
        XCTAssertEqual(messages.components(separatedBy: "\n--\n").count - 1, 2, "messages to the one number: \(messages)")
        XCTAssertTrue(prompts["bin"]?.contains { $0.contains("at most 2 codes are sent to one number an hour") } == true,
                      "\(prompts["bin"] ?? [])\n" + daemon.output)
        XCTAssertEqual(try daemon.state("bin").failures, 0, "a refused send counts nothing against the user")
        // Nothing about the number in the store but its key.
        let ledger = try String(contentsOfFile: daemon.store + "/.sends", encoding: .utf8)
        XCTAssertEqual(ledger.split(separator: "\n").count, 2)
        XCTAssertFalse(ledger.contains("5105551234"), ledger)

    }

    /// `oob_allowed_prefixes = +44 +353`: a +1 number is sent nothing, with the reason.
    func testTextMessagesGoOnlyToTheAllowedPrefixes() throws {
        try writeConfig(sms: "sms", extra: "oob_allowed_prefixes = +44 +353\n")
        try daemon.start()
        try enrolPhone("nobody", uid: 65534)
        try pam.service("oob", [line()])
        let c = Conversation(answer: nil)
        c.respond = { _ in Array("000000".utf8) }
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertTrue(c.prompts.contains { $0.contains("text messages are not sent to that country from here") }, "\(c.prompts)")
        XCTAssertEqual(messages, "", "nothing sent")
    }

    /// An app user with a phone as backup: Enter sends a text; an app code needs none.
    func testEnterTextsTheBackupPhoneAndAnAppCodeSendsNothing() throws {
        try daemon.start()
        let secret = randomTOTPSecret()
        try enrolPhone("nobody", uid: 65534, app: secret)
        try pam.service("oob", [line("oob_resend_interval=0")])
        awayFromStepBoundary()
        let byApp = Conversation(answer: Array(try codeNow(secret).utf8))
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: byApp), PAM_SUCCESS)
        XCTAssertTrue(messages.isEmpty, "an app code sends nothing: \(messages)")
        XCTAssertEqual(byApp.prompts.last, "Verification code (Enter: text message to +1******1234): ")
        XCTAssertTrue(byApp.prompts.contains("A code can be sent to you:\n  1  text message to +1******1234 (mobile)"), "\(byApp.prompts)")
        let byText = Conversation(answer: nil)
        byText.respond = { [self] prompts in
            guard let last = prompts.last else { return nil }
            if last.hasPrefix("Verification code (Enter") { return [] }  // Enter
            return last.hasPrefix("Code sent to") ? lastCode().map { Array($0.utf8) } : nil
        }
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: byText), PAM_SUCCESS, daemon.output)
        XCTAssertEqual(byText.prompts.last, "Code sent to +1******1234: ")
    }

    /// A host whose configuration names no sender offers no phone: the plain question, and
    /// nothing sent (and through pam-totpd, no look-up before it).
    func testNothingIsOfferedWhereNoSenderIsConfigured() throws {
        try daemon.start()
        let secret = randomTOTPSecret()
        try enrolPhone("nobody", uid: 65534, app: secret)
        let plain = daemon.root.appendingPathComponent("plain.conf").path
        try "store = \(daemon.store)\n".write(toFile: plain, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(plain, 0o644), 0)
        try pam.service("plain", [line().replacingOccurrences(of: "config=\(daemon.config)", with: "config=\(plain)")])
        awayFromStepBoundary()
        let c = Conversation(answer: Array(try codeNow(secret).utf8))
        XCTAssertEqual(pam.authenticate(service: "plain", user: "nobody", conversation: c), PAM_SUCCESS)
        XCTAssertEqual(c.prompts, ["Verification code: "])
        XCTAssertTrue(messages.isEmpty)
    }

    /// Three wrong answers void a sent code; each is a failure like a wrong app code; an
    /// expired code is refused (faketime moves the module's clock past its lifetime).
    func testWrongAnswersVoidTheCodeAndCountAsFailures() throws {
        try daemon.start()
        try enrolPhone("nobody", uid: 65534)
        try pam.service("oob", [line()])
        // Send one, answer wrong: the conversation gives "000000" unless it is the code.
        var code = ""
        for attempt in 1...3 {
            let c = Conversation(answer: nil)
            c.respond = { [self] _ in
                code = lastCode() ?? ""
                return Array((code == "000000" ? "111111" : "000000").utf8)
            }
            XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: c), PAM_AUTH_ERR)
            XCTAssertEqual(try daemon.state("nobody").failures, UInt32(attempt))
        }
        XCTAssertNil(try daemon.state("nobody").pending, "void after three wrong answers")
        let late = Conversation(answer: Array(code.utf8))
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: late), PAM_AUTH_ERR,
                       "the voided code is refused (and within the resend interval no new one is sent)")
    }

    /// A sender that fails: the user is told to use another factor, the login is denied, and
    /// nothing is counted against them.
    func testAFailedSendDeniesWithAClearMessageAndCountsNothing() throws {
        try writeConfig(sms: "failing-sms")
        let capture = try SyslogCapture(scratch: daemon.root)
        try daemon.start(launcher: capture.wrap([]))
        try enrolPhone("nobody", uid: 65534)
        try pam.service("oob", [line()])
        let c = Conversation(answer: Array("123456".utf8))
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertTrue(c.prompts.contains("could not send a code: use your app or a recovery code\nTry again later, or ask your administrator."),
                      "a phone-only user is told what is left to do: \(c.prompts)")
        XCTAssertFalse(c.prompts.contains { $0.hasPrefix("Code sent") }, "\(c.prompts)")
        let state = try daemon.state("nobody")
        XCTAssertEqual(state.failures, 0, "nothing counted against the user")
        XCTAssertNil(state.pending, "the code is void")
        XCTAssertEqual(state.sends.count, 1, "the program ran: the send counts toward the limits")
        let log = capture.stop().joined(separator: "\n")
        XCTAssertTrue(log.contains("could not send a code (sms factor mobile, +1******1234): ") && log.contains("exited with status 3: gateway says no"),
                      log)
        XCTAssertFalse(log.contains(number), "the full number is never logged")
    }

    /// factor_kinds: a phone is neither offered nor accepted where the policy allows only app codes.
    func testAKindThePolicyDoesNotAllowIsNeitherOfferedNorAccepted() throws {
        try daemon.start()
        try enrolPhone("nobody", uid: 65534)
        try pam.service("oob", [line("factor_kinds=totp")])
        let c = Conversation(answer: Array("123456".utf8))
        XCTAssertEqual(pam.authenticate(service: "oob", user: "nobody", conversation: c), PAM_AUTH_ERR)
        XCTAssertEqual(c.prompts, ["None of your factors may be used here."])
        XCTAssertTrue(messages.isEmpty)
    }

    /// The shipped stacks (pam.d/sshd, su, sudo, login: "@include common-auth", then pam_totp)
    /// end on a wrong password before pam_totp runs: a wrong password sends nothing, the right
    /// one then gets the code.
    func testAWrongPasswordSendsNothingInTheShippedStacks() throws {
        try daemon.start()
        let user = try ThrowawayAccount(prefix: "toobpw")
        defer { user.delete() }
        try enrolPhone(user.name, uid: user.uid)
        let commonAuth = try String(contentsOfFile: "/etc/pam.d/common-auth", encoding: .utf8)
        try commonAuth.write(to: pam.confdir.appendingPathComponent("common-auth"), atomically: true, encoding: .utf8)
        for stack in ["sshd", "su", "sudo", "login"] {
            // sshd's file is the stack itself; su, sudo and login's say to add the line right
            // after "@include common-auth" in Debian's file: that stack, as documented.
            var shipped = try String(contentsOf: packageRoot.appendingPathComponent("pam.d/" + stack), encoding: .utf8)
            if !shipped.contains("\n@include common-auth\n") {
                XCTAssertTrue(shipped.contains("AFTER") && shipped.contains("\"@include common-auth\""), stack)
                shipped = "@include common-auth\n" + shipped.split(separator: "\n").filter { !$0.hasPrefix("#") }.joined(separator: "\n") + "\n"
            }
            XCTAssertTrue(shipped.contains("@include common-auth\nauth required pam_totp.so\n"), "\(stack): \(shipped)")
            let text = shipped.replacingOccurrences(of: "auth required pam_totp.so",
                                                    with: "auth required \(moduleURL.path) config=\(daemon.config) store=\(daemon.store) socket=\(daemon.socketPath) oob_resend_interval=0")
            try text.write(to: pam.confdir.appendingPathComponent("oob-" + stack), atomically: true, encoding: .utf8)
            let wrong = Conversation(answer: Array("not the password".utf8))
            XCTAssertEqual(pam.authenticate(service: "oob-" + stack, user: user.name, conversation: wrong), PAM_AUTH_ERR, stack)
            XCTAssertTrue(messages.isEmpty, "\(stack): a wrong password sent a code: \(messages)")
            XCTAssertFalse(wrong.prompts.contains { $0.hasPrefix("Code sent") }, "\(stack): \(wrong.prompts)")
        }
        let right = Conversation(answer: nil)
        right.respond = { [self] prompts in
            guard let last = prompts.last else { return nil }
            return last.hasPrefix("Code sent to") ? lastCode().map { Array($0.utf8) } : Array(user.password.utf8)
        }
        XCTAssertEqual(pam.authenticate(service: "oob-sshd", user: user.name, conversation: right), PAM_SUCCESS, "\(right.prompts)")
        XCTAssertEqual(right.prompts.last, "Code sent to +1******1234: ")
    }

    // MARK: Many processes, one code; a caller without root

    /// One code sent, then 20 logins at once (other terminals) each asked for that code again:
    /// exactly one is accepted.
    func testTwentyConcurrentLoginsWithOneSentCodeAcceptExactlyOne() throws {
        try daemon.start()
        try enrolPhone("nobody", uid: 65534)
        // The first login sends the code and then its conversation fails: nothing counted.
        try pam.service("oob", [line()])
        let first = Conversation(answer: nil)
        first.respond = { _ in nil }
        first.fail = false
        XCTAssertNotEqual(pam.authenticate(service: "oob", user: "nobody", conversation: first), PAM_SUCCESS)
        let code = try XCTUnwrap(lastCode(), messages + daemon.output)
        try line().replacingOccurrences(of: "MODULE", with: moduleURL.path)
            .appending("\n").write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        let statuses = try startPamtestersAtOnce(20, service: service, user: "nobody", answer: code)
        XCTAssertEqual(statuses.filter { $0 == 0 }.count, 1, "exactly one of 20: \(statuses)")
        XCTAssertEqual(messages.components(separatedBy: "\n--\n").count - 1, 1, "still one message sent")
    }

    /// Through pam-totpd for a caller without root (a screen locker): the look-up offers the
    /// phone, pam-totpd sends, the code logs in once.
    func testThroughPamTOTPDForACallerWithoutRoot() throws {
        let capture = try SyslogCapture(scratch: daemon.root)
        try daemon.start(launcher: capture.wrap([]))
        let caller = try ThrowawayAccount(prefix: "toob")
        defer { caller.delete() }
        try enrolPhone(caller.name, uid: caller.uid)
        let path = "/etc/pam.d/" + service
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("auth required \(moduleURL.path) config=\(daemon.config) socket=\(daemon.socketPath)\n".utf8),
                                                     attributes: [.posixPermissions: 0o644]))
        // pamtester reads its answers as it is asked: the code is written once it was sent.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = caller.setpriv + ["pamtester", "-v", service, caller.name, "authenticate"]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = output
        try p.run()
        XCTAssertTrue(waitUntil(timeout: 15) { self.lastCode() != nil }, daemon.output)
        input.fileHandleForWriting.write(Data((try XCTUnwrap(lastCode()) + "\n").utf8))
        try input.fileHandleForWriting.close()
        p.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 0, text + daemon.output)
        XCTAssertTrue(text.contains("Code sent to +1******1234: "), text)
        let log = capture.stop().joined(separator: "\n")
        XCTAssertTrue(log.contains("sent a code (sms factor mobile, +1******1234)"), log)
        XCTAssertFalse(log.contains(try XCTUnwrap(lastCode())), "the code is never logged")
    }

    /// A slow sender (a gateway that takes seconds) does not hold up the account's other
    /// logins: a second terminal is asked, at once, for the code on its way, and logs in with it.
    func testASlowSenderDoesNotHoldUpAnotherTerminal() throws {
        try writeSender("slow-sms", "#!/bin/sh\nsleep 6\n{ printf 'to %s\\n' \"$PAM_TOTP_DESTINATION\"; cat; printf '\\n--\\n'; } >> \(spool)\n")
        try writeConfig(sms: "slow-sms")
        try daemon.start()
        let caller = try ThrowawayAccount(prefix: "tslow")
        defer { caller.delete() }
        try enrolPhone(caller.name, uid: caller.uid)
        let path = "/etc/pam.d/" + service
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("auth required \(moduleURL.path) config=\(daemon.config) socket=\(daemon.socketPath)\n".utf8),
                                                     attributes: [.posixPermissions: 0o644]))
        func pamtester() throws -> (Process, Pipe, Pipe) {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = caller.setpriv + ["pamtester", "-v", service, caller.name, "authenticate"]
            let input = Pipe(), output = Pipe()
            (p.standardInput, p.standardOutput, p.standardError) = (input, output, output)
            try p.run()
            return (p, input, output)
        }
        let output = OutputCollector()
        let (first, firstInput, firstOutput) = try pamtester()
        defer { if first.isRunning { first.terminate() } }
        usleep(1_000_000)  // the first terminal's send is under way: its sender sleeps 6 s
        let (second, secondInput, secondOutput) = try pamtester()
        output.collect(secondOutput)
        XCTAssertTrue(waitUntil(timeout: 4) { output.text.contains("Code sent to +1******1234 at ") },
                      "the second terminal waited for the first one's sender: \(output.text)")
        XCTAssertTrue(waitUntil(timeout: 15) { self.lastCode() != nil }, daemon.output)
        secondInput.fileHandleForWriting.write(Data((try XCTUnwrap(lastCode()) + "\n").utf8))
        try secondInput.fileHandleForWriting.close()
        second.waitUntilExit()
        XCTAssertEqual(second.terminationStatus, 0, output.text)
        try firstInput.fileHandleForWriting.close()
        first.waitUntilExit()
        _ = firstOutput.fileHandleForReading.readDataToEndOfFile()
        XCTAssertEqual(messages.components(separatedBy: "\n--\n").count - 1, 1, "one message for both terminals")
    }

    /// While pam-totpd's sender runs (a slow gateway, through a child process), no local user
    /// learns the number from a command line: neither the sender's nor its child's holds it
    /// (read as root from /proc/PID/cmdline, which every user may read); the sender's
    /// environment does, which only its own uid and root may read (issue 36: it ran as
    /// `PROGRAM DESTINATION` before).
    func testTheNumberIsOnNoCommandLineWhileTheSenderRuns() throws {
        try writeSender("slow-sms", "#!/bin/sh\nsleep 3\n{ printf 'to %s uid %s\\n' \"$PAM_TOTP_DESTINATION\" \"$(id -u)\"; cat; printf '\\n--\\n'; } >> \(spool)\n")
        try writeConfig(sms: "slow-sms")
        try daemon.start()
        try enrolPhone("nobody", uid: 65534)
        let path = "/etc/pam.d/" + service
        try (line().replacingOccurrences(of: "MODULE", with: moduleURL.path) + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/pamtester")
        p.arguments = [service, "nobody", "authenticate"]
        let input = Pipe(), output = Pipe()
        (p.standardInput, p.standardOutput, p.standardError) = (input, output, output)
        try p.run()
        defer { if p.isRunning { p.terminate() }; p.waitUntilExit() }
        let sender = try XCTUnwrap(getpwnam("pam-totp-sender")).pointee.pw_uid
        var seen: [String: String] = [:]
        var environ: [String: String] = [:]
        var othersRead: [String] = []
        // Until this sender's child is seen (another test's sender may run as the same user).
        for _ in 0..<100 where !seen.values.contains(where: { $0.hasPrefix("sleep 3") }) {
            for pid in processes(of: sender) {
                guard let cmdline = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { continue }
                seen[pid] = String(decoding: cmdline.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
                environ[pid] = FileManager.default.contents(atPath: "/proc/\(pid)/environ").map { String(decoding: $0, as: UTF8.self) }
                // Another local user: nobody (not the delivery user, not root).
                let other = try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "cat", "/proc/\(pid)/environ"])
                if other.status == 0 || other.stdout.contains(number) { othersRead.append(pid) }
            }
            usleep(50_000)
        }
        XCTAssertTrue(waitUntil(timeout: 15) { self.lastCode() != nil }, daemon.output)
        try input.fileHandleForWriting.close()
        XCTAssertTrue(seen.values.contains { $0.contains("/senders/slow-sms") }, "the sender was seen running: \(seen)")
        XCTAssertTrue(seen.values.contains { $0.hasPrefix("sleep 3") }, "its child was seen running: \(seen)")
        for (pid, cmdline) in seen {
            XCTAssertFalse(cmdline.contains(number) || cmdline.contains(String(number.dropFirst())),
                           "pid \(pid): the number is on a command line every local user can read: \(cmdline)")
        }
        XCTAssertTrue(environ.values.contains { $0.contains("PAM_TOTP_DESTINATION=\(number)\0") && $0.contains("PAM_TOTP_KIND=sms\0") },
                      "the sender has the number in its environment: \(environ)")
        XCTAssertEqual(othersRead, [], "another user read a sender's environment")
        XCTAssertTrue(messages.hasPrefix("to \(number) uid \(sender)\n"), messages)
    }

    /// Two phones of one account whose labels collide in 64-bit FNV-1a (the pair in
    /// OutOfBandTests; the same number, enrolled in the same second), through the real pam-totpd: a code
    /// sent for the first is not taken for the second (before issue 36 the pending code was
    /// bound by a key made from that hash: the daemon asked the second one to type the first
    /// one's code, and accepted it as the second factor's).
    func testPhonesWhoseLabelsCollideInFNVDoNotShareACode() throws {
        try daemon.start()
        let (a, b) = ("jyqyxvpsqvbnf", "3rqog63q3lcol")  // FNV-1a-64 both 0x27c85f66d71bd4bc (OutOfBandTests)
        let s = try Store(path: Array(daemon.store.utf8))
        // The second first in the record: a login tries it first.
        try s.write(user: Array("nobody".utf8), record: UserRecord(uid: 65534, factors: [
            try Factor(outOfBand: .sms, label: Array(b.utf8), destination: Array(number.utf8), created: 1_700_000_000),
            try Factor(outOfBand: .sms, label: Array(a.utf8), destination: Array(number.utf8), created: 1_700_000_000)]))
        var o = ModuleOptions()
        o.store = Array(daemon.store.utf8)
        o.maxFailures = 100
        o.lockoutSeconds = 0
        func ask(_ op: DaemonOperation, _ answer: String) throws -> DaemonReply {
            let frame = try XCTUnwrap(DaemonRequest(operation: op, service: Array("oob".utf8), user: Array("nobody".utf8),
                                                    options: o, answer: Array(answer.utf8)).encoded())
            let fd = DaemonTests.connectTo(daemon.socketPath)
            XCTAssertGreaterThanOrEqual(fd, 0)
            defer { close(fd) }
            XCTAssertTrue(DaemonTests.send(fd, frame))
            return try DaemonReply.decode(try XCTUnwrap(DaemonTests.readAll(fd, timeout: 20_000)))
        }
        guard case .sent(true, _, _, _) = try ask(.send, a) else { return XCTFail("a code for the first phone: \(daemon.output)") }
        let code = try XCTUnwrap(lastCode())
        // The second phone within oob_resend_interval: told to wait, not to type the first one's code.
        let second = try ask(.send, b)
        if case .sent = second { XCTFail("the second phone was answered with the first one's code: \(second)") }
        XCTAssertEqual(senders.count, 1)
        // The code typed back logs in as the factor it was sent for.
        guard case .outcome(.success(let factor, _, _, _)) = try ask(.authenticate, code) else { return XCTFail("the code sent") }
        XCTAssertEqual(String(decoding: factor, as: UTF8.self), a, "the code sent for \(a) was taken as \(String(decoding: factor, as: UTF8.self))'s")
    }

    /// Live (not zombie) processes whose real uid is `uid`.
    func processes(of uid: uid_t) -> [String] {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { $0.allSatisfy(\.isNumber) } ?? []
        return pids.filter { pid in
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
            let lines = status.split(separator: "\n")
            let uids = lines.first { $0.hasPrefix("Uid:") }?.split(whereSeparator: { $0 == "\t" || $0 == " " }) ?? []
            return !(lines.first { $0.hasPrefix("State:") } ?? "").contains("Z") && uids.count > 1 && uids[1] == "\(uid)"
        }
    }

    // MARK: Enrolment

    /// totp-enroll add-phone: a malformed number is refused before anything is sent; the phone
    /// is saved only after the code sent to it is typed back; list shows it masked.
    func testAddPhoneSavesOnlyAfterTheCodeSent() throws {
        try writeConfig(sms: "sms", extra: "socket = \(daemon.socketPath)\n")
        try daemon.start()
        let enroll = [enrollURL.path, "--config", daemon.config, "--user", "nobody"]
        let bad = try runCommand(enroll + ["add-phone", "510-555-1234"])
        XCTAssertEqual(bad.status, 1)
        XCTAssertTrue(bad.stderr.contains("E.164"), bad.stderr)
        XCTAssertTrue(messages.isEmpty)
        // A wrong code three times: nothing saved.
        let wrong = try runCommand(enroll + ["add-phone", number, "--name", "mobile"], input: "000001\n000002\n000003\n")
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertTrue(wrong.stderr.contains("nothing was saved"), wrong.stderr)
        XCTAssertTrue(wrong.stdout.contains("Standard message rates may apply"), wrong.stdout)
        XCTAssertNil(try Store(path: Array(daemon.store.utf8)).read(user: Array("nobody".utf8))?.factors.first)
        // The right one, typed once it has arrived (oob_resend_interval: wait out the first send).
        try writeConfig(sms: "sms", extra: "socket = \(daemon.socketPath)\noob_resend_interval = 0\n")
        daemon.cleanupProcessOnly()
        unlink(daemon.socketPath)
        try daemon.start()
        let before = lastCode()
        let p = Process()
        p.executableURL = enrollURL
        p.arguments = Array(enroll.dropFirst()) + ["add-phone", number, "--name", "mobile"]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = output
        try p.run()
        XCTAssertTrue(waitUntil(timeout: 15) { self.lastCode() != nil && self.lastCode() != before }, daemon.output)
        input.fileHandleForWriting.write(Data((try XCTUnwrap(lastCode()) + "\n").utf8))
        try input.fileHandleForWriting.close()
        p.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 0, text)
        let record = try XCTUnwrap(try Store(path: Array(daemon.store.utf8)).read(user: Array("nobody".utf8)))
        XCTAssertEqual(record.factors.map(\.kind), [.sms])
        XCTAssertEqual(record.factors.first?.destination, Array(number.utf8))
        let list = try runCommand(enroll + ["list"])
        XCTAssertTrue(list.stdout.contains("+1******1234") && !list.stdout.contains(number), list.stdout)
        let full = try runCommand(enroll + ["list", "--show-destinations"])
        XCTAssertTrue(full.stdout.contains(number), full.stdout)
        let json = try runCommand(enroll + ["status", "--json"])
        XCTAssertTrue(json.stdout.contains("\"destination\":\"+1******1234\""), json.stdout)
        // A phone has no key: no algorithm or digits of its own (it showed a placeholder's "sha1").
        XCTAssertTrue(json.stdout.contains("\"algorithm\":null,\"digits\":null"), json.stdout)
        XCTAssertTrue(json.stdout.contains("\"codes_sent_last_hour\":2"), json.stdout)
    }
}

/// Creates the delivery user pam-totp-sender (as make install does) if there is none; true if
/// it did (the caller removes it after).
func makeSenderUser() throws -> Bool {
    guard getpwnam("pam-totp-sender") == nil else { return false }
    let made = try runCommand(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "pam-totp-sender"])
    XCTAssertEqual(made.status, 0, made.stderr)
    return made.status == 0
}

/// Collects what a pipe gives, in the background (for output read while the process runs).
final class OutputCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    var text: String { lock.lock(); defer { lock.unlock() }; return String(decoding: data, as: UTF8.self) }
    func collect(_ pipe: Pipe) {
        pipe.fileHandleForReading.readabilityHandler = { [self] handle in
            let chunk = handle.availableData
            if chunk.isEmpty { handle.readabilityHandler = nil; return }
            lock.lock(); data.append(chunk); lock.unlock()
        }
    }
}
