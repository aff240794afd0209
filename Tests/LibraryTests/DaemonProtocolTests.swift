import XCTest
import TestSupport
@testable import MFADaemon
@testable import MFAImport
@testable import MFAPamStacks
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem
@testable import MFAWire

/// The module <-> pam-totpd protocol and DaemonService's rules, without a socket.
final class DaemonProtocolTests: XCTestCase {
    func request(_ op: DaemonOperation = .authenticate, answer: String = "123456") -> DaemonRequest {
        var o = ModuleOptions()
        o.nullok = true
        o.forwardPass = true
        o.adjacentIntervals = 2
        o.maxFailures = 7
        o.lockoutSeconds = 600
        o.store = Array("/tmp/store".utf8)
        return DaemonRequest(operation: op, service: Array("i3lock".utf8), user: Array("alice".utf8), options: o, answer: Array(answer.utf8))
    }

    func testRequestRoundTrip() throws {
        for op in [DaemonOperation.lookup, .authenticate] {
            let r = request(op)
            let frame = try XCTUnwrap(r.encoded())
            XCTAssertEqual(DaemonProtocol.frameLength(header: frame.prefix(6), reply: false), frame.count)
            XCTAssertNil(DaemonProtocol.frameLength(header: frame.prefix(6), reply: true), "a request is not a reply")
            let back = try DaemonRequest.decode(frame)
            XCTAssertEqual(back, r)
        }
        // A resync's second answer carries the first; the resync reach rides with the options.
        var resync = request()
        resync.previous = Array("654321".utf8)
        resync.options.hotpResyncWindow = 1000
        XCTAssertEqual(try DaemonRequest.decode(try XCTUnwrap(resync.encoded())), resync)
        resync.options.hotpResyncWindow = 1001
        let frame = try XCTUnwrap(resync.encoded())
        XCTAssertThrowsError(try DaemonRequest.decode(frame), "a resync reach past 1000 is refused")
        // Version 1's frames (before HOTP's fields) are refused by their magic, not misread.
        var old = try XCTUnwrap(request().encoded())
        old[3] = 0x31
        XCTAssertThrowsError(try DaemonRequest.decode(old))
        XCTAssertNil(DaemonProtocol.frameLength(header: old.prefix(6), reply: false))
    }

    func testEveryReplyKindRoundTrips() throws {
        let replies: [DaemonReply] = [
            .outcome(.success(factor: Array("phone".utf8), step: 56_666_667, digits: 8)),
            .outcome(.recoveryCode(remaining: 9)),
            .outcome(.wrongCode(replayed: true, failures: 3, lockedUntil: nil)),
            .outcome(.wrongCode(replayed: false, failures: 10, lockedUntil: 1_700_000_300)),
            .outcome(.resyncNeeded(failures: 4)),
            .outcome(.notRecorded(.system(operation: "pwrite state", errno: Errno(28)))),
            .outcome(.lockedOut(until: Int64.max, permanent: true)),
            .outcome(.lockedOut(until: 1_700_000_300, permanent: false)),
            .outcome(.unenrolled),
            .outcome(.failed(.insecureStore("store directory has the wrong owner"))),
            .outcome(.failed(.lockTimeout)),
            .outcome(.failed(.daemon("busy"))),
            .enrolled(FactorHints()),
            .enrolled(FactorHints(typed: false, sent: [FactorHint(kind: .sms, label: Array("phone".utf8), masked: Array("+1******1234".utf8)),
                                                    FactorHint(kind: .email, label: Array("work".utf8), masked: Array("a***@example.com".utf8))],
                                  disallowed: 2)),
            .enrolled({ var h = FactorHints(); h.codeDigits = 8; return h }()),
            .enrolled({ var h = FactorHints(typed: false, device: false); h.addPending(digits: 7); return h }()),
            .sent(fresh: true, sentAt: 1_700_000_000, expiresAt: 1_700_000_300, masked: Array("+1******1234".utf8)),
            .sent(fresh: false, sentAt: 1_700_000_000, expiresAt: 1_700_000_300, masked: []),
            .notSent("a code was sent 3 s ago: wait 27 s before asking for another"),
            .refused("a caller without root may only ask about its own account"),
            .firstFactor(.mayEnrol), .firstFactor(.enrolled), .firstFactor(.wrongCode), .firstFactor(.hadFactor),
        ]
        for reply in replies {
            let frame = reply.encoded()
            XCTAssertEqual(DaemonProtocol.frameLength(header: frame.prefix(6), reply: true), frame.count)
            XCTAssertEqual(try DaemonReply.decode(frame), reply)
        }
    }

