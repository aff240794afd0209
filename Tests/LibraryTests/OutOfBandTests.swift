import Foundation
import TestSupport
import XCTest
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
@testable import MFAWire

/// Sent codes (issue "Text-message and email codes"): the factor kinds in a record, the pending
/// code and the sends in the state, the send policy and its limits, the verdict on a sent code,
/// and pam-totpd's send operation with a recording sender — all with an injected clock.
final class OutOfBandTests: XCTestCase {
    let t0: Int64 = 1_700_000_000

    func phone(_ label: String = "phone", _ number: String = "+15105551234", created: Int64 = 1_699_000_000) throws -> Factor {
        try Factor(outOfBand: .sms, label: Array(label.utf8), destination: Array(number.utf8), created: created)
    }

    func app() throws -> Factor {
        try Factor(label: Array("app".utf8), parameters: .default, created: 0, secret: Array("12345678901234567890".utf8))
    }

    /// A store in a new temporary directory (removed by the caller).
    func makeStore() throws -> (dir: URL, path: String, store: Store) {
        let dir = try makeTemporaryDirectory()
        let path = dir.appendingPathComponent("store").path
        XCTAssertEqual(mkdir(path, 0o700), 0)
        return (dir, path, try Store(path: Array(path.utf8)))
    }

    // MARK: The record

    func testRecordLinesRoundTripAndBadDestinationsAreRefused() throws {
        let mail = try Factor(outOfBand: .email, label: Array("work mail".utf8), destination: Array("alice@example.com".utf8), created: 5)
        let record = UserRecord(uid: 1001, id: 7, factors: [try app(), try phone(), mail])
        let text = record.serialized()
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n")
        XCTAssertTrue(lines.contains("sms phone 1699000000 %2B15105551234") || lines.contains("sms phone 1699000000 +15105551234"),
                      "\(lines)")
        XCTAssertTrue(lines.contains { $0.hasPrefix("email work%20mail 5 ") }, "\(lines)")
        XCTAssertEqual(try UserRecord.parse(text), record)
        XCTAssertEqual(record.factors[1].maskedDestination, Array("+1******1234".utf8))
        XCTAssertEqual(record.factors[2].maskedDestination, Array("a***@example.com".utf8))
        for bad in ["sms phone 1 15105551234", "sms phone 1 +0105551234", "email e 1 -x@example.com", "sms phone 1", "sms phone x +15105551234"] {
            let bytes = Array("pam_totp 2\naccount 1001 0000000000000007\n\(bad)\n".utf8)
            XCTAssertThrowsError(try UserRecord.parse(bytes), bad) { e in
                guard case .corruptRecord = e as? MFAError else { return XCTFail("\(bad): \(e)") }
            }
        }
        XCTAssertThrowsError(try Factor(kind: .sms, label: Array("x".utf8), parameters: .default, created: 0, secret: [UInt8](repeating: 1, count: 20)))
    }

    // MARK: The state

    func testStateSlotsKeepThePendingCodeAndSendsAndStayAsBeforeWithoutThem() throws {
        var state = UserState()
        state.failures = 2
        state.setLastStep(9, forLabel: Array("app".utf8))
        let before = state.slotBytes()
        XCTAssertEqual(Array(before[6..<8]), [0, 0], "no sent code: the slot is written as before")
        var rng = SplitMix64(seed: 3)
        let (code, pending) = PendingCode.make(for: try phone(), digits: 6, lifetime: 300, maxAttempts: 3, at: t0, using: &rng)
        XCTAssertEqual(code.count, 6)
        XCTAssertTrue(code.allSatisfy { $0 >= 0x30 && $0 <= 0x39 })
        XCTAssertFalse(pending.hash.isEmpty || pending.hash == code, "only a salted hash is kept")
        state.pending = pending
        state.recordSend(at: t0 - 4000)
        state.recordSend(at: t0)
        let slot = state.slotBytes()
        XCTAssertFalse(slot.indices.dropLast(code.count).contains { Array(slot[$0..<($0 + code.count)]) == code },
                       "the code itself is never written")
        var file = [UInt8](repeating: 0, count: UserState.fileSize)
        file.replaceSubrange(0..<UserState.slotSize, with: slot)
        XCTAssertEqual(UserState.parse(file: file), state)
        // A torn out-of-band part is a torn slot.
        var torn = file
        torn[UserState.slotSize - 200] ^= 0  // (zeros past the data: no change)
        torn[56 + 24 + 40] ^= 0xFF
        XCTAssertNil(UserState.parse(file: torn))
        // Sends older than a day are dropped; at most 32 are kept.
        for i in 0..<40 { state.recordSend(at: t0 + Int64(i)) }
        XCTAssertEqual(state.sends.count, UserState.maxSends)
        state.recordSend(at: t0 + 90_000)
        XCTAssertEqual(state.sends, [t0 + 90_000])
    }

