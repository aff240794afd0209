import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// pam-totpd with a sender that appends to a spool file, as OutOfBandLoginTests has it: the
/// program runs as the delivery user pam-totp-sender and writes the destination and the
/// message; the configuration names it as sms_command (the module offers a phone only then).
final class SpoolSender {
    let daemon: DaemonFixture
    let spool: SenderSpool
    let number = "+15105551234"

    init(daemon: DaemonFixture, extraConfig: String = "") throws {
        self.daemon = daemon
        spool = try SenderSpool(in: daemon.root)
        try "store = \(daemon.store)\nsms_command = \(spool.senders)/sms\n\(extraConfig)".write(toFile: daemon.config, atomically: true, encoding: .utf8)
        guard chmod(daemon.config, 0o644) == 0 else { throw POSIXError(.EIO) }
    }

    func cleanup() { spool.cleanup() }

    var messages: String { spool.messages }
    var count: Int { spool.count }
    var lastCode: String? { spool.lastCode }

    /// Enrols `user` (bound to `uid`) with one phone and nothing else.
    func enrolPhone(_ user: String, uid: uid_t?) throws {
        let s = try Store(path: Array(daemon.store.utf8))
        try s.write(user: Array(user.utf8), record: UserRecord(uid: uid.map { UInt32($0) }, factors: [
            try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array(number.utf8), created: 1_700_000_000),
        ]))
    }

    /// The module's arguments for this daemon, its configuration file and its store.
    var arguments: String { "config=\(daemon.config) socket=\(daemon.socketPath)" }
}

/// i3lock for a user whose only factor is a phone: pam_totp on both sides of pam_unix
/// (forward_pass, then forward_pass after_password), through pam-totpd (i3lock runs as the
/// user). The password alone sends the code, after pam_unix accepted it; the password followed
/// by the code unlocks; a wrong password sends nothing.
final class SentCodeScreenLockerTests: XCTestCase {
    var fixture: ScreenLockerFixture!
    var daemon: DaemonFixture!
    var sender: SpoolSender!

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: a throwaway account, /etc/pam.d/i3lock, pam-totpd, the delivery user")
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        fixture = try ScreenLockerFixture()
        daemon = try DaemonFixture()
        sender = try SpoolSender(daemon: daemon)
    }

    override func tearDown() {
        daemon?.cleanup()
        sender?.cleanup()
        fixture?.cleanup()
        (fixture, daemon, sender) = (nil, nil, nil)
    }

    var user: String { fixture.account.name }
    var password: String { fixture.account.password }

    /// The one-prompt stack for sent codes (pam_totp(8), SCREEN LOCKERS AND DESKTOPS).
    var stack: String {
        """
        auth     [success=ok ignore=ignore cred_insufficient=bad default=die]  \(moduleURL.path) forward_pass code_after_password nullok \(sender.arguments)
        auth     requisite  pam_unix.so use_first_pass
        auth     required   \(moduleURL.path) forward_pass after_password nullok \(sender.arguments)
        account  required   pam_unix.so

        """
    }

    func start() throws {
        try daemon.start()
        try sender.enrolPhone(user, uid: fixture.account.uid)
        try fixture.install(stack)
    }

    /// (1) The password alone: still locked, one text with a code sent; the password followed by
    /// that code: unlocked, the code used up, no failure counted.
    func testThePasswordSendsTheCodeAndThePasswordWithItUnlocks() throws {
        try start()
        let p = try fixture.lock()
        defer { fixture.stop(p) }
        try fixture.type(password)
        XCTAssertFalse(fixture.unlocked(p), "the password alone unlocked a user with a phone")
        XCTAssertTrue(waitUntil(timeout: 5) { self.sender.lastCode != nil }, "no code was sent: \(daemon.output)")
        XCTAssertEqual(sender.count, 1, sender.messages)
        XCTAssertTrue(sender.messages.hasPrefix("to \(sender.number) uid "), sender.messages)
        let code = try XCTUnwrap(sender.lastCode)
        var state = try daemon.state(user)
        XCTAssertNotNil(state.pending, "the code sent is pending")
        XCTAssertEqual(state.failures, 0, "the password alone is no failure")
        try fixture.type(password + code)
        XCTAssertTrue(fixture.unlocked(p), "the password followed by the code sent did not unlock: \(daemon.output)")
        state = try daemon.state(user)
        XCTAssertNil(state.pending, "the code is used up")
        XCTAssertEqual(state.failures, 0)
        XCTAssertEqual(state.lastSteps.count, 1, "the accepted code is recorded")
        XCTAssertEqual(sender.count, 1, "nothing more was sent: \(sender.messages)")
    }

    /// (2) A wrong password: still locked and nothing sent; the right one then sends the code.
    func testAWrongPasswordSendsNothing() throws {
        try start()
        let p = try fixture.lock()
        defer { fixture.stop(p) }
        try fixture.type("not-" + password)
        XCTAssertFalse(fixture.unlocked(p), "a wrong password unlocked")
        XCTAssertTrue(sender.messages.isEmpty, "a wrong password sent a code: \(sender.messages)")
        var state = try daemon.state(user)
        XCTAssertNil(state.pending)
        XCTAssertTrue(state.sends.isEmpty, "a wrong password asked for a send")
        XCTAssertEqual(state.failures, 0)
        try fixture.type(password)
        XCTAssertFalse(fixture.unlocked(p), "the password alone unlocked")
        XCTAssertTrue(waitUntil(timeout: 5) { self.sender.count == 1 }, "the right password sent no code: \(sender.messages) \(daemon.output)")
        state = try daemon.state(user)
        XCTAssertNotNil(state.pending)
    }

    /// (3) The after_password line without the forward_pass line before the password module (a
    /// misconfigured stack): the password alone does not unlock, nothing is sent, and syslog
    /// names the misconfiguration.
    func testAnAfterPasswordLineAloneNeverLetsThePasswordThrough() throws {
        let capture = try SyslogCapture(scratch: daemon.root)
        defer { _ = capture.stop() }
        try daemon.start()
        try sender.enrolPhone(user, uid: fixture.account.uid)
        try fixture.install("""
            auth     requisite  pam_unix.so
            auth     required   \(moduleURL.path) forward_pass after_password \(sender.arguments)
            account  required   pam_unix.so

            """)
        let p = try fixture.lock(wrap: capture.wrap)
        defer { fixture.stop(p) }
        try fixture.type(password)
        XCTAssertFalse(fixture.unlocked(p), "the password alone unlocked through a lone after_password line")
        XCTAssertTrue(sender.messages.isEmpty, "a lone after_password line sent a code: \(sender.messages)")
        let log = capture.stop()
        XCTAssertTrue(log.contains { $0.contains("after_password, but no forward_pass line") }, "no log line names the misconfiguration: \(log)")
    }
}