    /// Every truncation, every extension and a flipped byte anywhere: an error, never a trap,
    /// and never a different valid message from a cut one.
    func testMalformedFramesAreRejected() throws {
        let frames = [try XCTUnwrap(request().encoded()), DaemonReply.outcome(.success(factor: Array("p".utf8), step: 1, digits: 6)).encoded()]
        for (i, frame) in frames.enumerated() {
            let decode: ([UInt8]) throws -> Void = i == 0 ? { _ = try DaemonRequest.decode($0) } : { _ = try DaemonReply.decode($0) }
            for n in 0..<frame.count {
                XCTAssertThrowsError(try decode(Array(frame.prefix(n))), "cut at \(n)")
            }
            XCTAssertThrowsError(try decode(frame + [0]), "a trailing byte")
            var longer = frame
            longer[5] &+= 1
            XCTAssertThrowsError(try decode(longer + [0]), "a longer body with a bad field layout")
            for version: UInt8 in [0x33, 0x35] {  // the version before enrolment at login, and a later one
                var magic = frame
                magic[3] = version
                XCTAssertThrowsError(try decode(magic), "version \(version - 0x30) magic")
            }
        }
        var rng = SplitMix64(seed: 99)
        for _ in 0..<20_000 {
            let n = Int(rng.next() % 64)
            var bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if rng.next() % 2 == 0, let valid = frames.first { bytes = Array(valid.prefix(Int(rng.next() % UInt64(valid.count)))) + bytes }
            _ = try? DaemonRequest.decode(bytes)
            _ = try? DaemonReply.decode(bytes)
        }
    }

    func testOutOfRangeOptionsAndOversizedFieldsAreRefused() throws {
        var r = request()
        r.options.store = Array("relative".utf8)
        XCTAssertThrowsError(try DaemonRequest.decode(try XCTUnwrap(r.encoded())))
        r = request()
        var frame = try XCTUnwrap(r.encoded())
        frame[8] = 11  // adjacent_intervals
        XCTAssertThrowsError(try DaemonRequest.decode(frame))
        frame = try XCTUnwrap(r.encoded())
        frame[9] = 0   // max_failures
        XCTAssertThrowsError(try DaemonRequest.decode(frame))
        frame = try XCTUnwrap(r.encoded())
        frame[7] = 16  // an unknown flag (8 is code_after_password)
        XCTAssertThrowsError(try DaemonRequest.decode(frame))
        r.answer = [UInt8](repeating: 0x31, count: DaemonProtocol.maxAnswerLength + 1)
        XCTAssertNil(r.encoded(), "an answer over the limit is not sent")
        // A header announcing more than the largest frame.
        XCTAssertNil(DaemonProtocol.frameLength(header: Array("PTQ4".utf8) + [0xFF, 0xFF], reply: false))
        XCTAssertNil(DaemonProtocol.frameLength(header: Array("PTQ4".utf8) + [0x10], reply: false))
    }

    /// Ops 4 and 5 (enrolment at first login) carry the new factor's label, and op 5 its secret
    /// (SHA-1, 6 digits, 30 s); both round-trip, and what a factor may not be is refused.
    func testEnrolmentAtLoginRequestsRoundTripAndAreBounded() throws {
        let label = Array("alice@host1".utf8), secret = Array("12345678901234567890".utf8)
        var check = request(.mayEnrolAtLogin, answer: "")
        check.newLabel = label
        var enrol = request(.enrolAtLogin)
        enrol.newLabel = label
        enrol.newSecret = secret
        for r in [check, enrol] {
            let frame = try XCTUnwrap(r.encoded())
            XCTAssertEqual(DaemonProtocol.frameLength(header: frame.prefix(6), reply: false), frame.count)
            XCTAssertEqual(try DaemonRequest.decode(frame), r)
            for n in 0..<frame.count { XCTAssertThrowsError(try DaemonRequest.decode(Array(frame.prefix(n))), "cut at \(n)") }
        }
        // The other ops carry no factor: fields set on them are not sent.
        var lookup = request(.lookup)
        lookup.newLabel = label
        lookup.newSecret = secret
        XCTAssertEqual(try DaemonRequest.decode(try XCTUnwrap(lookup.encoded())), request(.lookup))
        // No secret with op 4; one of 10 to 64 bytes with op 5; a label a factor may have.
        var bad = check
        bad.newSecret = secret
        XCTAssertThrowsError(try DaemonRequest.decode(try XCTUnwrap(bad.encoded())), "a secret with the checks")
        for (l, s) in [(label, Array(secret.prefix(9))), (label, [UInt8](repeating: 1, count: 65)), ([], secret),
                       (Array("a\u{1}b".utf8), secret), ([UInt8](repeating: 0x61, count: 65), secret)] {
            bad = enrol
            bad.newLabel = l
            bad.newSecret = s
            XCTAssertThrowsError(try DaemonRequest.decode(try XCTUnwrap(bad.encoded())), "label \(l.count) secret \(s.count)")
        }
        var reply = DaemonReply.firstFactor(.enrolled).encoded()
        reply[reply.count - 1] = 4
        XCTAssertThrowsError(try DaemonReply.decode(reply), "an unknown result")
    }