    /// Two labels with the same 64-bit FNV-1a hash (found by a distinguished-point search,
    /// 2^32 hashes): before issue 36 a pending code was bound to its factor by a key made
    /// from that hash, so two phones of one account with these labels (the same number, enrolled
    /// in the same second, as an import can make them) had one key, and a code sent for one was
    /// taken for the other. Now the binding is a SHA-256 of the whole factor.
    static let collidingLabels = ("jyqyxvpsqvbnf", "3rqog63q3lcol")  // both 0x27c85f66d71bd4bc

    func testLabelsWhoseFNVKeysCollideDoNotShareAPendingCode() throws {
        let (a, b) = Self.collidingLabels
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(fnv1a64(Array(a.utf8)[...]), fnv1a64(Array(b.utf8)[...]), "the labels collide in FNV-1a-64")
        let first = try phone(a), second = try phone(b)
        XCTAssertEqual(UserState.key(for: first), UserState.key(for: second), "the old key could not tell them apart")
        XCTAssertNotEqual(PendingCode.binding(for: first), PendingCode.binding(for: second))
        let record = UserRecord(uid: 1001, id: 1, factors: [first, second])
        var o = ModuleOptions()
        o.oobResendInterval = 0
        var rng = SplitMix64(seed: 12)
        guard case .send(let code, let sentFor, let state, _) = OutOfBand.plan(record: record, state: UserState(), label: Array(a.utf8),
                                                                              at: t0, options: o, using: &rng) else {
            return XCTFail("send to the first")
        }
        XCTAssertEqual(sentFor.label, Array(a.utf8))
        let pending = try XCTUnwrap(state.pending)
        XCTAssertTrue(pending.isFor(first))
        XCTAssertFalse(pending.isFor(second), "the code sent for one factor is bound to it alone")
        // The code typed back matches through the factor it was sent for, never the other.
        let verifier = try TOTPVerifier(adjacentIntervals: 1), window = try HOTPWindow()
        XCTAssertNotNil(try first.check(answer: code, at: t0 + 5, verifier: verifier, hotp: window, state: state, forwardPass: false).step)
        XCTAssertNil(try second.check(answer: code, at: t0 + 5, verifier: verifier, hotp: window, state: state, forwardPass: false).step,
                     "a code sent for one factor was taken for the other")
        // Asking for the other: a new code for it, not "the code already sent" for the first.
        o.oobResendInterval = 60
        guard case .refused = OutOfBand.plan(record: record, state: state, label: Array(b.utf8), at: t0 + 1, options: o, using: &rng) else {
            return XCTFail("the other factor within oob_resend_interval was told to use the first one's code")
        }
        o.oobResendInterval = 0
        guard case .send(_, let other, let next, _) = OutOfBand.plan(record: record, state: state, label: Array(b.utf8), at: t0 + 1,
                                                                     options: o, using: &rng) else { return XCTFail("send to the other") }
        XCTAssertEqual(other.label, Array(b.utf8))
        XCTAssertTrue(try XCTUnwrap(next.pending).isFor(second))
        // The binding survives the state file, and a pruned record drops a code bound to no factor.
        var file = [UInt8](repeating: 0, count: UserState.fileSize)
        file.replaceSubrange(0..<UserState.slotSize, with: state.slotBytes())
        XCTAssertEqual(UserState.parse(file: file)?.pending, pending)
        var pruned = state
        pruned.prune(to: UserRecord(uid: 1001, id: 1, factors: [second]))
        XCTAssertNil(pruned.pending, "the first factor removed: its code goes, the other's binding does not keep it")
        // An enrolment's code for either is bound apart from both.
        XCTAssertNotEqual(OutOfBand.enrolmentBinding(for: first), PendingCode.binding(for: first))
        XCTAssertNotEqual(OutOfBand.enrolmentBinding(for: first), OutOfBand.enrolmentBinding(for: second))
    }

