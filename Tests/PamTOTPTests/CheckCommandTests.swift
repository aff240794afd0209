import Foundation
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// `totp-enroll check` (issue 35, item 2; docs/ARCHITECTURE.md, section 5.6): each trap an admin
/// composing a stack falls into, found in a crafted temporary pam.d directory (`--pamdir`) and
/// sshd configuration (`--sshd-config`, run through the real `sshd -T`), named by FILE:LINE with
/// its fix, exit 1; a clean tree exits 0 with one line.
final class CheckCommandTests: XCTestCase {
    var dir: URL!
    var pamdir: String { dir.appendingPathComponent("pam.d").path }
    var config: String { dir.appendingPathComponent("pam_totp.conf").path }
    var sshdConfig: String { dir.appendingPathComponent("sshd_config").path }
    var socketPath: String { dir.appendingPathComponent("socket").path }
    let sshd = "/usr/sbin/sshd"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "check is root's")
        try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: sshd), "needs sshd (openssh-server) for sshd -T")
        dir = try makeTemporaryDirectory("pam_totp_check")
        try FileManager.default.createDirectory(atPath: pamdir, withIntermediateDirectories: true)
    }

    override func tearDown() {
        if let dir { removeTemporaryDirectory(dir) }
    }

    func write(_ name: String, _ text: String) throws {
        try text.write(toFile: pamdir + "/" + name, atomically: true, encoding: .utf8)
    }

    func check(_ extra: [String] = []) throws -> (status: Int32, stdout: String, stderr: String) {
        let r = try runCommand([enrollURL.path, "check", "--pamdir", pamdir, "--config", config, "--sshd-config", sshdConfig, "--sshd", sshd] + extra)
        return (r.status, r.stdout, r.stderr)
    }

    /// A tree with none of the traps: the sshd stack asks pam_totp once, keyboard-interactive
    /// is on, a mandatory group can enrol, the locker's pam-totpd accepts, senders are named.
    func writeClean() throws -> Int32 {
        try write("common-auth", "auth [success=1 default=ignore] pam_unix.so nullok\nauth requisite pam_deny.so\nauth required pam_permit.so\n")
        try write("sshd", "@include common-auth\nauth required pam_totp.so\naccount required pam_unix.so\n")
        try write("totp-enroll", "@include common-auth\nauth required pam_totp.so nullok\n")
        try write("i3lock", "auth [success=ok ignore=ignore cred_insufficient=bad default=die] pam_totp.so forward_pass code_after_password\n"
                  + "auth requisite pam_unix.so use_first_pass\nauth required pam_totp.so forward_pass after_password\n")
        try "store = \(dir.path)/store\nsocket = \(socketPath)\nfactor_kinds = totp sms\nsms_command = /bin/true\n[group daemon]\nnullok = no\n[service totp-enroll]\nnullok = yes\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        try "UsePAM yes\nKbdInteractiveAuthentication yes\n".write(toFile: sshdConfig, atomically: true, encoding: .utf8)
        return try listen(at: socketPath)
    }

    func testACleanTreeHasNoFindings() throws {
        let fd = try writeClean()
        defer { close(fd) }
        let r = try check()
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.hasPrefix("no problems found ("), r.stdout)
        XCTAssertEqual(r.stdout.split(separator: "\n").count, 1, r.stdout)
        let json = try check(["--json"])
        XCTAssertEqual(json.status, 0, json.stderr)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual((doc["findings"] as? [Any])?.count, 0)
        // Root only.
        XCTAssertNotEqual(try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", enrollURL.path,
                                          "check", "--pamdir", pamdir]).status, 0)
    }

    /// Every trap at once, each found at its FILE:LINE with a fix.
    func testEachTrapIsFoundWithItsPlaceAndFix() throws {
        let fd = try writeClean()
        close(fd)  // the locker's pam-totpd is not running
        // The profile's nullok line in common-auth, plus the README's strict line in sshd; sshd asks a key first.
        try write("common-auth", "auth [success=1 default=ignore] pam_unix.so nullok\nauth requisite pam_deny.so\nauth required pam_permit.so\n"
                  + "auth [success=ok default=die] pam_totp.so nullok\n")
        try write("sshd", "@include common-auth\nauth required pam_totp.so\n")
        try "UsePAM yes\nAuthenticationMethods publickey,keyboard-interactive\n"
            .write(toFile: sshdConfig, atomically: true, encoding: .utf8)
        try write("swaylock", "auth include common-auth\nauth required pam_totp.so after_password\n")
        // One-field stacks: the code checked before the password; a code split off and never checked.
        try write("radiusd", "auth required pam_totp.so forward_pass\nauth required pam_unix.so use_first_pass\n")
        try write("openvpn", "auth [success=ok ignore=ignore default=die] pam_totp.so forward_pass code_after_password\nauth requisite pam_unix.so use_first_pass\n")
        // Review: what the one-field stack's promise rests on.
        try write("vpn-required", "auth [success=ok ignore=ignore default=die] pam_totp.so forward_pass code_after_password\n"
                  + "auth required pam_unix.so use_first_pass\nauth required pam_totp.so nullok\nauth optional pam_totp.so forward_pass after_password\n")
        try write("vpn-jump", "auth [success=ok ignore=ignore default=die] pam_totp.so forward_pass code_after_password\n"
                  + "auth [success=1 default=die] pam_unix.so use_first_pass\nauth required pam_totp.so forward_pass after_password\nauth required pam_permit.so\n")
        try "store = \(dir.path)/store\nsocket = \(socketPath)\nfactor_kinds = totp email\n[group daemon]\nnullok = no\n[service totp-enroll]\nnullok = no\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let r = try check()
        XCTAssertEqual(r.status, 1, r.stdout + r.stderr)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        func found(_ place: String, _ words: String) -> Bool {
            lines.contains { $0.hasPrefix(place + ": ") && $0.contains(words) && $0.contains("; fix: ") }
        }
        XCTAssertTrue(found("\(pamdir)/sshd:1", "includes common-auth"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/common-auth:4", "keeps this earlier pam_totp line"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/swaylock:2", "after_password line with no forward_pass line"), r.stdout)
        XCTAssertTrue(found("\(config):4", "[group daemon] sets nullok = no"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/i3lock:1", "nothing accepts on \(socketPath)"), r.stdout)
        XCTAssertTrue(found("\(config):3", "factor_kinds offers email"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/common-auth:4", "nullok is shadowed by the strict pam_totp line \(pamdir)/sshd:2"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/radiusd:1", "checks the code before the password module"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/openvpn:1", "the code is split off and never checked"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/vpn-required:2", "does not end the stack on a wrong password"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/vpn-required:3", "a pam_totp line between the code_after_password line"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/vpn-required:4", "lets a wrong code through"), r.stdout)
        XCTAssertTrue(found("\(pamdir)/vpn-jump:2", "can end the stack or jump before the after_password line"), r.stdout)
        XCTAssertFalse(lines.contains { !$0.hasPrefix("/") }, "one finding a line, each naming its place: \(r.stdout)")

        let json = try check(["--json"])
        XCTAssertEqual(json.status, 1)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let findings = try XCTUnwrap(doc["findings"] as? [[String: Any]])
        XCTAssertEqual(findings.count, lines.count)
        let traps = Set(findings.compactMap { $0["trap"] as? String })
        XCTAssertEqual(traps, ["publickey-stack-asks-password", "publickey-stack-earlier-line",
                               "after-password-without-forward-pass", "mandatory-group-cannot-enrol", "locker-without-daemon",
                               "sent-kind-without-sender", "nullok-shadowed", "code-before-password", "code-never-checked",
                               "password-not-requisite", "after-password-skippable", "line-in-the-split", "after-password-not-required"])
        XCTAssertTrue(findings.allSatisfy { $0["file"] is String && $0["line"] is Int && $0["fix"] is String })
    }

    /// keyboard-interactive out of sshd's reach: KbdInteractiveAuthentication no (the first value
    /// wins), AuthenticationMethods without it, or with it while it is disabled (sshd -T refuses).
    func testKeyboardInteractiveOutOfReach() throws {
        let fd = try writeClean()
        defer { close(fd) }
        let cases = [
            ("UsePAM yes\nKbdInteractiveAuthentication no\nKbdInteractiveAuthentication yes\n",
             "sshd's effective KbdInteractiveAuthentication is no (set at \(sshdConfig):2)"),
            ("UsePAM yes\nKbdInteractiveAuthentication yes\nAuthenticationMethods publickey,password\n",
             "sshd's AuthenticationMethods (publickey,password) does not include keyboard-interactive"),
            ("UsePAM yes\nKbdInteractiveAuthentication no\nAuthenticationMethods publickey,keyboard-interactive\n",
             "sshd -T refuses sshd's configuration (Disabled method"),
            ("UsePAM no\n", "sshd runs with UsePAM no"),
        ]
        for (sshd, expected) in cases {
            try sshd.write(toFile: sshdConfig, atomically: true, encoding: .utf8)
            let r = try check()
            XCTAssertEqual(r.status, 1, sshd + r.stdout + r.stderr)
            XCTAssertTrue(r.stdout.hasPrefix("\(pamdir)/sshd:2: " + expected), sshd + r.stdout)
            XCTAssertTrue(r.stdout.split(separator: "\n").allSatisfy { $0.contains("; fix: ") }, r.stdout)
        }
    }

    /// A listening Unix socket at `path` (pam-totpd, as far as `check` can tell).
    func listen(at path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            for (i, b) in path.utf8.enumerated() where i < buf.count - 1 { buf[i] = b }
        }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(bound, 0, "bind \(path)")
        XCTAssertEqual(Glibc.listen(fd, 8), 0)
        return fd
    }
}