    /// Enrolment at first login through pam-totpd: root callers only (sshd, login, su) — a
    /// caller without root (a screen locker) is refused even for its own account, and nothing
    /// is saved; for root, the checks, a wrong code (nothing saved), a right one (saved, the
    /// step used) and a second enrolment (nothing added).
    func testEnrolmentAtLoginIsForRootCallersOnly() throws {
        let f = try Fixture()
        let t: Int64 = 1_700_000_010
        let secret = Array("abcdefghijabcdefghij".utf8)
        let right = try TOTP.code(secret: secret, parameters: .default, at: t)
        func enrol(_ user: String, _ op: DaemonOperation, answer: [UInt8], peer: UInt32) -> DaemonReply {
            var o = ModuleOptions()
            o.store = Array(f.store.utf8)
            let request = DaemonRequest(operation: op, service: Array("sshd".utf8), user: Array(user.utf8), options: o, answer: answer,
                                        newLabel: Array("carol@host1".utf8), newSecret: op == .enrolAtLogin ? secret : [])
            return f.service.handle(request, peer: PeerCredentials(uid: peer, pid: 77), at: t, account: f.accounts).reply
        }
        for op in [DaemonOperation.mayEnrolAtLogin, .enrolAtLogin] {
            guard case .refused = enrol("carol", op, answer: op == .enrolAtLogin ? right : [], peer: 1003) else {
                return XCTFail("carol's own screen locker, op \(op)")
            }
        }
        let store = try Store(path: Array(f.store.utf8))
        XCTAssertNil(try store.read(user: Array("carol".utf8)), "nothing saved for a caller without root")
        XCTAssertEqual(enrol("carol", .mayEnrolAtLogin, answer: [], peer: 0), .firstFactor(.mayEnrol))
        XCTAssertEqual(enrol("alice", .mayEnrolAtLogin, answer: [], peer: 0), .firstFactor(.hadFactor), "alice has a factor")
        XCTAssertEqual(enrol("carol", .enrolAtLogin, answer: Array("000000".utf8), peer: 0), .firstFactor(.wrongCode))
        XCTAssertNil(try store.read(user: Array("carol".utf8)), "a wrong code saves nothing")
        XCTAssertEqual(enrol("carol", .enrolAtLogin, answer: right, peer: 0), .firstFactor(.enrolled))
        let record = try XCTUnwrap(try store.read(user: Array("carol".utf8)))
        XCTAssertEqual(record.factors.map { $0.otpKey?.secret ?? [] }, [secret])
        XCTAssertEqual(record.factors.first?.data.enrolledStep, UInt64(t / 30), "the proving step is used")
        XCTAssertEqual(record.uid, 1003)
        let next = try TOTP.code(secret: Array("0123456789abcdefghij".utf8), parameters: .default, at: t)
        let other = DaemonRequest(operation: .enrolAtLogin, service: Array("sshd".utf8), user: Array("carol".utf8),
                                  options: { var o = ModuleOptions(); o.store = Array(f.store.utf8); return o }(), answer: next,
                                  newLabel: Array("carol@host2".utf8), newSecret: Array("0123456789abcdefghij".utf8))
        XCTAssertEqual(f.service.handle(other, peer: PeerCredentials(uid: 0, pid: 78), at: t, account: f.accounts).reply,
                       .firstFactor(.hadFactor), "a second first enrolment adds nothing")
        XCTAssertEqual(try store.read(user: Array("carol".utf8))?.factors.count, 1)
        guard case .outcome(.failed) = enrol("nobody-here", .mayEnrolAtLogin, answer: [], peer: 0) else {
            return XCTFail("no such account")
        }
    }

