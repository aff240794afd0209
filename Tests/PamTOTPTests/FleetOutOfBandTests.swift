import CPAM
import FleetStore
import Foundation
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// Text-message and email codes in fleet mode (docs/FLEET.md, "Text-message and email codes"):
/// two pam-totpd hosts on one throwaway PostgreSQL, and `pam-totpd deliver` logged in as a
/// member of pam_totp_sender, running a spool sender as pam-totp-sender. The database makes
/// every code; a host never reads one, nor a full destination, nor the outbox.
final class FleetOutOfBandTests: XCTestCase {
    var cluster: PostgresCluster!
    var hosts: [DaemonFixture] = []
    var deliverer: Process?
    var deliverLog = ""
    var root: URL!
    var senders: SenderSpool!
    let db = "fleet"
    let number = "+15105551234"
    let senderRole = "pamtotp_fleet_sender"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pam-totpd runs as root and the sender as pam-totp-sender")
        root = try makeTemporaryDirectory("pam_totp_fleet_oob")
        XCTAssertEqual(chmod(root.path, 0o755), 0)
        senders = try SenderSpool(in: root)
        // It repeats the number without its + (as gateways do): still masked in every log line.
        try senders.writeSender("failing-sms", "#!/bin/sh\necho \"gateway says no to ${PAM_TOTP_DESTINATION#+}\" >&2\nexit 3\n")
        try senders.writeSender("slow-sms", "#!/bin/sh\necho started >> \(root.path)/spool/started\nsleep 4\n"
                                + "{ printf 'to %s\\n' \"$PAM_TOTP_DESTINATION\"; cat; printf '\\n--\\n'; } >> \(senders.path)\n")