/// The one-prompt stack for sent codes through the real libpam (pam_start_confdir), in process as
/// root: what the after_password line finds in the handle lasts one pam_authenticate; a user
/// without a factor under nullok and an app user pass as before. The password module is pam_exec
/// with expose_authtok running a script that accepts one password; a pam_exec line first skips
/// the forward_pass line and the password once a flag file exists, so a second pam_authenticate
/// on the same handle reaches the after_password line without them.
final class AfterPasswordTests: XCTestCase {
    var pam: PAMFixture!
    var daemon: DaemonFixture!
    var sender: SpoolSender!
    var flag: String { pam.root.appendingPathComponent("skip-first").path }

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pam-totpd runs as root and the sender as pam-totp-sender")
        pam = try PAMFixture()
        daemon = try DaemonFixture()
        sender = try SpoolSender(daemon: daemon, extraConfig: "oob_resend_interval = 0\n")
        try daemon.start()
        let check = pam.root.appendingPathComponent("password").path
        try "#!/bin/sh\n[ \"$(tr -d '\\000')\" = hunter2 ]\n".write(toFile: check, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(check, 0o755), 0)
        let args = "\(sender.arguments) store=\(daemon.store) max_failures=100 lockout=0"
        try pam.service("one", [
            "auth [success=2 default=ignore] pam_exec.so quiet /usr/bin/test -e \(flag)",
            "auth [success=ok ignore=ignore cred_insufficient=bad default=die] MODULE forward_pass nullok \(args)",
            "auth requisite pam_exec.so expose_authtok quiet \(check)",
            "auth required MODULE forward_pass after_password \(args)",
        ])
    }

    override func tearDown() {
        daemon?.cleanup()
        sender?.cleanup()
        pam?.cleanup()
    }

    /// The flow in one process: the password alone sends (and fails), a wrong password sends
    /// nothing, the password and the code sent succeed.
    func testPasswordThenPasswordAndCode() throws {
        try sender.enrolPhone("nobody", uid: 65534)
        let wrong = Conversation(answer: Array("hunter3".utf8))
        XCTAssertNotEqual(pam.authenticate(service: "one", user: "nobody", conversation: wrong), PAM_SUCCESS)
        XCTAssertTrue(sender.messages.isEmpty, "a wrong password sent a code")
        let alone = Conversation(answer: Array("hunter2".utf8))
        XCTAssertNotEqual(pam.authenticate(service: "one", user: "nobody", conversation: alone), PAM_SUCCESS)
        XCTAssertEqual(sender.count, 1, daemon.output)
        XCTAssertEqual(alone.prompts, ["Password and verification code: ", "Code sent to +1******1234: type your password followed by the code"])
        let code = try XCTUnwrap(sender.lastCode)
        let both = Conversation(answer: Array(("hunter2" + code).utf8))
        XCTAssertEqual(pam.authenticate(service: "one", user: "nobody", conversation: both), PAM_SUCCESS, daemon.output)
        XCTAssertEqual(try daemon.state("nobody").failures, 0)
        XCTAssertEqual(sender.count, 1)
        // The code again: used up. It is checked (a failure), and nothing is sent.
        XCTAssertNotEqual(pam.authenticate(service: "one", user: "nobody", conversation: both), PAM_SUCCESS)
        XCTAssertEqual(sender.count, 1)
    }

    /// An accepted code lets the after_password line through in its own pam_authenticate only.
    func testAnAcceptedCodeDoesNotOutliveItsAuthentication() throws {
        let secret = randomTOTPSecret()
        try daemon.enroll("nobody", uid: 65534, secret: secret)
        awayFromStepBoundary()
        let c = Conversation(answer: Array(("hunter2" + (try codeNow(secret))).utf8))
        let (first, second) = pam.authenticateTwice(service: "one", user: "nobody", conversation: c,
                                                    beforeSecond: { FileManager.default.createFile(atPath: self.flag, contents: nil) })
        XCTAssertEqual(first, PAM_SUCCESS, daemon.output)
        XCTAssertEqual(second, PAM_AUTH_ERR, "the after_password line took the first authentication's code for the second")
        XCTAssertEqual(c.prompts.count, 1, "the second authentication asked nothing: \(c.prompts)")
    }

    /// "Send a code" lasts one pam_authenticate too: the second, without the forward_pass line,
    /// sends nothing (oob_resend_interval=0 would let it).
    func testASendWantedDoesNotOutliveItsAuthentication() throws {
        try sender.enrolPhone("nobody", uid: 65534)
        let c = Conversation(answer: Array("hunter2".utf8))
        var between = -1
        let (first, second) = pam.authenticateTwice(service: "one", user: "nobody", conversation: c, beforeSecond: {
            between = self.sender.count
            FileManager.default.createFile(atPath: self.flag, contents: nil)
        })
        XCTAssertEqual(between, 1, "the first authentication sent the code: \(daemon.output)")
        XCTAssertNotEqual(first, PAM_SUCCESS)
        XCTAssertEqual(second, PAM_AUTH_ERR)
        XCTAssertEqual(sender.count, 1, "the second authentication sent again: \(sender.messages)")
    }

    /// The stack changes nothing for a user without a factor under nullok (the password alone)
    /// and for an app user (password and app code), and never lets another user's verdict count.
    func testUsersWithoutPhonesPassAsBefore() throws {
        XCTAssertEqual(pam.authenticate(service: "one", user: "nobody", conversation: Conversation(answer: Array("hunter2".utf8))),
                       PAM_SUCCESS, "an unenrolled user under nullok: \(daemon.output)")
        XCTAssertNotEqual(pam.authenticate(service: "one", user: "nobody", conversation: Conversation(answer: Array("hunter3".utf8))),
                          PAM_SUCCESS)
        let secret = randomTOTPSecret()
        try daemon.enroll("nobody", uid: 65534, secret: secret)
        XCTAssertNotEqual(pam.authenticate(service: "one", user: "nobody", conversation: Conversation(answer: Array("hunter2".utf8))),
                          PAM_SUCCESS, "an app user with the password alone")
        XCTAssertEqual(try daemon.state("nobody").failures, 1, "the password alone is a wrong app code, as before")
        awayFromStepBoundary()
        XCTAssertEqual(pam.authenticate(service: "one", user: "nobody", conversation: Conversation(answer: Array(("hunter2" + (try codeNow(secret))).utf8))),
                       PAM_SUCCESS)
        XCTAssertTrue(sender.messages.isEmpty)
    }
}