    /// A slot written before issue 36 (flags 1: the code bound by a 64-bit key at offset 8) is
    /// still read: its sends count; its code, which that key bound, is not honoured.
    func testAStateSlotWithTheOldKeyIsReadWithoutItsCode() throws {
        var state = UserState()
        state.failures = 3
        state.recordSend(at: t0 - 10)
        state.recordSend(at: t0)
        var oob = [UInt8](repeating: 0, count: 80 + 16)
        oob[0] = 1  // a code pending, the old layout
        oob[1] = 6
        oob[2] = 3
        oob[3] = 2
        for i in 0..<8 { oob[8 + i] = UInt8(truncatingIfNeeded: UserState.key(for: try phone()) >> UInt64(8 * i)) }
        for i in 0..<8 {
            oob[80 + i] = UInt8(truncatingIfNeeded: UInt64(t0 - 10) >> UInt64(8 * i))
            oob[88 + i] = UInt8(truncatingIfNeeded: UInt64(t0) >> UInt64(8 * i))
        }
        var slot = UserState().slotBytes()
        for i in 0..<8 { slot[24 + i] = i == 0 ? 3 : 0 }  // failures
        slot[6] = UInt8(oob.count)
        slot[7] = 0
        slot.replaceSubrange(56..<(56 + oob.count), with: oob)
        let checksum = fnv1a64(slot[0..<(56 + oob.count)])
        for i in 0..<8 { slot[UserState.slotSize - 8 + i] = UInt8(truncatingIfNeeded: checksum >> UInt64(8 * i)) }
        var file = [UInt8](repeating: 0, count: UserState.fileSize)
        file.replaceSubrange(0..<UserState.slotSize, with: slot)
        let read = try XCTUnwrap(UserState.parse(file: file), "an old slot is still read")
        XCTAssertEqual(read.failures, 3)
        XCTAssertEqual(read.sends, [t0 - 10, t0])
        XCTAssertNil(read.pending, "a code bound by the old key is not honoured")
        // Written again: the new layout, no code.
        var rewritten = [UInt8](repeating: 0, count: UserState.fileSize)
        rewritten.replaceSubrange(0..<UserState.slotSize, with: read.slotBytes())
        XCTAssertEqual(UserState.parse(file: rewritten), read)
    }

    // MARK: The send policy