        cluster = try startFleetCluster(database: db)
        try sql("UPDATE pam_totp.settings SET max_failures = 100, min_lockout = 0")
        try sql("DROP ROLE IF EXISTS \(senderRole); CREATE ROLE \(senderRole) LOGIN; GRANT pam_totp_sender TO \(senderRole)")
        for name in ["a", "b"] {
            // The fleet's one file: sms_command says text messages are on (deliver runs it; a
            // host never does, and does not check it).
            hosts.append(try startFleetHost(cluster, database: db, role: "pamtotp_fleet_host_\(name)",
                                            settings: "sms_command = /nonexistent/on-the-deliverer-only\n"))
        }
    }

    override func tearDown() {
        stopDeliver()
        for h in hosts { h.cleanup() }
        hosts = []
        cluster?.stop()
        cluster = nil
        if let root { removeTemporaryDirectory(root) }
        senders?.cleanup()
    }

    @discardableResult
    func sql(_ q: String, user: String = "postgres") throws -> String { try cluster.psql(q, user: user, database: db) }

    /// Starts `pam-totpd deliver` with `sender` as sms_command, logged in as the sender role
    /// (through `conninfo`, else straight to the cluster).
    func startDeliver(_ sender: String = "sms", conninfo: String? = nil) throws {
        let config = root.appendingPathComponent("deliver.conf").path
        try """
            backend = postgresql
            postgresql = \(conninfo ?? cluster.conninfo(user: senderRole, database: db))
            sms_command = \(senders.senders)/\(sender)

            """.write(toFile: config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(config, 0o644), 0)
        let p = Process()
        p.executableURL = daemonURL
        p.arguments = ["deliver", "--config", config]
        deliverLog = root.appendingPathComponent("deliver.log").path
        FileManager.default.createFile(atPath: deliverLog, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: deliverLog))
        log.seekToEndOfFile()
        p.standardOutput = log
        p.standardError = log
        try p.run()
        deliverer = p
    }

    func stopDeliver(signal: Int32 = SIGTERM) {
        guard let p = deliverer else { return }
        if p.isRunning { kill(p.processIdentifier, signal) }
        p.waitUntilExit()
        deliverer = nil
    }

    var deliverOutput: String { (try? String(contentsOfFile: deliverLog, encoding: .utf8)) ?? "" }
    var messages: String { senders.messages }
    var messageCount: Int { senders.count }
    func lastCode() -> String? { senders.lastCode }

    /// Enrols root's phone the way a user does: totp-enroll add-phone through host A; the code
    /// arrives through the outbox and deliver, and is typed back.
    func enrolPhone() throws {
        let p = Process()
        p.executableURL = enrollURL
        p.arguments = ["--config", hosts[0].config, "--user", "root", "add-phone", number, "--name", "mobile"]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = output
        let collected = OutputCollector()
        collected.collect(output)
        try p.run()
        XCTAssertTrue(waitUntil(timeout: 20) { self.lastCode() != nil }, "no enrolment code arrived: \(collected.text)\n\(deliverOutput)")
        input.fileHandleForWriting.write(Data((try XCTUnwrap(lastCode()) + "\n").utf8))
        try input.fileHandleForWriting.close()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, collected.text + hosts[0].output)
        XCTAssertTrue(collected.text.contains("Standard message rates may apply"), collected.text)
        // The enrolment's send was a while ago (oob_resend_interval does not hold up the login's).
        try sql("UPDATE pam_totp.sends SET at = at - 100")
    }

    /// One request as root to host `i`, as pam_totp.so sends it.
    func ask(_ i: Int, _ op: DaemonOperation, answer: String) throws -> DaemonReply {
        try askFleetDaemon(hosts[i].socketPath, op, service: "fleet-oob", answer: answer)
    }

    func isSuccess(_ r: DaemonReply) -> Bool { if case .outcome(.success) = r { return true }; return false }

    // MARK: -

    /// deliver behind PgBouncer in transaction mode (issue 38, item 3): PgBouncer drops the
    /// notification a LISTEN waits for ("got packet 'A' from server when not linked"), and a
    /// message waited for the next look at the outbox, 30 s later (28 s measured). Now deliver
    /// looks every 2 s when no notification comes: a queued code goes out within 3 s.
    func testDeliverBehindPgBouncerSendsWithinThreeSeconds() throws {
        let bouncer = try PgBouncer(cluster, database: db, users: [senderRole])
        defer { bouncer.stop() }
        try startDeliver(conninfo: bouncer.conninfo(user: senderRole, database: db))
        XCTAssertTrue(waitUntil(timeout: 10) {
            (try? self.sql("SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = '\(self.senderRole)'")) == "t"
        }, deliverOutput + bouncer.log)
        Thread.sleep(forTimeInterval: 3)  // past its first look at the outbox: waiting for a notification
        for n in 1...2 {
            let queued = Date()
            try sql("SELECT id FROM pam_totp_api.queue_code('root', 'sms', '\(number)', 'bouncer-test', extract(epoch FROM now())::bigint)")
            XCTAssertTrue(waitUntil(timeout: 10) { self.messageCount == n }, deliverOutput + bouncer.log)
            XCTAssertLessThan(Date().timeIntervalSince(queued), 3, "message \(n) sent within 3 s")
        }
    }

    /// Enrol through host A (verify before commit), sign in through B with the code sent after
    /// A's look-up offered the masked phone; the code works once, anywhere; no host log line
    /// holds a code or the number.
    func testEnrolOnOneHostSignInOnAnotherThroughTheOutbox() throws {
        try startDeliver()
        try enrolPhone()
        XCTAssertEqual(try sql("SELECT kind || ' ' || destination FROM pam_totp.factors WHERE user_name = 'root'"), "sms \(number)")
        let list = try runCommand([enrollURL.path, "--config", hosts[1].config, "--user", "root", "list"])
        XCTAssertTrue(list.stdout.contains("+1******1234") && !list.stdout.contains(number), list.stdout + list.stderr)

        guard case .enrolled(let hints) = try ask(1, .lookup, answer: "") else { return XCTFail("not enrolled: \(hosts[1].output)") }
        XCTAssertEqual(hints.sent, [FactorHint(kind: .sms, label: Array("mobile".utf8), masked: Array("+1******1234".utf8))])
        XCTAssertFalse(hints.typed)
        XCTAssertFalse(hints.device, "no app or token factor: a one-prompt stack may send")
        XCTAssertFalse(hints.pending)
        let before = lastCode()
        guard case .sent(let fresh, _, _, let masked) = try ask(0, .send, answer: "mobile") else { return XCTFail(hosts[0].output) }
        XCTAssertTrue(fresh)
        XCTAssertEqual(masked, Array("+1******1234".utf8))
        XCTAssertTrue(waitUntil(timeout: 15) { self.messageCount == 2 }, deliverOutput)
        let code = try XCTUnwrap(lastCode())
        XCTAssertNotEqual(code, before)
        let pw = try XCTUnwrap(getpwnam("pam-totp-sender"))
        XCTAssertTrue(messages.contains("to \(number) uid \(pw.pointee.pw_uid)\n"), messages)
        guard case .enrolled(let after) = try ask(0, .lookup, answer: "") else { return XCTFail(hosts[0].output) }
        XCTAssertTrue(after.pending, "a live code is told to a one-prompt stack")
        // Asked again on B within the resend interval: the same code, nothing new sent.
        guard case .sent(false, _, _, _) = try ask(1, .send, answer: "mobile") else { return XCTFail(hosts[1].output) }
        XCTAssertTrue(isSuccess(try ask(1, .authenticate, answer: code)), hosts[1].output)
        XCTAssertFalse(isSuccess(try ask(0, .authenticate, answer: code)), "a sent code is used once, fleet-wide")
        // status (on a host, through pam-totpd) counts the sends the database recorded: the
        // enrolment's and the login's (the second login was asked for that code again).
        let status = try runCommand([enrollURL.path, "--config", hosts[1].config, "--user", "root", "status", "--json"])
        XCTAssertTrue(status.stdout.contains("\"codes_sent_last_hour\":2"), status.stdout + status.stderr)
        XCTAssertEqual(messageCount, 2)
        for h in hosts {
            XCTAssertFalse(h.output.contains(code), "a host logged a code: \(h.output)")
            XCTAssertFalse(h.output.contains(number), "a host logged the number: \(h.output)")
        }
        XCTAssertFalse(deliverOutput.contains(code) || deliverOutput.contains(number), deliverOutput)
        let audit = try sql("SELECT string_agg(event, ',' ORDER BY id) FROM pam_totp.audit WHERE account = 'root'")
        XCTAssertEqual(audit, "code-sent,enroll,code-sent,success,failure")
    }

    /// The module itself (libpq-free, as root: sshd, su) on a fleet host, for a user whose only
    /// factor is a phone: the code is sent at once through the outbox and the prompt names the
    /// mask; the code logs in once.
    func testTheModuleSendsThroughTheOutboxAndTheCodeLogsInOnce() throws {
        try startDeliver()
        try enrolPhone()
        let pam = try PAMFixture()
        defer { pam.cleanup() }
        try pam.service("fleet-oob", ["auth required MODULE config=\(hosts[1].config) socket=\(hosts[1].socketPath) max_failures=100 lockout=0"])
        let before = lastCode()
        let conversation = Conversation(answer: nil)
        conversation.respond = { [self] prompts in
            guard prompts.last?.hasPrefix("Code sent to +1******1234") == true,
                  waitUntil(timeout: 15, { self.lastCode() != before }) else { return nil }
            return lastCode().map { Array($0.utf8) }
        }
        XCTAssertEqual(pam.authenticate(service: "fleet-oob", user: "root", conversation: conversation), PAM_SUCCESS,
                       hosts[1].output + deliverOutput)
        XCTAssertEqual(conversation.prompts, ["Code sent to +1******1234: "])
        let code = try XCTUnwrap(lastCode())
        XCTAssertNotEqual(code, before)
        let again = Conversation(answer: Array(code.utf8))
        XCTAssertNotEqual(pam.authenticate(service: "fleet-oob", user: "root", conversation: again), PAM_SUCCESS, "used once")
    }

    /// A host's role reads no code, no destination and no outbox, and cannot claim a message;
    /// the sender role can do nothing else (catalogue and calls).
    func testHostRoleCannotReadACodeADestinationOrTheOutbox() throws {
        try sql("SELECT pam_totp_api.send_enrolment_code('ann', 1001, 'mobile', 'sms', '\(number)', 'setup')")
        let host = "pamtotp_fleet_host_a"
        for table in ["outbox", "sent_codes", "enrolment_codes", "sends", "factors"] {
            XCTAssertThrowsError(try sql("SELECT count(*) FROM pam_totp.\(table)", user: host), "host reads \(table)")
            XCTAssertThrowsError(try sql("SELECT count(*) FROM pam_totp.\(table)", user: senderRole), "sender reads \(table)")
        }
        XCTAssertThrowsError(try sql("SELECT * FROM pam_totp_api.outbox_claim()", user: host), "a host claims a message")
        XCTAssertThrowsError(try sql("SELECT pam_totp_api.outbox_done(1, false, 'x')", user: host))
        XCTAssertThrowsError(try sql("SELECT * FROM pam_totp_api.send_code('ann', 1001, 'mobile', 'x')", user: senderRole))
        XCTAssertThrowsError(try sql("SELECT * FROM pam_totp_api.enrolled('ann')", user: senderRole))
        // No function a host may run returns a column named like a code or a destination in clear.
        let columns = try sql("""
            SELECT string_agg(DISTINCT a.name, ',' ORDER BY a.name) FROM pg_proc p,
                   unnest(p.proargnames, p.proargmodes) AS a(name, mode)
             WHERE p.pronamespace = 'pam_totp_api'::regnamespace AND a.mode IN ('o', 't', 'b')
               AND has_function_privilege('\(host)', p.oid, 'EXECUTE')
            """)
        for bad in ["code", "hash", "salt", "secret"] {
            XCTAssertFalse(columns.split(separator: ",").contains(Substring(bad)), "\(bad) in \(columns)")
        }
        // list_factors' destination column: masked for a host, in full for an admin.
        let sent = try sql("SELECT id FROM pam_totp.outbox")
        let code = try sql("SELECT code FROM pam_totp.outbox WHERE id = \(sent)")
        let at = try sql("SELECT sent_at FROM pam_totp.enrolment_codes")
        // Inside one transaction nothing is told: the verdict waits for the counted attempt's commit.
        XCTAssertThrowsError(try sql("SELECT pam_totp_api.confirm_enrolment_finish(pam_totp_api.confirm_enrolment_begin('ann', 1001, "
                                     + "'mobile', \(at), '\(code)', 5))", user: host)) { error in
            XCTAssertTrue("\(error)".contains("commit confirm_enrolment_begin first"), "\(error)")
        }
        XCTAssertEqual(try sql("CALL pam_totp_api.confirm_enrolment('ann', 1001, 'mobile', \(at), '\(code)', 5)"), "enrolled|0")
        XCTAssertEqual(try sql("SELECT destination FROM pam_totp_api.list_factors('ann')", user: host), "+1******1234")
        XCTAssertEqual(try sql("SELECT masked FROM pam_totp_api.enrolled('ann')", user: host), "+1******1234")
        try sql("CREATE ROLE pamtotp_fleet_admin LOGIN; GRANT pam_totp_admin TO pamtotp_fleet_admin")
        XCTAssertEqual(try sql("SELECT destination FROM pam_totp_api.list_factors('ann')", user: "pamtotp_fleet_admin"), number)
        // The sender claims it (the code leaves the table with the claim) and only once.
        let claimed = try sql("SELECT id || ' ' || code FROM pam_totp_api.outbox_claim()", user: senderRole)
        XCTAssertEqual(claimed, "\(sent) \(code)")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp_api.outbox_claim()", user: senderRole), "0")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.outbox WHERE code IS NOT NULL"), "0")
    }

    /// Review finding: a host guessed a sent code in a transaction it then rolled back, telling a
    /// right guess from a wrong one by what the guess changed (the code's attempts, seen through
    /// enrolled().pending or pg_stat_xact_user_tables) — every guess uncounted. Now every answer
    /// makes the same writes: inside the transaction, three answers with the code among them look
    /// exactly like three wrong ones.
    func testAHostCannotTellARightSentCodeFromAWrongOneBeforeItIsCounted() throws {
        let host = "pamtotp_fleet_host_a"
        let at = try sql("SELECT pam_totp_api.send_enrolment_code('cid', 1002, 'mobile', 'sms', '\(number)', 'setup')")
        let first = try sql("SELECT code FROM pam_totp_api.outbox_claim()", user: senderRole)
        XCTAssertEqual(try sql("CALL pam_totp_api.confirm_enrolment('cid', 1002, 'mobile', \(at), '\(first)', 5)"), "enrolled|0")
        try sql("UPDATE pam_totp.sends SET at = at - 100")
        XCTAssertTrue(try sql("SELECT outcome FROM pam_totp_api.send_code('cid', 1002, 'mobile', 'setup')", user: host).hasPrefix("sent"))
        let code = try sql("SELECT code FROM pam_totp_api.outbox_claim()", user: senderRole)
        let wrong = ["000001", "000002", "000003"].filter { $0 != code }
        func seen(_ answers: [String]) throws -> String {
            let guesses = answers.map { "PERFORM pam_totp_api.login_begin('cid', 1002, '\($0)', 1, 10, 300, false);" }.joined(separator: " ")
            do {
                try sql("""
                    DO $$ DECLARE r text; BEGIN \(guesses)
                      SELECT coalesce(bool_or(e.pending)::text, '-') || ' ' || coalesce((SELECT n_tup_ins || '/' || n_tup_upd || '/' || n_tup_del
                        FROM pg_stat_xact_user_tables WHERE relname = 'sent_codes'), '-') INTO r FROM pam_totp_api.enrolled('cid') e;
                      RAISE EXCEPTION 'seen %', r; END $$
                    """, user: host)
            } catch { return "\(error)".components(separatedBy: "seen ").last?.components(separatedBy: "\n").first ?? "\(error)" }
            return "no exception"
        }
        let right = try seen([code, wrong[0], wrong[1]]), allWrong = try seen([wrong[0], wrong[1], wrong[2 % wrong.count]])
        XCTAssertEqual(right, allWrong, "a right guess among wrong ones is seen before it is counted")
        XCTAssertEqual(try sql("SELECT attempts_left FROM pam_totp.sent_codes WHERE user_name = 'cid'"), "3", "rolled back: nothing used")
        // Counted for real: the right code still logs in once (an answer uses an attempt, right or wrong).
        XCTAssertEqual(try cluster.login("outcome", "'cid', 1002, '\(code)', 1, 10, 300, false", user: host, database: db), "success")
        // Review finding: send_enrolment_code said "already enrolled" for a number the user has, so
        // a host with the user's proof (just now) tested guesses at the mask in rolled-back calls.
        // It is said only once the code sent to it is typed back.
        try sql("UPDATE pam_totp.sends SET at = at - 100")
        XCTAssertNoThrow(try sql("SELECT pam_totp_api.send_enrolment_code('cid', 1002, 'probe', 'sms', '\(number)', 'setup')", user: host))
        let again = try sql("SELECT code FROM pam_totp_api.outbox_claim()", user: senderRole)
        let sentAt = try sql("SELECT sent_at FROM pam_totp.enrolment_codes WHERE user_name = 'cid'")
        XCTAssertThrowsError(try sql("CALL pam_totp_api.confirm_enrolment('cid', 1002, 'probe', \(sentAt), '\(again)', 5)", user: host)) { error in
            XCTAssertTrue("\(error)".contains(Refusal.phoneTaken.sqlState + ": this phone number is already enrolled"), "\(error)")
        }
    }

    /// One code sent, then 20 logins at once over both hosts: exactly one is accepted.
    func testTwentyConcurrentLoginsOverTwoHostsWithOneSentCodeAcceptExactlyOne() throws {
        try startDeliver()
        try enrolPhone()
        guard case .sent = try ask(0, .send, answer: "mobile") else { return XCTFail(hosts[0].output) }
        XCTAssertTrue(waitUntil(timeout: 15) { self.messageCount == 2 }, deliverOutput)
        let code = try XCTUnwrap(lastCode())
        let results = Slots(20)
        let group = DispatchGroup()
        for w in 0..<20 {
            group.enter()
            Thread.detachNewThread {
                let r = try? self.ask(w % 2, .authenticate, answer: code)
                results.set(w, r.map { self.isSuccess($0) ? 1 : 0 } ?? -1)
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        XCTAssertFalse(results.all.contains(-1))
        XCTAssertEqual(results.all.filter { $0 == 1 }.count, 1, "exactly one of 20 over two hosts: \(results.all)")
    }

    /// The limits are the fleet's: sends through A and B count toward one account's hour; a
    /// refusal says why and queues nothing.
    func testTheAccountsLimitsCountAcrossHosts() throws {
        try startDeliver()
        try enrolPhone()
        try sql("UPDATE pam_totp.settings SET oob_resend_interval = 0, oob_max_per_hour = 3")
        guard case .sent(true, _, _, _) = try ask(0, .send, answer: "mobile") else { return XCTFail(hosts[0].output) }
        guard case .sent(true, _, _, _) = try ask(1, .send, answer: "mobile") else { return XCTFail(hosts[1].output) }
        guard case .notSent(let why) = try ask(0, .send, answer: "mobile") else { return XCTFail("a fourth send in the hour") }
        XCTAssertTrue(why.string.contains("at most 3 codes are sent an hour"), why.string)
        XCTAssertTrue(waitUntil(timeout: 15) { self.messageCount == 3 }, deliverOutput)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.outbox"), "3")
        // Three wrong answers void the code; a locked-out account is sent nothing.
        let code = try XCTUnwrap(lastCode())
        for wrong in ["000001", "000002", "000003"] where wrong != code {
            XCTAssertFalse(isSuccess(try ask(wrong == "000002" ? 1 : 0, .authenticate, answer: wrong)))
        }
        XCTAssertFalse(isSuccess(try ask(0, .authenticate, answer: code)), "the code is void after three wrong answers")
        try sql("UPDATE pam_totp.users SET locked_until = pam_totp_api.now_seconds() + 600 WHERE name = 'root'")
        try sql("UPDATE pam_totp.settings SET oob_max_per_hour = 10")
        guard case .notSent(let locked) = try ask(1, .send, answer: "mobile") else { return XCTFail("a locked-out account was sent a code") }
        XCTAssertTrue(locked.string.contains("locked out"), locked.string)
    }

    // MARK: sends bounded whoever asks (issue 36, the fourth review)

    /// Review finding (medium, toll fraud): a host role had the deliverer text one number 40
    /// times within seconds through 40 made-up user names (send_enrolment_code makes a user row
    /// for any name, and each name brought its own hourly and daily allowance). Now every send
    /// counts against its destination whatever the account: 5 an hour by default.
    func testMadeUpNamesBuyNoNewAllowanceForADestination() throws {
        let host = "pamtotp_fleet_host_a"
        var queued = 0, refused: [String] = []
        for n in 0..<40 {
            do {
                try sql("SELECT pam_totp_api.send_enrolment_code('madeup\(n)', \(20_000 + n), 'mobile', 'sms', '\(number)', 'web1')", user: host)
                queued += 1
            } catch { refused.append("\(error)") }
        }
        XCTAssertEqual(queued, 5, "messages queued to one number for 40 made-up names")
        XCTAssertTrue(refused.allSatisfy { $0.contains("at most 5 codes are sent to one number an hour") }, refused.first ?? "")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.outbox WHERE destination = '\(number)'"), "5")
        // The same number written for email is another destination; an address in other case is the same one.
        XCTAssertNoThrow(try sql("SELECT pam_totp_api.send_enrolment_code('madeupx', 21000, 'mail', 'email', 'Ann@Example.com', 'web1')", user: host))
        try sql("UPDATE pam_totp.settings SET oob_destination_max_per_hour = 1")
        XCTAssertThrowsError(try sql("SELECT pam_totp_api.send_enrolment_code('madeupy', 21001, 'mail', 'email', 'ann@example.COM', 'web1')", user: host))
    }

    /// Review of the change above: the destination's counts were read before the lock every send
    /// takes, so two made-up users' sends to one number at once both saw 4 of 5 and both went
    /// (6 queued). Session A holds its send's transaction open while B asks: B now waits for it
    /// and is refused.
    func testTwoSendsToOneNumberAtOnceAreCountedOneAfterTheOther() throws {
        let host = "pamtotp_fleet_host_a", to = "+15105559999"
        func send(_ name: String, _ uid: Int) -> String {
            "SELECT pam_totp_api.send_enrolment_code('\(name)', \(uid), 'mobile', 'sms', '\(to)', 'web1')"
        }
        for n in 0..<4 { try sql(send("race\(n)", 50_000 + n), user: host) }
        let a = Process()
        a.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        a.arguments = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", cluster.socketDirectory, "-p", String(cluster.port), "-U", host, "-d", db,
                       "-c", "BEGIN; " + send("raceA", 50_010) + "; SELECT pg_sleep(2); COMMIT;"]
        a.standardOutput = FileHandle.nullDevice
        try a.run()
        usleep(700_000)  // A has sent and holds the lock
        XCTAssertThrowsError(try sql(send("raceB", 50_011), user: host), "B went too") {
            XCTAssertTrue("\($0)".contains("at most 5 codes are sent to one number an hour"), "\($0)")
        }
        a.waitUntilExit()
        XCTAssertEqual(a.terminationStatus, 0)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.outbox WHERE destination = '\(to)'"), "5")
    }

    /// The same flood to many numbers spent the fleet's per-minute budget (60), so real users'
    /// sign-in codes were refused fleet-wide from every other host. Now one host role has its own
    /// cap (20 a minute by default) and real users' codes keep flowing from the other hosts.
    func testOneHostsFloodLeavesTheFleetsBudgetToTheOthers() throws {
        try startDeliver()
        try enrolPhone()
        let flooder = "pamtotp_fleet_host_a"
        var queued = 0, last = ""
        for n in 0..<60 {
            let to = "+1510555" + String(format: "%04d", n)
            do {
                try sql("SELECT pam_totp_api.send_enrolment_code('flood\(n)', \(30_000 + n), 'mobile', 'sms', '\(to)', 'web1')", user: flooder)
                queued += 1
            } catch { last = "\(error)" }
        }
        XCTAssertEqual(queued, 20, "one host's sends in a minute")
        XCTAssertTrue(last.contains("too many codes are being sent from this host"), last)
        // A real user signs in on the other host: the code is sent.
        guard case .sent(true, _, _, _) = try ask(1, .send, answer: "mobile") else { return XCTFail(hosts[1].output) }
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.sends WHERE host = 'pamtotp_fleet_host_b'"), "1")
        XCTAssertEqual(try sql("SELECT count(DISTINCT host) FROM pam_totp.sends"), "2", "each send names the host role that asked")
    }

    /// oob_allowed_prefixes: text messages only to the listed country prefixes (SMS pumping goes
    /// to premium numbers abroad); email is not affected; the settings row refuses a malformed list.
    func testTextMessagesGoOnlyToTheAllowedPrefixes() throws {
        let host = "pamtotp_fleet_host_a"
        try sql("UPDATE pam_totp.settings SET oob_allowed_prefixes = '{+1,+353}'")
        XCTAssertThrowsError(try sql("SELECT pam_totp_api.send_enrolment_code('pre1', 40001, 'mobile', 'sms', '+442071234567', 'web1')", user: host)) {
            XCTAssertTrue("\($0)".contains("text messages are not sent to that country from here"), "\($0)")
        }
        XCTAssertNoThrow(try sql("SELECT pam_totp_api.send_enrolment_code('pre2', 40002, 'mobile', 'sms', '+15105550000', 'web1')", user: host))
        XCTAssertNoThrow(try sql("SELECT pam_totp_api.send_enrolment_code('pre3', 40003, 'mobile', 'sms', '+353871234567', 'web1')", user: host))
        XCTAssertNoThrow(try sql("SELECT pam_totp_api.send_enrolment_code('pre4', 40004, 'mail', 'email', 'a@example.ie', 'web1')", user: host))
        for bad in ["'{1}'", "'{+0}'", "'{\"+1 +44\"}'", "ARRAY[NULL]::text[]", "'{+1234567}'"] {
            XCTAssertThrowsError(try sql("UPDATE pam_totp.settings SET oob_allowed_prefixes = \(bad)"), bad)
        }
    }

    /// Review suspicion: the database's email rule was looser than the client's (a@localhost,
    /// a@10.0.0.1, a@b..c passed), so a host could queue such addresses. Now the rule is written
    /// once in the database (the domains of migration 011, which the factors' CHECK and
    /// send_enrolment_code use) and gives the client's verdict (MFAPolicy's Destination) on
    /// every vector here.
    func testTheDatabaseAndTheClientAgreeOnEveryDestination() throws {
        let emails = ["a@example.com", "a@localhost", "a@10.0.0.1", "a@b..c", "a@b.c", "a.b@c.de", ".a@b.cd", "a.@b.cd", "a..b@c.de",
                      "-a@b.cd", "|a@b.cd", "/a@b.cd", "a-@b.cd", "a/b|c@d.ef", "a@-b.cd", "a@b-.cd", "a@b.c-d", "a@b.123", "a@123.b4",
                      "a@b@c.de", "@b.cd", "a@", "a b@c.de", "\"a\"@b.cd", "a@[1.2.3.4]", "a@b.cd.", "a@.b.cd", "ä@b.cd", "a@bü.de",
                      "a+tag@sub.example.org", "x!#$%&'*+=?^_`{}~@y.zz", String(repeating: "a", count: 64) + "@b.cd",
                      String(repeating: "a", count: 65) + "@b.cd", "a@" + String(repeating: "b", count: 63) + ".cd",
                      "a@" + String(repeating: "b", count: 64) + ".cd",
                      "a@" + Array(repeating: String(repeating: "b", count: 60), count: 4).joined(separator: ".") + ".cd",
                      "a@" + Array(repeating: String(repeating: "b", count: 61), count: 4).joined(separator: ".") + ".cd"]
        let phones = ["+15105551234", "+1510555123", "+151055512", "+1234567", "+123456789012345", "+1234567890123456", "+0123456789",
                      "15105551234", "+1 5105551234", "+1-510-555-1234", "+١٥١٠٥٥٥١٢٣٤", "++15105551234", "+"]
        var differ: [String] = []
        for (kind, values) in [("email", emails), ("phone", phones)] {
            for v in values {
                let swift: Bool
                do throws(MFAError) {
                    if kind == "email" { try Destination.validateEmail(Array(v.utf8)) } else { try Destination.validatePhone(Array(v.utf8)) }
                    swift = true
                } catch { swift = false }
                let literal = v.replacingOccurrences(of: "'", with: "''")
                let db = (try? sql("SELECT '\(literal)'::pam_totp.\(kind == "email" ? "email_address" : "phone_number")")) != nil
                if swift != db { differ.append("\(kind) \(v.debugDescription): client \(swift), database \(db)") }
            }
        }
        XCTAssertEqual(differ, [], "the rules differ")
        for loose in ["a@localhost", "a@10.0.0.1", "a@b..c"] {
            XCTAssertThrowsError(try sql("SELECT pam_totp_api.send_enrolment_code('loose', 40100, 'mail', 'email', '\(loose)', 'web1')",
                                         user: "pamtotp_fleet_host_a"), loose)
        }
    }

    /// A sender that fails: the message is recorded as failed, its code void, the audit trail
    /// says so (without the code or number).
    func testAFailedDeliveryVoidsTheCode() throws {
        try startDeliver()
        try enrolPhone()
        stopDeliver()
        try startDeliver("failing-sms")
        guard case .sent = try ask(0, .send, answer: "mobile") else { return XCTFail(hosts[0].output) }
        XCTAssertTrue(waitUntil(timeout: 15) { (try? self.sql("SELECT outcome FROM pam_totp.outbox ORDER BY id DESC LIMIT 1")) == "failed" },
                      deliverOutput)
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.sent_codes"), "0", "the code is void")
        let detail = try sql("SELECT detail FROM pam_totp.audit WHERE event = 'code-not-sent'")
        XCTAssertTrue(detail.contains("gateway says no to 1******1234") && detail.contains("+1******1234"), detail)
        XCTAssertFalse(detail.contains(String(number.dropFirst())) || deliverOutput.contains(String(number.dropFirst())), detail + deliverOutput)
        XCTAssertTrue(deliverOutput.contains("could not send message"), deliverOutput)
    }

    /// deliver killed (SIGKILL) while its program runs, then started again: the message it had
    /// claimed is not sent again (at most once); the next one is sent once.
    func testDeliverKilledMidSendSendsEachMessageAtMostOnce() throws {
        try startDeliver()
        try enrolPhone()
        stopDeliver()
        try sql("UPDATE pam_totp.settings SET oob_resend_interval = 0")
        try startDeliver("slow-sms")
        let started = root.appendingPathComponent("spool/started").path
        guard case .sent = try ask(0, .send, answer: "mobile") else { return XCTFail(hosts[0].output) }
        XCTAssertTrue(waitUntil(timeout: 15) { FileManager.default.fileExists(atPath: started) }, deliverOutput)
        stopDeliver(signal: SIGKILL)
        try startDeliver("slow-sms")
        // The killed deliverer's program may still finish (it has its own session): one
        // message at most, never two.
        Thread.sleep(forTimeInterval: 6)
        XCTAssertLessThanOrEqual(messageCount, 2, messages)
        XCTAssertEqual(try String(contentsOfFile: started, encoding: .utf8).components(separatedBy: "\n").filter { !$0.isEmpty }.count, 1,
                       "the claimed message was run again after the restart")
        XCTAssertEqual(try sql("SELECT count(*) FROM pam_totp.outbox WHERE claimed_at IS NOT NULL AND done_at IS NULL"), "1")
        let before = messageCount
        guard case .sent(true, _, _, _) = try ask(1, .send, answer: "mobile") else { return XCTFail(hosts[1].output) }
        XCTAssertTrue(waitUntil(timeout: 15) { self.messageCount == before + 1 }, deliverOutput)
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(messageCount, before + 1, "the next message is sent once")
        XCTAssertTrue(isSuccess(try ask(0, .authenticate, answer: try XCTUnwrap(lastCode()))))
    }
}
extension FleetOutOfBandTests: @unchecked Sendable {}
