import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// `totp-enroll status [--all] [--user NAME] [--json]` as root on a private store: every
/// field, a locked user, a user at the hard cap, learned drift, and no secret in any output form.
final class StatusTests: XCTestCase {
    var fixture: PAMFixture!
    let secretB32 = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
    let tabletB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    var store: Store!

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "--user, --all and --store are root-only")
        fixture = try PAMFixture()
        try fixture.service("totp", ["auth required MODULE STORE max_failures=3 lockout=600"])
        store = try Store(path: Array(fixture.store.path.utf8))
    }

    override func tearDown() { fixture?.cleanup() }

    func tool(_ args: [String]) throws -> CommandResult {
        try runCommand([enrollURL.path] + args + ["--store", fixture.store.path])
    }

    func enrol(_ user: String, _ label: String, key: String) throws {
        awayFromStepBoundary()
        let code = String(decoding: try currentCode(try Base32.decode(Array(key.utf8))), as: UTF8.self)
        let r = try tool(["enroll", "--user", user, "--name", label, "--secret", key, "--code", code, "--qr", "none"])
        XCTAssertEqual(r.status, 0, r.stderr)
    }

    func auth(_ user: String, _ answer: [UInt8]) -> Int32 {
        fixture.authenticate(service: "totp", user: user, conversation: Conversation(answer: answer))
    }

    /// Every form of a secret that must never appear.
    func assertNoSecret(_ text: String, file: StaticString = #filePath, line: UInt = #line) throws {
        for key in [secretB32, tabletB32] {
            let bytes = try Base32.decode(Array(key.utf8))
            for needle in [key, key.lowercased(), hex(bytes), Data(bytes).base64EncodedString(), String(key.prefix(16))] {
                XCTAssertFalse(text.contains(needle), "secret in output: \(needle)", file: file, line: line)
            }
        }
    }

    func testEveryFieldForOneUserInTextAndJSON() throws {
        try enrol("nobody", "phone", key: secretB32)
        try enrol("nobody", "tablet \"a\\b\"", key: tabletB32)
        XCTAssertEqual(try tool(["recovery-codes", "--user", "nobody"]).status, 0)
        // One accepted code two steps ahead (drift +2), then two wrong codes.
        let tablet = try Base32.decode(Array(tabletB32.utf8))
        awayFromStepBoundary()
        XCTAssertEqual(auth("nobody", try currentCode(tablet, offsetSteps: 2)), PAM_SUCCESS)
        XCTAssertEqual(auth("nobody", Array("000000".utf8)), PAM_AUTH_ERR)
        XCTAssertEqual(auth("nobody", Array("000001".utf8)), PAM_AUTH_ERR)

        let text = try tool(["status", "--user", "nobody"])
        XCTAssertEqual(text.status, 0, text.stderr)
        try assertNoSecret(text.stdout + text.stderr)
        XCTAssertTrue(text.stdout.hasPrefix("nobody (uid 65534): 2 factors\n"), text.stdout)
        let rows = text.stdout.split(separator: "\n").map(String.init)
        let phone = try XCTUnwrap(rows.first { $0.hasPrefix("  phone ") }, text.stdout)
        XCTAssertTrue(phone.contains("SHA1") && phone.contains(" 6 ") && phone.contains("30s") && phone.hasSuffix(" 0"), phone)
        let tabletRow = try XCTUnwrap(rows.first { $0.hasPrefix("  tablet") }, text.stdout)
        XCTAssertTrue(tabletRow.hasSuffix("+2 steps (+60 s)"), tabletRow)
        XCTAssertTrue(text.stdout.contains("  Recovery codes: 10 of 10 left.\n"), text.stdout)
        XCTAssertTrue(text.stdout.contains("  Consecutive failures: 2.\n"), text.stdout)
        XCTAssertTrue(text.stdout.contains("  Locked: no.\n"), text.stdout)

        let json = try tool(["status", "--user", "nobody", "--json"])
        XCTAssertEqual(json.status, 0, json.stderr)
        try assertNoSecret(json.stdout + json.stderr)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let users = try XCTUnwrap(doc["users"] as? [[String: Any]])
        XCTAssertEqual(users.count, 1)
        let u = users[0]
        XCTAssertEqual(u["user"] as? String, "nobody")
        XCTAssertEqual(u["enrolled"] as? Bool, true)
        XCTAssertEqual(u["uid"] as? Int, 65534)
        XCTAssertEqual(u["failures"] as? Int, 2)
        XCTAssertEqual(u["locked"] as? Bool, false)
        XCTAssertTrue(u["locked_until"] is NSNull)
        XCTAssertEqual(u["locked_at_cap"] as? Bool, false)
        XCTAssertEqual(u["recovery_codes_left"] as? Int, 10)
        XCTAssertEqual(u["recovery_codes_total"] as? Int, 10)
        let factors = try XCTUnwrap(u["factors"] as? [[String: Any]])
        XCTAssertEqual(factors.map { $0["label"] as? String }, ["phone", "tablet \"a\\b\""])
        XCTAssertTrue(json.stdout.contains(#""label":"tablet \"a\\b\"""#), json.stdout)
        for f in factors {
            XCTAssertEqual(f["kind"] as? String, "totp")
            XCTAssertEqual(f["algorithm"] as? String, "sha1")
            XCTAssertEqual(f["digits"] as? Int, 6)
            XCTAssertEqual(f["period"] as? Int, 30)
            let created = try XCTUnwrap(f["created"] as? Int)
            XCTAssertLessThanOrEqual(abs(created - Int(time(nil))), 120)
            XCTAssertNotNil(f["last_used"] as? Int, "the enrolment step counts as used")
        }
        XCTAssertEqual(factors[0]["drift_steps"] as? Int, 0)
        XCTAssertEqual(factors[1]["drift_steps"] as? Int, 2)
        XCTAssertEqual(factors[1]["drift_seconds"] as? Int, 60)
        let lastUsed = try XCTUnwrap(factors[1]["last_used_step"] as? Int)
        XCTAssertEqual(lastUsed, Int(time(nil)) / 30 + 2, "the step accepted two ahead")
        XCTAssertEqual(Set(u.keys), ["user", "enrolled", "uid", "factors", "recovery_codes_left", "recovery_codes_total",
                                     "failures", "locked", "locked_until", "locked_at_cap",
                                     "codes_sent_last_hour", "codes_sent_last_day", "last_code_sent"])
        XCTAssertEqual(u["codes_sent_last_day"] as? Int, 0)
        XCTAssertTrue(u["last_code_sent"] is NSNull, "no code was sent")
        XCTAssertTrue(factors.allSatisfy { $0["destination"] is NSNull }, "app factors have no destination")
    }

    func testLockedUsersAndAllUsers() throws {
        try enrol("nobody", "phone", key: secretB32)
        try enrol("daemon", "phone", key: tabletB32)
        // nobody: three wrong codes start a 600 s lockout.
        for _ in 0..<3 { XCTAssertEqual(auth("nobody", Array("000000".utf8)), PAM_AUTH_ERR) }
        // daemon: at the hard cap.
        let daemon = Array("daemon".utf8)
        var s = try store.readState(user: daemon)
        s.failures = UserState.hardFailureCap
        try store.withLock(user: daemon) { () throws(MFAError) in try store.writeStateLocked(user: daemon, state: s) }
        // A record of a name without an account (userdel without purge) is listed too.
        try fixture.enroll("ghost-\(getpid())", secret: Array("abcdefghijabcdefghij".utf8))

        let text = try tool(["status", "--all"])
        XCTAssertEqual(text.status, 0, text.stderr)
        try assertNoSecret(text.stdout)
        XCTAssertTrue(text.stdout.contains("daemon (uid 1): 1 factor\n"), text.stdout)
        XCTAssertTrue(text.stdout.contains("ghost-\(getpid()) (uid not bound yet): 1 factor\n"), text.stdout)
        XCTAssertTrue(text.stdout.contains("  Locked: at the 100-failure cap, until root runs totp-enroll unlock.\n"), text.stdout)
        XCTAssertNotNil(text.stdout.range(of: #"  Locked: until \d{4}-\d\d-\d\d \d\d:\d\d UTC \((59\d|600) s\)\."#, options: .regularExpression),
                        text.stdout)
        XCTAssertFalse(text.stdout.contains(".lock") || text.stdout.contains(".state"), "only records are users")

        let json = try tool(["status", "--all", "--json"])
        XCTAssertEqual(json.status, 0, json.stderr)
        try assertNoSecret(json.stdout)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let users = try XCTUnwrap(doc["users"] as? [[String: Any]])
        XCTAssertEqual(users.map { $0["user"] as? String }, ["daemon", "ghost-\(getpid())", "nobody"], "byte order")
        let d = users[0], n = users[2]
        XCTAssertEqual(d["locked"] as? Bool, true)
        XCTAssertEqual(d["locked_at_cap"] as? Bool, true)
        XCTAssertEqual(d["failures"] as? Int, 100)
        XCTAssertEqual(n["locked"] as? Bool, true)
        XCTAssertEqual(n["locked_at_cap"] as? Bool, false)
        XCTAssertEqual(n["failures"] as? Int, 3)
        let until = try XCTUnwrap(n["locked_until"] as? Int)
        XCTAssertEqual(Double(until), Double(time(nil)) + 600, accuracy: 30)
        XCTAssertEqual(try XCTUnwrap(doc["time"] as? Int), Int(time(nil)), accuracy: 30)
        XCTAssertTrue(users[1]["uid"] is NSNull)

        // A stored label with a bidi override and a control-free escape (an old record): escaped
        // in the text, \u-escaped in the JSON.
        try store.write(user: Array("ghost-\(getpid())".utf8), record: UserRecord(factors: [
            try Factor(label: Array("x\u{202E}y\u{1B}".utf8).filter { $0 != 0x1B }, parameters: .default, created: 1,
                       secret: Array("abcdefghijabcdefghij".utf8)),
        ]))
        let escaped = try tool(["status", "--all"])
        XCTAssertFalse(escaped.stdout.contains("\u{202E}"), escaped.stdout)
        let escapedJSON = try tool(["status", "--all", "--json"])
        XCTAssertTrue(escapedJSON.stdout.contains(#""label":"x\u202ey""#), escapedJSON.stdout)
        XCTAssertFalse(escapedJSON.stdout.contains("\u{202E}"))

        // After unlock: not locked.
        XCTAssertEqual(try tool(["unlock", "--user", "nobody"]).status, 0)
        XCTAssertTrue(try tool(["status", "--user", "nobody"]).stdout.contains("  Locked: no.\n"))
    }

    func testEmptyStoreUnenrolledUserAndCorruptRecord() throws {
        let empty = try tool(["status", "--all"])
        XCTAssertEqual(empty.status, 0, empty.stderr)
        XCTAssertEqual(empty.stdout, "No enrolled users.\n")
        XCTAssertEqual(try tool(["status", "--all", "--json"]).stdout.contains("\"users\":[]"), true)
        let none = try tool(["status", "--user", "nobody", "--json"])
        XCTAssertEqual(none.status, 0, none.stderr)
        XCTAssertTrue(none.stdout.contains("{\"user\":\"nobody\",\"enrolled\":false,\"uid\":null,\"factors\":[]"), none.stdout)
        // A corrupt record: reported, the others still listed, exit status 1.
        try enrol("nobody", "phone", key: secretB32)
        let bad = fixture.store.appendingPathComponent("broken")
        XCTAssertTrue(FileManager.default.createFile(atPath: bad.path, contents: Data("pam_totp 9\n".utf8)))
        XCTAssertEqual(chmod(bad.path, 0o600), 0)
        let r = try tool(["status", "--all", "--json"])
        XCTAssertEqual(r.status, 1)
        let users = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])?["users"] as? [[String: Any]])
        XCTAssertEqual(users.map { $0["user"] as? String }, ["broken", "nobody"])
        XCTAssertTrue((users[0]["error"] as? String)?.contains("unsupported record version") == true, "\(users[0])")
    }

    /// An unprivileged user runs the set-uid tool: their own status, read from the root-only
    /// default store, without a password (nothing changes); never anyone else's.
    func testAUserSeesTheirOwnStatus() throws {
        let suid = try SetUIDFixture(prefix: "totpst", service: SetUIDFixture.passwordAndModuleService)
        defer { suid.cleanup() }
        awayFromStepBoundary()
        let code = String(decoding: try currentCode(try Base32.decode(Array(secretB32.utf8))), as: UTF8.self)
        let enrolled = try runCommand([enrollURL.path, "--user", suid.user, "--name", "phone", "--secret", "-", "--code", code, "--quiet"],
                                      input: secretB32 + "\n")
        XCTAssertEqual(enrolled.status, 0, enrolled.stderr)
        let asUser = ["setpriv", "--reuid=\(suid.uid)", "--regid=\(suid.gid)", "--init-groups", suid.binary]
        let own = try runCommand(asUser + ["status", "--json"])
        XCTAssertEqual(own.status, 0, own.stderr)
        try assertNoSecret(own.stdout + own.stderr)
        let users = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(own.stdout.utf8)) as? [String: Any])?["users"] as? [[String: Any]])
        XCTAssertEqual(users.map { $0["user"] as? String }, [suid.user])
        XCTAssertEqual(users.first?["uid"] as? Int, Int(suid.uid))
        XCTAssertEqual((users.first?["factors"] as? [[String: Any]])?.first?["label"] as? String, "phone")
        XCTAssertFalse(own.stderr.contains("Password"), "status asks no password")
        let text = try runCommand(asUser + ["status"])
        XCTAssertTrue(text.stdout.hasPrefix("\(suid.user) (uid \(suid.uid)): 1 factor\n"), text.stdout + text.stderr)
        for args in [["status", "--all"], ["status", "--user", "root"], ["status", "--store", "/tmp"]] {
            let r = try runCommand(asUser + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains("root only"), r.stderr)
        }
    }

    func testOnlyRootSeesOthers() throws {
        for args in [["status", "--all"], ["status", "--user", "root"]] {
            let r = try runCommand(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", enrollURL.path] + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains("root only"), r.stderr)
        }
        let both = try tool(["status", "--all", "--user", "nobody"])
        XCTAssertNotEqual(both.status, 0)
    }
}