    func testSendPolicyLimitsPerAccount() throws {
        let record = UserRecord(uid: 1001, id: 1, factors: [try app(), try phone(), try phone("desk", "+4930123456")])
        var o = ModuleOptions()
        var rng = SplitMix64(seed: 4)
        var state = UserState()
        func plan(_ label: String, at t: Int64) -> SendPlan {
            OutOfBand.plan(record: record, state: state, label: Array(label.utf8), at: t, options: o, using: &rng)
        }
        guard case .send(let code, let f, let next, let expires) = plan("phone", at: t0) else { return XCTFail("first send") }
        XCTAssertEqual(f.label, Array("phone".utf8))
        XCTAssertEqual(expires, t0 + 300)
        XCTAssertEqual(next.sends, [t0])
        XCTAssertTrue(PendingCode.matches(next.pending, code: code, at: t0 + 10))
        state = next
        // Within the resend interval: the same code again, nothing sent.
        XCTAssertEqual(plan("phone", at: t0 + 10), .pending(factor: record.factors[1], sentAt: t0, expiresAt: t0 + 300))
        // Another factor within it: refused, saying how long to wait.
        guard case .refused(let why) = plan("desk", at: t0 + 10) else { return XCTFail("another factor within the interval") }
        XCTAssertTrue(why.string.contains("wait 20 s"), why.string)
        XCTAssertEqual(plan("app", at: t0 + 10), .refused("no text-message or email factor of that name"))
        // Per hour: 5 by default.
        for i in 1..<5 {
            guard case .send(_, _, let n, _) = plan("phone", at: t0 + Int64(i) * 40) else { return XCTFail("send \(i)") }
            state = n
        }
        guard case .refused(let hourly) = plan("phone", at: t0 + 200) else { return XCTFail("the sixth send in an hour") }
        XCTAssertTrue(hourly.string.contains("at most 5 codes are sent an hour"), hourly.string)
        // Per day.
        o.oobMaxPerHour = 32
        o.oobMaxPerDay = 6
        guard case .send(_, _, let sixth, _) = plan("phone", at: t0 + 4000) else { return XCTFail("the sixth in a day") }
        state = sixth
        guard case .refused(let daily) = plan("phone", at: t0 + 8000) else { return XCTFail("the seventh in a day") }
        XCTAssertTrue(daily.string.contains("a day"), daily.string)
        if case .send = plan("phone", at: t0 + 86_400 + 1) {} else { XCTFail("a day later: sent again") }
        // Locked out: nothing is sent.
        state.lockedUntil = t0 + 100_000
        XCTAssertEqual(plan("phone", at: t0 + 90_000), .refused("locked out: no code is sent"))
        // A kind the policy does not allow here.
        state.lockedUntil = 0
        o.factorKinds = FactorKind.totp.bit
        guard case .refused(let kinds) = plan("phone", at: t0 + 90_000) else { return XCTFail("sms not allowed") }
        XCTAssertTrue(kinds.string.contains("factor_kinds"), kinds.string)
    }

    // MARK: The verdict

    func testASentCodeWorksOnceWithinItsLifetimeAndAttempts() throws {
        let record = UserRecord(uid: 1001, id: 1, factors: [try app(), try phone()])
        var rng = SplitMix64(seed: 5)
        let o = ModuleOptions()
        let verifier = try TOTPVerifier(adjacentIntervals: 1)
        guard case .send(let code, _, let sent, _) = OutOfBand.plan(record: record, state: UserState(), label: Array("phone".utf8),
                                                                   at: t0, options: o, using: &rng) else { return XCTFail("send") }
        func decide(_ answer: [UInt8], _ state: UserState, at t: Int64, options: ModuleOptions = ModuleOptions()) throws -> Decision {
            try Authenticator.decide(record: record, state: state, answer: answer, at: t, verifier: verifier, options: options)
        }
        // Accepted, and used up.
        let ok = try decide(code, sent, at: t0 + 30)
        guard case .success(let label, let step, 6, _) = ok.outcome else { return XCTFail("\(ok.outcome)") }
        XCTAssertEqual(label, Array("phone".utf8))
        XCTAssertEqual(step, UInt64(t0))
        XCTAssertNil(ok.state?.pending)
        guard case .wrongCode = try decide(code, try XCTUnwrap(ok.state), at: t0 + 31).outcome else { return XCTFail("used twice") }
        // Expired.
        guard case .wrongCode = try decide(code, sent, at: t0 + 300).outcome else { return XCTFail("accepted after its lifetime") }
        // Three wrong answers void it; each counts as a failure.
        var state = sent
        for i in 1...3 {
            let d = try decide(Array("000000".utf8) == code ? Array("111111".utf8) : Array("000000".utf8), state, at: t0 + Int64(i))
            guard case .wrongCode(_, let failures, _) = d.outcome else { return XCTFail("wrong \(i)") }
            XCTAssertEqual(failures, UInt32(i))
            state = try XCTUnwrap(d.state)
        }
        XCTAssertNil(state.pending, "void after oob_max_attempts wrong answers")
        guard case .wrongCode = try decide(code, state, at: t0 + 5).outcome else { return XCTFail("accepted after being voided") }
        // Two wrong answers, then the right one: accepted.
        state = sent
        for i in 1...2 { state = try XCTUnwrap(try decide(Array("99999".utf8), state, at: t0 + Int64(i)).state) }
        guard case .success = try decide(code, state, at: t0 + 3).outcome else { return XCTFail("the right code after two wrong ones") }
        // An app code voids the code sent (that login is over).
        let appCode = try TOTP.code(secret: Array("12345678901234567890".utf8), parameters: .default, at: t0 + 60)
        let byApp = try decide(appCode, sent, at: t0 + 60)
        guard case .success(let appLabel, _, _, _) = byApp.outcome else { return XCTFail("app code") }
        XCTAssertEqual(appLabel, Array("app".utf8))
        XCTAssertNil(byApp.state?.pending)
        // Not allowed here (factor_kinds = totp): the right code is not accepted.
        var totpOnly = ModuleOptions()
        totpOnly.factorKinds = FactorKind.totp.bit
        guard case .wrongCode = try decide(code, sent, at: t0 + 30, options: totpOnly).outcome else { return XCTFail("sms accepted under totp only") }
        // forward_pass: the code is the answer's last oob_digits bytes.
        var forward = ModuleOptions()
        forward.forwardPass = true
        guard case .success(_, _, 6, _) = try decide(Array("hunter2".utf8) + code, sent, at: t0 + 30, options: forward).outcome else {
            return XCTFail("forward_pass")
        }
    }

