import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// `totp-enroll policy` over a whole stack (issue 35, item 2; docs/ARCHITECTURE.md, section 5.6):
/// every pam_totp line of a temporary pam.d directory (`--pamdir`) in order, with its settings
/// for the user and their sources, and the outcome by rule 18 — the pam-auth-update profile's
/// `nullok` line in common-auth, then the README's strict line in the service's own file.
final class StackPolicyTests: XCTestCase {
    var dir: URL!
    var pamdir: String { dir.appendingPathComponent("pam.d").path }
    var config: String { dir.appendingPathComponent("pam_totp.conf").path }
    var store: String { dir.appendingPathComponent("store").path }

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "policy is root's")
        dir = try makeTemporaryDirectory("pam_totp_stack_policy")
        try FileManager.default.createDirectory(atPath: pamdir, withIntermediateDirectories: true)
        XCTAssertEqual(mkdir(store, 0o700), 0)
        try write("common-auth", "auth [success=1 default=ignore] pam_unix.so nullok\nauth requisite pam_deny.so\n"
                  + "auth required pam_permit.so\nauth [success=ok default=die] pam_totp.so nullok # the profile\n")
        try write("svc", "#%PAM-1.0\n@include common-auth\n-auth optional pam_gnome_keyring.so\nauth   required   pam_totp.so\n"
                  + "account include common-account\n")
        try "store = \(store)\n[group daemon]\nexempt\n".write(toFile: config, atomically: true, encoding: .utf8)
        // nobody is enrolled; daemon is exempt by its group; bin has no factor.
        try Store(path: Array(store.utf8)).write(user: Array("nobody".utf8), record: UserRecord(uid: 65534, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: Array("12345678901234567890".utf8))]))
    }

    override func tearDown() {
        if let dir { removeTemporaryDirectory(dir) }
    }

    func write(_ name: String, _ text: String) throws {
        try text.write(toFile: pamdir + "/" + name, atomically: true, encoding: .utf8)
    }

    func policy(_ user: String, _ extra: [String] = [], service: String = "svc") throws -> (status: Int32, stdout: String, stderr: String) {
        let r = try runCommand([enrollURL.path, "policy", "--user", user, "--service", service, "--config", config, "--pamdir", pamdir] + extra)
        return (r.status, r.stdout, r.stderr)
    }

    func collapsed(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
    }

    func testEveryLineInOrderWithItsSettingsAndTheOutcome() throws {
        let unenrolled = try policy("bin")
        XCTAssertEqual(unenrolled.status, 0, unenrolled.stderr)
        let lines = collapsed(unenrolled.stdout)
        XCTAssertTrue(lines.contains("pam_totp line 1 of 2: \(pamdir)/common-auth:4: auth [success=ok default=die] pam_totp.so nullok"), unenrolled.stdout)
        XCTAssertTrue(lines.contains("pam_totp line 2 of 2: \(pamdir)/svc:4: auth required pam_totp.so"), unenrolled.stdout)
        // Each line's own settings: nullok from the first line, the default on the second.
        let nullok = lines.filter { $0.hasPrefix("nullok ") }
        XCTAssertEqual(nullok, ["nullok yes the pam.d line", "nullok no the built-in default"], unenrolled.stdout)
        XCTAssertTrue(lines.contains("for bin: bin has no factor and nullok applies: not asked (PAM_IGNORE)"), unenrolled.stdout)
        XCTAssertTrue(lines.contains("outcome: deny: \(pamdir)/svc:4 decides: bin has no factor and nullok does not apply: asked like anyone, then denied"),
                      unenrolled.stdout)

        let enrolled = try policy("nobody")
        XCTAssertEqual(enrolled.status, 0, enrolled.stderr)
        let e = collapsed(enrolled.stdout)
        XCTAssertTrue(e.contains { $0.hasPrefix("outcome: ask: \(pamdir)/common-auth:4 decides: nobody is enrolled: asked for a code; the later line asks nothing") },
                      enrolled.stdout)
        XCTAssertTrue(e.contains("for nobody: line 1 decided: this line asks nothing and returns its result"), enrolled.stdout)

        let exempt = try policy("daemon")
        XCTAssertEqual(exempt.status, 0, exempt.stderr)
        XCTAssertTrue(collapsed(exempt.stdout).contains { $0.hasPrefix("outcome: pass: no pam_totp line asks daemon") }, exempt.stdout)
        XCTAssertTrue(collapsed(exempt.stdout).contains("exempt yes [group daemon] at \(config):2"), exempt.stdout)

        // Both lines under nullok: an un-enrolled user passes.
        try write("svc", "@include common-auth\nauth required pam_totp.so nullok\n")
        XCTAssertTrue(collapsed(try policy("bin").stdout).contains { $0.hasPrefix("outcome: pass: no pam_totp line asks bin") })
        // A substack, a -auth line, a bracketed control with blanks, a module by its path.
        try write("svc", "auth substack sub\n-auth [success=ok   default=die] /lib/security/pam_totp.so nullok\n")
        try write("sub", "auth required pam_totp.so nullok\n")
        let sub = collapsed(try policy("bin").stdout)
        XCTAssertTrue(sub.contains("pam_totp line 1 of 2: \(pamdir)/sub:1: auth required pam_totp.so nullok"), sub.joined(separator: "\n"))
        XCTAssertTrue(sub.contains("pam_totp line 2 of 2: \(pamdir)/svc:2: -auth [success=ok default=die] /lib/security/pam_totp.so nullok"),
                      sub.joined(separator: "\n"))
        // An include that cannot be read is a warning naming its line.
        try write("svc", "auth include gone\nauth required pam_totp.so\n")
        XCTAssertTrue(collapsed(try policy("bin").stdout).contains("warning: \(pamdir)/svc:1: \(pamdir)/gone cannot be read"))
        // No pam_totp line at all.
        try write("svc", "auth required pam_unix.so\n")
        let none = try policy("bin")
        XCTAssertTrue(none.stdout.contains("no pam_totp line in the auth stack"), none.stdout)
        XCTAssertTrue(none.stdout.contains("outcome: pass: no pam_totp line in the stack"), none.stdout)
    }

    /// The enrolment service's built-in rule, as policy shows it: a `nullok = no` group's
    /// member without a factor passes the totp-enroll stack (the profile's line), with the rule
    /// named as the source; the site's own [service totp-enroll] section wins.
    func testTheEnrolmentServiceLetsAMandatoryGroupEnrol() throws {
        try "store = \(store)\n[group bin]\nnullok = no\n".write(toFile: config, atomically: true, encoding: .utf8)
        try write("totp-enroll", "@include common-auth\n")
        let r = try policy("bin", service: "totp-enroll")
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = collapsed(r.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("nullok yes built in for the totp-enroll service") }, r.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("outcome: pass: no pam_totp line asks bin") }, r.stdout)
        XCTAssertTrue(collapsed(try policy("bin").stdout).contains { $0.hasPrefix("outcome: deny:") }, "sshd-like services still deny")
        try "store = \(store)\n[group bin]\nnullok = no\n[service totp-enroll]\nnullok = no\n".write(toFile: config, atomically: true, encoding: .utf8)
        XCTAssertTrue(collapsed(try policy("bin", service: "totp-enroll").stdout).contains { $0.hasPrefix("outcome: deny:") })
    }

    func testJSONHasTheDesignsKeys() throws {
        for (user, outcome, deciding) in [("bin", "deny", 4), ("nobody", "ask", 4), ("daemon", "pass", 0)] {
            let r = try policy(user, ["--json"])
            XCTAssertEqual(r.status, 0, r.stderr)
            let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], r.stdout)
            XCTAssertEqual(doc["outcome"] as? String, outcome, user)
            XCTAssertEqual(doc["user"] as? String, user)
            let lines = try XCTUnwrap(doc["lines"] as? [[String: Any]])
            XCTAssertEqual(lines.count, 2)
            XCTAssertEqual(lines.map { $0["file"] as? String }, ["\(pamdir)/common-auth", "\(pamdir)/svc"])
            XCTAssertEqual(lines.map { $0["line"] as? Int }, [4, 4])
            XCTAssertEqual(lines.map { $0["control"] as? String }, ["[success=ok default=die]", "required"])
            XCTAssertEqual(lines.map { $0["arguments"] as? [String] }, [["nullok"], []])
            let settings = try XCTUnwrap(lines.first?["settings"] as? [String: [String: Any]])
            XCTAssertEqual(settings["nullok"]?["value"] as? Bool, true)
            XCTAssertEqual(settings["nullok"]?["source"] as? String, "the pam.d line")
            XCTAssertEqual(settings["adjacent_intervals"]?["value"] as? Int, 5)
            let decidingLine = doc["deciding_line"] as? [String: Any]
            XCTAssertEqual(decidingLine?["line"] as? Int, deciding == 0 ? nil : deciding, user)
            XCTAssertNotNil(doc["reason"] as? String)
        }
    }

    /// --arguments: one assumed line instead of the stack, as before.
    func testArgumentsAssumeOneLine() throws {
        let r = try policy("bin", ["--arguments", "nullok adjacent_intervals=1"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = collapsed(r.stdout)
        XCTAssertTrue(lines.contains("pam_totp line 1 of 1: --arguments: auth required pam_totp.so nullok adjacent_intervals=1"), r.stdout)
        XCTAssertTrue(lines.contains("adjacent_intervals 1 the pam.d line"), r.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("outcome: pass:") }, r.stdout)
        // --pamdir is root's, as policy is.
        XCTAssertNotEqual(try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", enrollURL.path,
                                          "policy", "--user", "nobody", "--service", "svc", "--pamdir", pamdir]).status, 0)
    }
}