    // MARK: DaemonService

    final class Fixture {
        let root: URL
        let store: String
        let secret = Array("12345678901234567890".utf8)
        init() throws {
            root = try makeTemporaryDirectory()
            store = root.appendingPathComponent("store").path
            XCTAssertEqual(mkdir(store, 0o700), 0)
            var rng = SplitMix64(seed: 1)
            let s = try Store(path: Array(store.utf8))
            for (name, uid) in [("alice", UInt32(1001)), ("bob", UInt32(1002))] {
                try s.enroll(user: Array(name.utf8), accountUID: uid,
                             factor: try Factor(label: Array("phone".utf8), parameters: .default, created: 0, secret: secret),
                             importedCodes: nil, using: &rng)
            }
        }
        deinit { removeTemporaryDirectory(root) }

        var service: DaemonService<Store> {
            var site = ModuleOptions()
            site.store = Array(store.utf8)
            site.maxFailures = 5
            site.adjacentIntervals = 1
            site.lockoutSeconds = 120
            return DaemonService(site: site) { (path) throws(MFAError) in try Store(path: path) }
        }

        func accounts(_ name: [UInt8]) throws(MFAError) -> Account? {
            switch String(decoding: name, as: UTF8.self) {
            case "alice": return Account(name: name, uid: 1001)
            case "bob": return Account(name: name, uid: 1002)
            case "carol": return Account(name: name, uid: 1003)
            // Spellings a case- and space-insensitive directory resolves to alice.
            case "ALICE", "alice ": return Account(name: Array("alice".utf8), uid: 1001)
            case "broken": throw .system(operation: "getpwnam_r", errno: .ioError)
            default: return nil
            }
        }

        func failures(_ user: String) throws -> UInt32 { try Store(path: Array(store.utf8)).readState(user: Array(user.utf8)).failures }
    }

    func ask(_ f: Fixture, _ op: DaemonOperation, user: String, answer: [UInt8] = Array("000000".utf8), peer: UInt32,
             at t: Int64 = 1_700_000_010, options: ModuleOptions? = nil) -> DaemonReply {
        var o = options ?? ModuleOptions()
        o.store = Array("/nonexistent".utf8)  // only root's requests name the store
        if peer == 0 { o.store = Array(f.store.utf8) }
        let request = DaemonRequest(operation: op, service: Array("test".utf8), user: Array(user.utf8), options: o, answer: answer)
        return f.service.handle(request, peer: PeerCredentials(uid: peer, pid: 77), at: t, account: f.accounts).reply
    }

    func testACallerWithoutRootAsksOnlyAboutItsOwnAccount() throws {
        let f = try Fixture()
        XCTAssertEqual(ask(f, .lookup, user: "alice", peer: 1001), .enrolled(FactorHints()))
        XCTAssertEqual(ask(f, .lookup, user: "carol", peer: 1003), .outcome(.unenrolled))
        for (user, peer) in [("bob", UInt32(1001)), ("nobody-here", 1001), ("alice", 1003)] {
            for op in [DaemonOperation.lookup, .authenticate] {
                guard case .refused = ask(f, op, user: user, peer: peer) else { return XCTFail("\(user) asked by \(peer)") }
            }
        }
        XCTAssertEqual(try f.failures("bob"), 0, "a refused request counts nothing against bob")
        guard case .outcome(.failed(.system)) = ask(f, .authenticate, user: "broken", peer: 1001) else {
            return XCTFail("an NSS failure denies")
        }
        // Root asks about anyone; its failures count.
        guard case .outcome(.wrongCode(false, 1, nil)) = ask(f, .authenticate, user: "bob", peer: 0) else { return XCTFail("root") }
        let t: Int64 = 1_700_000_010
        let right = try TOTP.code(secret: f.secret, parameters: .default, at: t)
        XCTAssertEqual(ask(f, .authenticate, user: "alice", answer: right, peer: 1001, at: t),
                       .outcome(.success(factor: Array("phone".utf8), step: UInt64(t / 30), digits: 6)))
        guard case .outcome(.wrongCode(true, 1, nil)) = ask(f, .authenticate, user: "alice", answer: right, peer: 0, at: t) else {
            return XCTFail("a code used through the daemon is used for root's logins too")
        }
    }