    func testHintsFollowTheKindsAllowed() throws {
        let mail = try Factor(outOfBand: .email, label: Array("mail".utf8), destination: Array("bob@example.org".utf8), created: 1)
        let record = UserRecord(uid: 1, id: 1, factors: [try app(), try phone(), mail])
        let all = record.hints(kinds: FactorKind.allBits)
        XCTAssertTrue(all.typed)
        XCTAssertEqual(all.sent.map { String(decoding: $0.masked, as: UTF8.self) }, ["+1******1234", "b***@example.org"])
        let smsOnly = record.hints(kinds: FactorKind.sms.bit)
        XCTAssertFalse(smsOnly.typed)
        XCTAssertEqual(smsOnly.sent.count, 1)
        XCTAssertEqual(smsOnly.disallowed, 2)
    }

    // MARK: Options

    func testOptionsParseAndALineCannotLoosenTheFile() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(dir) }
        let conf = dir.appendingPathComponent("pam_totp.conf").path
        try "factor_kinds = totp sms\noob_lifetime = 120\noob_max_per_hour = 3\nsms_command = /usr/local/bin/send-sms\n[group admins]\nfactor_kinds = totp\n"
            .write(toFile: conf, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(conf, 0o644), 0)
        let args = [Array("config=\(conf)".utf8), Array("factor_kinds=totp,sms,email".utf8), Array("oob_lifetime=600".utf8)]
        let o = try ModuleOptions.load(args)
        XCTAssertEqual(o.factorKinds, FactorKind.totp.bit | FactorKind.sms.bit, "a line cannot add email the file left out")
        XCTAssertEqual(o.oobLifetime, 120, "nor lengthen the lifetime")
        XCTAssertEqual(o.oobMaxPerHour, 3)
        XCTAssertEqual(o.smsCommand, Array("/usr/local/bin/send-sms".utf8))
        let admin = try ModuleOptions.load(args) { _ in true }
        XCTAssertEqual(admin.factorKinds, FactorKind.totp.bit, "the group's section narrows it")
        for bad in ["factor_kinds=", "factor_kinds=totp,voice", "oob_digits=5", "oob_lifetime=10", "oob_max_per_day=33",
                    "sms_command=/bin/true", "oob_max_per_minute=5"] {
            XCTAssertThrowsError(try ModuleOptions.parse([Array(bad.utf8)]), bad)
        }
        try "[service sshd]\nsms_command = /bin/true\n".write(toFile: conf, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try ModuleOptions.load([Array("config=\(conf)".utf8)]), "delivery settings are not per section")
    }

    // MARK: pam-totpd's send

    final class Recorder: @unchecked Sendable {
        var sent: [(kind: FactorKind, destination: [UInt8], code: [UInt8], minutes: Int64)] = []
        var fail: SendFailure? = nil
        var slots = 100
        /// The code arrays as handed to the sender (their buffers, not copies).
        var handed: [[UInt8]] = []
        var sender: CodeSender {
            CodeSender(takeSlot: { [self] in
                guard slots > 0 else { return false }
                slots -= 1
                return true
            }, send: { [self] kind, destination, code, minutes in
                // A copy: the daemon wipes the code's own bytes once it was handed on.
                sent.append((kind, destination, code.map { $0 }, minutes))
                handed.append(code)
                return fail
            })
        }
    }

    func testDaemonSendsOnceRecordsFirstAndVoidsAFailedSend() throws {
        let (dir, storePath, store) = try makeStore()
        defer { removeTemporaryDirectory(dir) }
        var rng = SplitMix64(seed: 6)
        try store.enroll(user: Array("alice".utf8), accountUID: 1001, factor: try app(), importedCodes: nil, using: &rng)
        try store.enroll(user: Array("alice".utf8), accountUID: 1001, factor: try phone(), importedCodes: nil, using: &rng)
        var site = ModuleOptions()
        site.store = Array(storePath.utf8)
        let recorder = Recorder()
        let service = DaemonService<Store>(site: site, openStore: { (path) throws(MFAError) in try Store(path: path) }, sender: recorder.sender)
        func accounts(_ name: [UInt8]) throws(MFAError) -> Account? {
            switch String(decoding: name, as: UTF8.self) {
            case "alice": return Account(name: name, uid: 1001)
            case "bob": return Account(name: name, uid: 1002)
            default: return nil
            }
        }
        func ask(_ op: DaemonOperation, _ answer: String, peer: UInt32 = 1001, at t: Int64) -> DaemonReply {
            service.handle(DaemonRequest(operation: op, service: Array("sshd".utf8), user: Array("alice".utf8), options: site,
                                         answer: Array(answer.utf8)), peer: PeerCredentials(uid: peer, pid: 9), at: t, account: accounts).reply
        }
        // The look-up offers the phone, masked.
        guard case .enrolled(let hints) = ask(.lookup, "", at: t0) else { return XCTFail("lookup") }
        XCTAssertEqual(hints.sent, [FactorHint(kind: .sms, label: Array("phone".utf8), masked: Array("+1******1234".utf8))])
        // Another account's caller cannot make alice's phone ring.
        guard case .refused = ask(.send, "phone", peer: 1002, at: t0) else { return XCTFail("bob sent to alice's phone") }
        XCTAssertTrue(recorder.sent.isEmpty)
        // A send: recorded before it left (the pending code is in the state the sender saw).
        XCTAssertEqual(ask(.send, "phone", at: t0), .sent(fresh: true, sentAt: t0, expiresAt: t0 + 300, masked: Array("+1******1234".utf8)))
        XCTAssertEqual(recorder.sent.count, 1)
        XCTAssertEqual(recorder.sent[0].destination, Array("+15105551234".utf8))
        XCTAssertEqual(recorder.sent[0].minutes, 5)
        XCTAssertEqual(recorder.handed.first, [UInt8](repeating: 0, count: 6), "the code's bytes are wiped once handed on")
        let code = String(decoding: recorder.sent[0].code, as: UTF8.self)
        // Asked again within the interval: the same code, nothing sent.
        XCTAssertEqual(ask(.send, "phone", at: t0 + 5), .sent(fresh: false, sentAt: t0, expiresAt: t0 + 300, masked: Array("+1******1234".utf8)))
        XCTAssertEqual(recorder.sent.count, 1)
        // The code logs in once.
        guard case .outcome(.success) = ask(.authenticate, code, at: t0 + 20) else { return XCTFail("the code sent") }
        guard case .outcome(.wrongCode) = ask(.authenticate, code, at: t0 + 21) else { return XCTFail("the code sent, twice") }
        // A failed send: the user is told to use another factor; the code is void. A program
        // that ran may have handed the message on: its send counts; one that never ran does not.
        recorder.fail = SendFailure("exited with status 1", started: true)
        guard case .notSent(let why) = ask(.send, "phone", at: t0 + 100) else { return XCTFail("failed send") }
        XCTAssertEqual(why.string, "could not send a code: use your app or a recovery code")
        let failedCode = String(decoding: recorder.sent[1].code, as: UTF8.self)
        var state = try store.readState(user: Array("alice".utf8))
        XCTAssertNil(state.pending)
        XCTAssertEqual(state.sends, [t0, t0 + 100], "a program that ran: its send counts")
        guard case .outcome(.wrongCode) = ask(.authenticate, failedCode, at: t0 + 101) else { return XCTFail("an unsent code logged in") }
        recorder.fail = SendFailure("could not start", started: false)
        guard case .notSent = ask(.send, "phone", at: t0 + 140) else { return XCTFail("a sender that never ran") }
        state = try store.readState(user: Array("alice".utf8))
        XCTAssertNil(state.pending)
        XCTAssertEqual(state.sends, [t0, t0 + 100], "a program that never ran: its send is not counted")
        // The daemon's per-minute limit.
        recorder.fail = nil
        recorder.slots = 0
        guard case .notSent(let busy) = ask(.send, "phone", at: t0 + 200) else { return XCTFail("per-minute limit") }
        XCTAssertEqual(try store.readState(user: Array("alice".utf8)).sends, [t0, t0 + 100], "refused by the daemon's limit: not counted")
        XCTAssertTrue(busy.string.contains("try again in a minute"), busy.string)
        XCTAssertNil(try store.readState(user: Array("alice".utf8)).pending)
        // No sender configured: told, nothing recorded.
        let silent = DaemonService<Store>(site: site, openStore: { (path) throws(MFAError) in try Store(path: path) })
        guard case .notSent = silent.handle(DaemonRequest(operation: .send, service: [], user: Array("alice".utf8), options: site,
                                                          answer: Array("phone".utf8)), peer: PeerCredentials(uid: 0, pid: 1),
                                            at: t0 + 400, account: accounts).reply else { return XCTFail("no sender") }
    }

    /// The code typed back at an enrolment is checked under the lock: wrong answers count as
    /// failures and use up the code's attempts; the right one saves the factor once.
    func testEnrolmentCodeIsCheckedAndCountedUnderTheLock() throws {
        let (dir, _, store) = try makeStore()
        defer { removeTemporaryDirectory(dir) }
        var rng = SplitMix64(seed: 8)
        let user = Array("dave".utf8)
        let factor = try phone()
        var o = ModuleOptions()
        o.oobResendInterval = 0
        guard case .send(let code, _, _, _) = try store.sendEnrolmentCode(user: user, accountUID: 1004, factor: factor, at: t0,
                                                                        options: o, using: &rng) else { return XCTFail("send") }
        let wrong = Array((String(decoding: code, as: UTF8.self) == "000000" ? "111111" : "000000").utf8)
        XCTAssertEqual(try store.confirmEnrolment(user: user, accountUID: 1004, factor: factor, sentAt: t0, answer: wrong, at: t0 + 1,
                                                  options: o, using: &rng), .wrong(attemptsLeft: 2))
        XCTAssertEqual(try store.readState(user: user).failures, 1, "a wrong code at enrolment is a failure")
        XCTAssertEqual(try store.confirmEnrolment(user: user, accountUID: 1004, factor: factor, sentAt: t0, answer: code, at: t0 + 2,
                                                  options: o, using: &rng), .enrolled)
        XCTAssertEqual(try store.read(user: user)?.factors, [factor])
        XCTAssertEqual(try store.confirmEnrolment(user: user, accountUID: 1004, factor: factor, sentAt: t0, answer: code, at: t0 + 3,
                                                  options: o, using: &rng), .expired, "used once")
        // Three wrong answers void it; an expired one is expired.
        let other = try phone("desk", "+4930123456")
        guard case .send(let code2, _, _, _) = try store.sendEnrolmentCode(user: user, accountUID: 1004, factor: other, at: t0 + 10,
                                                                         options: o, using: &rng) else { return XCTFail("send 2") }
        XCTAssertEqual(try store.confirmEnrolment(user: user, accountUID: 1004, factor: other, sentAt: t0 + 10, answer: code2, at: t0 + 310,
                                                  options: o, using: &rng), .expired)
        guard case .send(let code3, _, _, _) = try store.sendEnrolmentCode(user: user, accountUID: 1004, factor: other, at: t0 + 400,
                                                                         options: o, using: &rng) else { return XCTFail("send 3") }
        let wrong3 = Array((String(decoding: code3, as: UTF8.self) == "000000" ? "111111" : "000000").utf8)
        for left in [2, 1, 0] {
            XCTAssertEqual(try store.confirmEnrolment(user: user, accountUID: 1004, factor: other, sentAt: t0 + 400, answer: wrong3,
                                                      at: t0 + 401, options: o, using: &rng), .wrong(attemptsLeft: left))
        }
        XCTAssertEqual(try store.confirmEnrolment(user: user, accountUID: 1004, factor: other, sentAt: t0 + 400, answer: code3, at: t0 + 402,
                                                  options: o, using: &rng), .expired, "void after three wrong answers")
        XCTAssertEqual(try store.read(user: user)?.factors.count, 1)
    }

    /// Stored times are data: far past or future ones never trap, and a clock set back does not
    /// wipe the limits.
    func testHostileTimesNeitherTrapNorResetTheLimits() throws {
        let record = UserRecord(uid: 1, id: 1, factors: [try phone()])
        var rng = SplitMix64(seed: 9)
        var state = UserState()
        state.sends = [Int64.min, Int64.max]
        state.pending = PendingCode(binding: PendingCode.binding(for: record.factors[0]), sentAt: Int64.min, expiresAt: Int64.max, digits: 6,
                                    attemptsLeft: 3, salt: [UInt8](repeating: 0, count: 16), hash: [UInt8](repeating: 0, count: 32))
        guard case .refused(let why) = OutOfBand.plan(record: record, state: state, label: Array("phone".utf8), at: t0,
                                                     options: ModuleOptions(), using: &rng) else { return XCTFail("a send in the future") }
        XCTAssertTrue(why.string.contains("wait"), why.string)
        XCTAssertEqual(state.sends(within: 3600, of: t0), 1, "the future one counts as now; the ancient one not at all")
        XCTAssertEqual(secondsSince(Int64.min, at: Int64.max), Int64.max)
        // The clock set back an hour: the sends of "the future" still count.
        var recent = UserState()
        for i in 0..<5 { recent.recordSend(at: t0 + Int64(i)) }
        guard case .refused = OutOfBand.plan(record: record, state: recent, label: Array("phone".utf8), at: t0 - 3600,
                                            options: ModuleOptions(), using: &rng) else { return XCTFail("a clock step reset the limit") }
    }

    func testEnrolmentCodeIsKeptApartFromLoginCodes() throws {
        let (dir, _, store) = try makeStore()
        defer { removeTemporaryDirectory(dir) }
        var rng = SplitMix64(seed: 7)
        let factor = try phone()
        guard case .send(let code, _, _, _) = try store.sendEnrolmentCode(user: Array("carol".utf8), accountUID: 1003, factor: factor,
                                                                        at: t0, options: ModuleOptions(), using: &rng) else {
            return XCTFail("enrolment send")
        }
        let state = try store.readState(user: Array("carol".utf8))
        let pending = try XCTUnwrap(state.pending)
        XCTAssertEqual(pending.binding, OutOfBand.enrolmentBinding(for: factor))
        XCTAssertTrue(PendingCode.matches(pending, code: code, at: t0 + 1))
        // Saved: the enrolment's code is no login code for it.
        try store.enroll(user: Array("carol".utf8), accountUID: 1003, factor: factor, importedCodes: nil, using: &rng)
        guard case .enrolled(let enrolled) = try store.lookup(user: Array("carol".utf8), accountUID: 1003) else { return XCTFail("enrolled") }
        guard case .wrongCode = store.authenticate(answer: code, at: t0 + 2, options: ModuleOptions(), process: 1, enrolled: enrolled) else {
            return XCTFail("the enrolment code logged in")
        }
    }
}
