import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// A hardware token's counter-based factor end to end: enrolled with the real
/// `totp-enroll add-hotp` (verify before commit), then logged in through libpam by pamtester,
/// in process as root and through pam-totpd as an unprivileged caller: the counter moves past
/// every accepted code, a code never works twice, even sent by 20 processes at once.
final class HOTPLoginTests: XCTestCase {
    var root: URL!
    var store: URL!
    var service = ""
    /// RFC 4226 Appendix D's secret.
    let secret = Array("12345678901234567890".utf8)
    var secretB32: String { Base32.encodeString(secret) }

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d; --user and --store are root-only")
        root = try makeTemporaryDirectory("pam_totp_hotp")
        store = root.appendingPathComponent("store")
        service = "pam_totp_hotp_\(getpid())"
    }

    override func tearDown() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        if let root { removeTemporaryDirectory(root) }
    }

    func code(_ counter: UInt64) -> String {
        String(decoding: HOTP.code(key: HMACKey(algorithm: .sha1, key: secret), counter: counter, digits: 6), as: UTF8.self)
    }

    func addHOTP(_ extra: [String], user: String = "nobody") throws -> CommandResult {
        try runCommand([enrollURL.path, "add-hotp", "--store", store.path, "--user", user, "--secret", "-", "--quiet"] + extra,
                       input: secretB32 + "\n")
    }

    func pamtester(_ answer: String, user: String = "nobody") throws -> Int32 {
        try runCommand(["pamtester", service, user, "authenticate"], input: answer + "\n").status
    }

    func lastCounter(_ user: String = "nobody") throws -> UInt64? {
        let s = try Store(path: Array(store.path.utf8))
        let factor = try XCTUnwrap(try s.read(user: Array(user.utf8))?.factor(labelled: Array("fob".utf8)))
        return try s.readState(user: Array(user.utf8)).lastStep(of: factor)
    }

    func testEnrolledTokenLogsInAndItsCounterMovesPastEveryAcceptedCode() throws {
        // Verify before commit: a code for another counter saves nothing.
        let wrong = try addHOTP(["--counter", "5", "--code", code(6), "--name", "fob"])
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertTrue(wrong.stderr.contains("nothing was saved"), wrong.stderr)
        XCTAssertNil(try Store(path: Array(store.path.utf8)).read(user: Array("nobody".utf8)))
        let added = try addHOTP(["--counter", "5", "--code", code(5), "--name", "fob"])
        XCTAssertEqual(added.status, 0, added.stderr)
        let record = try XCTUnwrap(try Store(path: Array(store.path.utf8)).read(user: Array("nobody".utf8)))
        XCTAssertEqual(record.factors.map(\.kind), [.hotp])
        XCTAssertEqual(record.factors.first?.hotpCounter, 6, "saved with its counter past the code that proved it")

        try "auth required \(moduleURL.path) store=\(store.path) hotp_window=3 max_failures=100 lockout=0\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        XCTAssertNotEqual(try pamtester(code(5)), 0, "the enrolment's code never logs in")
        XCTAssertEqual(try pamtester(code(6)), 0)
        XCTAssertEqual(try lastCounter(), 6)
        XCTAssertNotEqual(try pamtester(code(6)), 0, "a code never works twice")
        XCTAssertNotEqual(try pamtester(code(10)), 0, "7, 8 and 9 are the window: 10 is past it")
        XCTAssertEqual(try pamtester(code(8)), 0, "two presses lost: still in the window")
        XCTAssertEqual(try lastCounter(), 8)
        XCTAssertNotEqual(try pamtester(code(7)), 0, "a skipped counter never comes back")
        let state = try Store(path: Array(store.path.utf8)).readState(user: Array("nobody".utf8))
        XCTAssertEqual(state.failures, 1, "failures count like wrong app codes; the last success cleared the earlier ones")
    }

    /// 20 processes send the same code at once: exactly one is accepted.
    func testOneCodeSentByTwentyProcessesAtOnceLogsInOnce() throws {
        XCTAssertEqual(try addHOTP(["--counter", "0", "--code", code(0), "--name", "fob"]).status, 0)
        try "auth required \(moduleURL.path) store=\(store.path) max_failures=100 lockout=0\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        for round: UInt64 in 1...3 {
            let statuses = try concurrentPamtesters(20, answer: code(round * 2))
            XCTAssertEqual(statuses.filter { $0 == 0 }.count, 1, "round \(round): exactly one of 20")
            XCTAssertEqual(try lastCounter(), round * 2)
        }
    }

    /// A caller without root (a screen locker) through pam-totpd: the same counter, the same rules.
    func testThroughPamTOTPDForACallerWithoutRoot() throws {
        let daemon = try DaemonFixture()
        defer { daemon.cleanup() }
        try daemon.start()
        let caller = try ThrowawayAccount(prefix: "thotp")
        defer { caller.delete() }
        store = URL(fileURLWithPath: daemon.store)
        let added = try addHOTP(["--counter", "0", "--code", code(0), "--name", "fob"], user: caller.name)
        XCTAssertEqual(added.status, 0, added.stderr)
        let path = "/etc/pam.d/" + service
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("auth required \(moduleURL.path) socket=\(daemon.socketPath)\n".utf8),
                                                     attributes: [.posixPermissions: 0o644]))
        XCTAssertEqual(chmod(path, 0o644), 0)
        func asCaller(_ answer: String) throws -> CommandResult {
            try runCommand(caller.setpriv + ["pamtester", "-v", service, caller.name, "authenticate"], input: answer + "\n")
        }
        let first = try asCaller(code(1))
        XCTAssertEqual(first.status, 0, first.stdout + first.stderr + daemon.output)
        XCTAssertNotEqual(try asCaller(code(1)).status, 0, "a code never works twice")
        XCTAssertEqual(try lastCounter(caller.name), 1)
        // A resync through pam-totpd: the far code alone is refused, then it and the next one log in.
        XCTAssertNotEqual(try asCaller(code(40)).status, 0, "one far code never logs in")
        XCTAssertEqual(try lastCounter(caller.name), 1)
        let resynced = try asCaller(code(40) + "\n" + code(41))
        XCTAssertEqual(resynced.status, 0, resynced.stdout + resynced.stderr + daemon.output)
        XCTAssertEqual(try lastCounter(caller.name), 41)
    }

    /// A token pressed past the window (RFC 4226, section 7.4): its code alone never logs in,
    /// and pam_totp asks for the next one in the same login; the two consecutive codes log in
    /// and move the counter past both. Through libpam (pamtester answering both prompts).
    func testATokenPressedPastTheWindowResyncsWithItsNextCodeInTheSameLogin() throws {
        XCTAssertEqual(try addHOTP(["--counter", "0", "--code", code(0), "--name", "fob"]).status, 0)
        try "auth required \(moduleURL.path) store=\(store.path) hotp_window=3 hotp_resync_window=50 max_failures=100 lockout=0\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        func login(_ answers: [UInt64]) throws -> CommandResult {
            try runCommand(["pamtester", "-v", service, "nobody", "authenticate"],
                           input: answers.map { code($0) + "\n" }.joined())
        }
        // Counters 1, 2, 3 are the window; 30 is past it.
        let alone = try login([30])
        XCTAssertNotEqual(alone.status, 0, "one far code never logs in")
        XCTAssertTrue(alone.stdout.contains("Token out of sync") || alone.stderr.contains("Token out of sync"),
                      "asked for the next code: " + alone.stdout + alone.stderr)
        XCTAssertNil(try lastCounter(), "the counter did not move")
        XCTAssertNotEqual(try login([30, 30]).status, 0, "the same answer twice (sshd's password conversation)")
        XCTAssertNotEqual(try login([30, 32]).status, 0, "not the following code")
        XCTAssertNotEqual(try login([60, 61]).status, 0, "past hotp_resync_window")
        XCTAssertNil(try lastCounter())
        let state = try Store(path: Array(store.path.utf8)).readState(user: Array("nobody".utf8))
        XCTAssertEqual(state.failures, 5, "the far code alone 1, the same code twice 1 (one attempt), the broken pair 2, past the reach 1")
        let resynced = try login([30, 31])
        XCTAssertEqual(resynced.status, 0, resynced.stdout + resynced.stderr)
        XCTAssertEqual(try lastCounter(), 31)
        XCTAssertEqual(try Store(path: Array(store.path.utf8)).readState(user: Array("nobody".utf8)).failures, 0)
        XCTAssertNotEqual(try login([31]).status, 0, "both codes are used up")
        XCTAssertNotEqual(try login([30, 31]).status, 0, "the pair never works twice")
        XCTAssertEqual(try login([32]).status, 0, "the window starts past the pair")
    }

    func testListShowsTheKindAndRootSeesTheCounter() throws {
        XCTAssertEqual(try addHOTP(["--counter", "41", "--code", code(41), "--name", "fob"]).status, 0)
        let list = try runCommand([enrollURL.path, "list", "--store", store.path, "--user", "nobody"])
        XCTAssertEqual(list.status, 0, list.stderr)
        let row = try XCTUnwrap(list.stdout.split(separator: "\n").first { $0.hasPrefix("fob") })
        XCTAssertTrue(row.contains("HOTP-SHA1"), String(row))
        XCTAssertTrue(row.contains("  42  "), String(row))
        let json = try runCommand([enrollURL.path, "status", "--json", "--store", store.path, "--user", "nobody"])
        XCTAssertEqual(json.status, 0, json.stderr)
        XCTAssertTrue(json.stdout.contains("\"kind\":\"hotp\""), json.stdout)
        XCTAssertTrue(json.stdout.contains("\"counter\":42"), json.stdout)
    }

    /// `list`, `status` and `status --json` for a token next to an app factor, before and after
    /// a login with it (codes from oathtool): each kind's columns and fields say what is true of
    /// it. They said `LAST USED` `next 33` for the token, and the JSON `period: 30` and
    /// `last_used: null` for a used one (issue 35, item 7). A token's state keeps the counter,
    /// not the time: its LAST USED is `never` or `used`, its counter a column of its own (root).
    func testListAndStatusSayWhatIsTrueOfATokenBeforeAndAfterItsUse() throws {
        func oathtool(_ args: [String]) throws -> String {
            let r = try runCommand(["oathtool"] + args)
            XCTAssertEqual(r.status, 0, r.stderr)
            return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let hotp = { (c: UInt64) throws -> String in try oathtool(["--hotp", "-c", "\(c)", hex(self.secret)]) }
        XCTAssertEqual(try addHOTP(["--counter", "32", "--code", hotp(32), "--name", "fob"]).status, 0)
        let appKey = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
        awayFromStepBoundary()
        let app = try runCommand([enrollURL.path, "enroll", "--store", store.path, "--user", "nobody", "--name", "app", "--secret", appKey,
                                  "--code", try oathtool(["--totp", "-b", appKey]), "--qr", "none", "--quiet"])
        XCTAssertEqual(app.status, 0, app.stderr)

        /// The table's rows as column name -> cell (cells are separated by two spaces or more).
        func rows(_ text: String, header: String) throws -> [String: [String: String]] {
            let lines = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            func cells(_ line: String) -> [String] {
                line.components(separatedBy: "  ").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
            let head = cells(try XCTUnwrap(lines.first { $0.hasPrefix(header) }, text))
            var out: [String: [String: String]] = [:]
            for line in lines where line.hasPrefix("fob ") || line.hasPrefix("app ") {
                let c = cells(line)
                XCTAssertEqual(c.count, head.count, "one cell per column: \(line) under \(head)")
                out[c[0]] = Dictionary(uniqueKeysWithValues: zip(head, c))
            }
            return out
        }
        func list() throws -> [String: [String: String]] {
            let r = try runCommand([enrollURL.path, "list", "--store", store.path, "--user", "nobody"])
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertFalse(r.stdout.contains("next"), r.stdout)
            return try rows(r.stdout, header: "LABEL")
        }

        var l = try list()
        XCTAssertEqual(l["fob"]?["ALGORITHM"], "HOTP-SHA1")
        XCTAssertEqual(l["fob"]?["DIGITS"], "6")
        XCTAssertEqual(l["fob"]?["PERIOD"], "-", "a token has no period")
        XCTAssertEqual(l["fob"]?["COUNTER"], "33", "the next counter, past the code that proved it")
        XCTAssertEqual(l["fob"]?["LAST USED"], "never", "no login used it yet")
        XCTAssertEqual(l["app"]?["PERIOD"], "30s")
        XCTAssertEqual(l["app"]?["COUNTER"], "-")
        XCTAssertTrue(l["app"]?["LAST USED"]?.hasSuffix(" UTC") ?? false, "\(l)")

        try "auth required \(moduleURL.path) store=\(store.path) max_failures=100 lockout=0\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        XCTAssertEqual(try pamtester(try hotp(33)), 0, "the token's next code logs in")

        l = try list()
        XCTAssertEqual(l["fob"]?["COUNTER"], "34")
        XCTAssertEqual(l["fob"]?["LAST USED"], "used", "used, at a time the state does not keep")
        XCTAssertEqual(l["fob"]?["PERIOD"], "-")

        let text = try runCommand([enrollURL.path, "status", "--store", store.path, "--user", "nobody"])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertFalse(text.stdout.contains("next") || text.stdout.contains(" yes"), text.stdout)
        let s = try rows(text.stdout, header: "LABEL")
        XCTAssertEqual(s["fob"]?["PERIOD"], "-")
        XCTAssertEqual(s["fob"]?["COUNTER"], "34")
        XCTAssertEqual(s["fob"]?["LAST USED"], "used")
        XCTAssertEqual(s["fob"]?["DRIFT"], "-")
        XCTAssertEqual(s["app"]?["PERIOD"], "30s")
        XCTAssertEqual(s["app"]?["COUNTER"], "-")
        XCTAssertEqual(s["app"]?["DRIFT"], "0")
        XCTAssertEqual(s["app"]?["LAST USED"], l["app"]?["LAST USED"], "list and status agree")

        let json = try runCommand([enrollURL.path, "status", "--json", "--store", store.path, "--user", "nobody"])
        XCTAssertEqual(json.status, 0, json.stderr)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let factors = try XCTUnwrap((doc["users"] as? [[String: Any]])?.first?["factors"] as? [[String: Any]])
        let fob = try XCTUnwrap(factors.first { $0["label"] as? String == "fob" })
        let appFactor = try XCTUnwrap(factors.first { $0["label"] as? String == "app" })
        XCTAssertEqual(fob["kind"] as? String, "hotp")
        XCTAssertTrue(fob["period"] is NSNull, "no period for a token: \(fob)")
        XCTAssertEqual(fob["digits"] as? Int, 6)
        XCTAssertEqual(fob["counter"] as? Int, 34)
        XCTAssertEqual(fob["used"] as? Bool, true)
        XCTAssertTrue(fob["last_used"] is NSNull, "the time is not kept: \(fob)")
        XCTAssertTrue(fob["last_used_step"] is NSNull, "a counter is not a step: \(fob)")
        XCTAssertTrue(fob["drift_steps"] is NSNull && fob["drift_seconds"] is NSNull, "\(fob)")
        XCTAssertEqual(appFactor["kind"] as? String, "totp")
        XCTAssertEqual(appFactor["period"] as? Int, 30)
        XCTAssertTrue(appFactor["counter"] is NSNull)
        XCTAssertEqual(appFactor["used"] as? Bool, true)
        XCTAssertNotNil(appFactor["last_used"] as? Int)
        XCTAssertEqual(appFactor["drift_steps"] as? Int, 0)
    }

    func concurrentPamtesters(_ count: Int, answer: String) throws -> [Int32] {
        try startPamtestersAtOnce(count, service: service, user: "nobody", answer: answer)
    }

}