    /// Review: pam-totpd read a name that cannot be a record name ("alice ") as unenrolled
    /// before asking NSS, and its database store looked a spelling up as given ("ALICE" found
    /// no row): under nullok, the password alone. Every request now works on the account's
    /// canonical name, so both spellings are alice, enrolled, with alice's code and counts.
    func testSpellingsNSSResolvesAreTheAccountsRecord() throws {
        let f = try Fixture()
        let t: Int64 = 1_700_000_010
        for spelling in ["ALICE", "alice "] {
            XCTAssertEqual(ask(f, .lookup, user: spelling, peer: 0), .enrolled(FactorHints()), "\(spelling) is alice's record")
            guard case .outcome(.wrongCode(false, _, nil)) = ask(f, .authenticate, user: spelling, peer: 0, at: t) else {
                return XCTFail("\(spelling): a wrong code is a wrong code for alice")
            }
        }
        XCTAssertEqual(try f.failures("alice"), 2, "both failures count against alice")
        let right = try TOTP.code(secret: f.secret, parameters: .default, at: t)
        XCTAssertEqual(ask(f, .authenticate, user: "alice ", answer: right, peer: 1001, at: t),
                       .outcome(.success(factor: Array("phone".utf8), step: UInt64(t / 30), digits: 6)))
    }

    /// A caller without root picks max_failures per request (at most the site's): choosing one
    /// that does not divide the next failure count each time must not avoid the lockout. The
    /// site's max_failures (5 here) locks whatever the requests asked for.
    func testACallerWithoutRootCannotDodgeTheLockoutWithAChangingMaxFailures() throws {
        let f = try Fixture()
        var t: Int64 = 1_700_000_010
        var locked = false
        for _ in 1...5 {
            let next = Int(try f.failures("alice")) + 1
            var o = ModuleOptions()
            o.maxFailures = UInt32((2...5).first { next % $0 != 0 } ?? 5)
            let reply = ask(f, .authenticate, user: "alice", peer: 1001, at: t, options: o)
            if case .outcome(.wrongCode(_, _, .some)) = reply { locked = true }
            t += 1
        }
        XCTAssertEqual(try f.failures("alice"), 5)
        XCTAssertTrue(locked, "five failures through the daemon and no lockout")
    }

    /// A caller without root cannot widen the window or raise the limits by writing its own
    /// request, nor choose the store.
    func testACallerWithoutRootOnlyMakesLimitsStricter() throws {
        let f = try Fixture()
        var lax = ModuleOptions()
        lax.adjacentIntervals = 10
        lax.maxFailures = 100
        lax.lockoutSeconds = 0
        lax.hotpResyncWindow = 1000
        lax.store = Array("/elsewhere".utf8)
        let request = DaemonRequest(operation: .authenticate, service: [], user: Array("alice".utf8), options: lax, answer: [])
        let user = f.service.effectiveOptions(request, peer: PeerCredentials(uid: 1001, pid: 1))
        XCTAssertEqual(user.adjacentIntervals, 1)
        XCTAssertEqual(user.maxFailures, 5)
        XCTAssertEqual(user.lockoutSeconds, 120)
        XCTAssertEqual(user.store, Array(f.store.utf8))
        var strict = lax
        strict.adjacentIntervals = 0
        strict.maxFailures = 2
        strict.lockoutSeconds = 900
        let stricter = f.service.effectiveOptions(DaemonRequest(operation: .authenticate, service: [], user: [], options: strict, answer: []),
                                                  peer: PeerCredentials(uid: 1001, pid: 1))
        XCTAssertEqual([stricter.adjacentIntervals, Int(stricter.maxFailures), Int(stricter.lockoutSeconds)], [0, 2, 900])
        // The resync reach: the narrower of the site's (100, the default) and the request's.
        XCTAssertEqual(user.hotpResyncWindow, 100)
        strict.hotpResyncWindow = 20
        XCTAssertEqual(f.service.effectiveOptions(DaemonRequest(operation: .authenticate, service: [], user: [], options: strict, answer: []),
                                                  peer: PeerCredentials(uid: 1001, pid: 1)).hotpResyncWindow, 20)
        XCTAssertEqual(f.service.effectiveOptions(request, peer: PeerCredentials(uid: 0, pid: 1)), lax, "root's settings as sent")
        // A code two steps old is outside the site's window of 1 for the user.
        let t: Int64 = 1_700_000_010
        let old = try TOTP.code(secret: f.secret, parameters: .default, at: t - 60)
        guard case .outcome(.wrongCode) = ask(f, .authenticate, user: "alice", answer: old, peer: 1001, at: t, options: lax) else {
            return XCTFail("the site's window applies")
        }
    }
}
