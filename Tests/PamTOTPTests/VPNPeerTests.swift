import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The shipped one-field stack behind the real servers (issue 39): Debian's FreeRADIUS 3.2
/// (rlm_pam, running as freerad as Debian's unit runs it; radclient sends one Access-Request, no
/// retries) and OpenVPN 2.6 (openvpn-plugin-auth-pam; server and client in network namespaces
/// with /dev/net/tun). The servers are driven by scripts/peers/radius.sh and openvpn.sh.
let peersDirectory = packageRoot.appendingPathComponent("scripts/peers")

/// `pam.d/NAME`'s active lines with the module's path and `arguments` on each pam_totp line,
/// `nullok` added to them if asked, and an account line (rlm_pam and the plugin call pam_acct_mgmt).
func shippedOneFieldStack(_ name: String, module: String, arguments: String, nullok: Bool = false) throws -> String {
    let text = try String(contentsOf: packageRoot.appendingPathComponent("pam.d/" + name), encoding: .utf8)
    let lines = text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && !$0.isEmpty }
        .map { $0.replacingOccurrences(of: "pam_totp.so", with: module) }
        .map { $0.contains(module) ? $0 + " " + arguments + (nullok ? " nullok" : "") : $0 }
    return (lines + ["account required pam_unix.so"]).joined(separator: "\n") + "\n"
}

final class RADIUSTests: XCTestCase {
    var daemon: DaemonFixture!
    var account: ThrowawayAccount!
    var dir: URL!
    var services: [String] = []
    var port = 0
    let secret = randomTOTPSecret()

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: freeradius as freerad, /etc/pam.d, a throwaway account, pam-totpd")
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/freeradius"), getpwnam("freerad") != nil else {
            XCTFail("freeradius not installed: make check installs freeradius and freeradius-utils")
            throw XCTSkip("no freeradius")
        }
        do {
            dir = try makeTemporaryDirectory("pam_totp_radius")
            XCTAssertEqual(chmod(dir.path, 0o755), 0)
            account = try ThrowawayAccount(prefix: "trad")
            daemon = try DaemonFixture()
            port = 20000 + Int(getpid() % 20000)
        } catch {
            tearDown()
            throw error
        }
    }

    override func tearDown() {
        if let dir {
            _ = try? runCommand([peersDirectory.appendingPathComponent("radius.sh").path, "stop", dir.path + "/radius"])
            removeTemporaryDirectory(dir)
        }
        for s in services { unlink("/etc/pam.d/" + s) }
        daemon?.cleanup()
        account?.delete()
        (daemon, account, dir, services) = (nil, nil, nil, [])
    }

    /// pam-totpd with `settings`, the shipped stack (its nullok as asked) as a PAM service, and
    /// radiusd as freerad on it. The module is copied where freerad can read it (the build
    /// directory may be under a home freerad cannot enter).
    func start(daemonSettings: String, nullok: Bool = false) throws {
        // A second start: a fresh pam-totpd (the running one would be left behind).
        if daemon.process != nil {
            daemon.cleanup()
            daemon = try DaemonFixture()
        }
        try "store = \(daemon.store)\nmax_failures = 3\nlockout = 300\n\(daemonSettings)\n"
            .write(toFile: daemon.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
        try daemon.start()
        let module = dir.appendingPathComponent("pam_totp.so").path
        if !FileManager.default.fileExists(atPath: module) {
            try FileManager.default.copyItem(atPath: moduleURL.path, toPath: module)
            XCTAssertEqual(chmod(module, 0o644), 0)
        }
        let service = "pam_totp_radius_\(getpid())_\(services.count)"
        try shippedOneFieldStack("radiusd", module: module, arguments: "socket=\(daemon.socketPath)", nullok: nullok)
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        services.append(service)
        let radius = dir.path + "/radius"
        _ = try? runCommand([peersDirectory.appendingPathComponent("radius.sh").path, "stop", radius])
        let r = try runCommand([peersDirectory.appendingPathComponent("radius.sh").path, "start", radius, service, String(port)])
        XCTAssertEqual(r.status, 0, "radiusd did not start: " + r.stdout + r.stderr)
    }

    /// One Access-Request: "Access-Accept" or "Access-Reject".
    func radius(_ password: String, user: String? = nil) throws -> String {
        let r = try runCommand([peersDirectory.appendingPathComponent("radius.sh").path, "auth", String(port), user ?? account.name, password])
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + (r.status > 1 ? " " + r.stderr : "")
    }

    var state: UserState { get throws { try daemon.state(account.name) } }

    /// Before trusted_callers, Debian's radiusd (freerad) was refused for everyone; named, the
    /// one-field stack: accept once, replay and wrong code refused (counted), the password alone
    /// refused, a stranger's tries count nothing and spend no code.
    func testFreeRADIUSAsFreeradWithTheShippedStack() throws {
        try daemon.enroll(account.name, uid: account.uid, secret: secret)
        // Not named: refused, with pam-totpd's reason in syslog (the failure the issue reports).
        try start(daemonSettings: "")
        awayFromStepBoundary(margin: 6)
        XCTAssertEqual(try radius(account.password + (try codeNow(secret))), "Access-Reject")
        XCTAssertEqual(try state.failures, 0)
        daemon.cleanup()
        daemon = try DaemonFixture()
        try daemon.enroll(account.name, uid: account.uid, secret: secret)
        try start(daemonSettings: "trusted_callers = freerad")
        awayFromStepBoundary(margin: 10)
        // Strangers: any password and a code, 3 times (max_failures = 3): nothing counted.
        let right = try codeNow(secret)
        for guess in ["000000", "123456", right] {
            XCTAssertEqual(try radius("wrong-password" + guess), "Access-Reject")
        }
        XCTAssertEqual(try state.failures, 0, "a stranger's tries counted: " + daemon.output)
        XCTAssertTrue(try state.lastSteps.isEmpty, "a wrong password spent the code")
        XCTAssertEqual(try radius(account.password + right), "Access-Accept", daemon.output)
        XCTAssertEqual(try radius(account.password + right), "Access-Reject", "a replayed code")
        XCTAssertEqual(try state.failures, 1)
        XCTAssertEqual(try radius(account.password), "Access-Reject", "the password alone")
        XCTAssertEqual(try radius(account.password + (try codeOutsideWindow(secret))), "Access-Reject", "a wrong code")
        XCTAssertEqual(try state.failures, 2, "the user's own wrong code counts")
    }

    /// A user without a factor: refused by the shipped stack; let in with the password alone
    /// when nullok is added, and still not with a wrong password.
    func testAnUnenrolledUserUnderNullok() throws {
        try start(daemonSettings: "trusted_callers = freerad")
        XCTAssertEqual(try radius(account.password + "123456"), "Access-Reject", "no factor, no nullok")
        try start(daemonSettings: "trusted_callers = freerad", nullok: true)
        XCTAssertEqual(try radius(account.password), "Access-Accept", daemon.output)
        XCTAssertEqual(try radius("not-" + account.password), "Access-Reject")
    }
}

final class OpenVPNTests: XCTestCase {
    var pam: PAMFixture!
    var account: ThrowawayAccount!
    var dirs: [URL] = []
    var services: [String] = []
    let secret = randomTOTPSecret()
    let plugin = "/usr/lib/x86_64-linux-gnu/openvpn/plugins/openvpn-plugin-auth-pam.so"
    var script: String { peersDirectory.appendingPathComponent("openvpn.sh").path }

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: network namespaces, /dev/net/tun, /etc/pam.d, a throwaway account")
        guard FileManager.default.fileExists(atPath: plugin) else {
            XCTFail("openvpn not installed: make check installs it")
            throw XCTSkip("no openvpn")
        }
        do {
            pam = try PAMFixture()
            account = try ThrowawayAccount(prefix: "tovpn")
            try pam.enroll(account.name, secret: secret)
        } catch {
            tearDown()
            throw error
        }
    }

    override func tearDown() {
        for d in dirs {
            _ = try? runCommand([script, "stop", d.path])
            removeTemporaryDirectory(d)
        }
        for s in services { unlink("/etc/pam.d/" + s) }
        account?.delete()
        pam?.cleanup()
        (pam, account, dirs, services) = (nil, nil, [], [])
    }

    /// A PAM service with `text`; its name.
    func service(_ text: String) throws -> String {
        let name = "pam_totp_openvpn_\(getpid())_\(services.count)"
        try text.write(toFile: "/etc/pam.d/" + name, atomically: true, encoding: .utf8)
        services.append(name)
        return name
    }

    /// An OpenVPN server (the plugin on `service`, the extra lines); its directory.
    func server(_ service: String, _ extra: [String] = []) throws -> URL {
        let d = try makeTemporaryDirectory("pam_totp_ovpn")
        dirs.append(d)
        let r = try runCommand([script, "start", d.path, service] + extra)
        XCTAssertEqual(r.status, 0, "openvpn did not start: " + r.stdout + r.stderr)
        return d
    }

    func connect(_ d: URL, _ password: String, extra: [String] = []) throws -> String {
        let r = try runCommand([script, "connect", d.path, account.name, password] + extra)
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + (r.status > 1 ? " " + r.stderr : "")
    }

    func disconnect(_ d: URL) { _ = try? runCommand([script, "disconnect", d.path]) }

    var arguments: String { "store=\(pam.store.path) max_failures=3 lockout=300" }

    /// One field (the password followed by the code): accepted once; replay, wrong code and the
    /// password alone refused; a stranger's tries count nothing and spend no code.
    func testOneField() throws {
        let stack = try shippedOneFieldStack("openvpn", module: moduleURL.path, arguments: arguments)
        let d = try server(try service(stack))
        awayFromStepBoundary(margin: 8)
        let right = try codeNow(secret)
        XCTAssertEqual(try connect(d, "wrong-password" + right), "AUTH_FAILED")
        XCTAssertEqual(try pam.state(account.name).failures, 0, "a stranger's try counted")
        XCTAssertTrue(try pam.state(account.name).lastSteps.isEmpty, "a wrong password spent the code")
        XCTAssertEqual(try connect(d, account.password + right), "CONNECTED")
        XCTAssertEqual(try runCommand([script, "ping", d.path]).status, 0, "no traffic through the tunnel")
        disconnect(d)
        XCTAssertEqual(try connect(d, account.password + right), "AUTH_FAILED", "a replayed code")
        XCTAssertEqual(try connect(d, account.password), "AUTH_FAILED", "the password alone")
        XCTAssertEqual(try pam.state(account.name).failures, 1, "the replay counted once; the password alone not at all")
    }

    /// static-challenge: the client asks for the code apart; the plugin answers the two-prompt
    /// stack's "Password: " with the password and "Verification code: " with the code.
    func testStaticChallenge() throws {
        let stack = "auth requisite pam_unix.so\nauth required \(moduleURL.path) \(arguments)\naccount required pam_unix.so\n"
        let name = try service(stack)
        let d = try server(name, ["plugin \(plugin) \"\(name) login USERNAME password PASSWORD verification OTP\""])
        awayFromStepBoundary(margin: 8)
        let right = try codeNow(secret)
        XCTAssertEqual(try connect(d, account.password, extra: ["--challenge", right]), "CONNECTED")
        disconnect(d)
        XCTAssertEqual(try connect(d, account.password, extra: ["--challenge", right]), "AUTH_FAILED", "a replayed code")
        XCTAssertEqual(try connect(d, "wrong", extra: ["--challenge", try codeNow(secret)]), "AUTH_FAILED")
        XCTAssertEqual(try pam.state(account.name).failures, 1, "only the replay (after the right password) counted")
    }

    /// The documented settings (auth-gen-token on the server, auth-nocache on the client) keep
    /// the tunnel across a renegotiation; without the token the client sends the used code again,
    /// pam_totp refuses it as replayed, and the tunnel drops. Both at once, 15 s renegotiation.
    func testATunnelSurvivesRenegotiationWithAuthGenToken() throws {
        let stack = try shippedOneFieldStack("openvpn", module: moduleURL.path, arguments: "store=\(pam.store.path) max_failures=100 lockout=0")
        let name = try service(stack)
        let withToken = try server(name, ["reneg-sec 15", "auth-gen-token 3600 120"])
        let without = try server(name, ["reneg-sec 15"])
        awayFromStepBoundary(margin: 8)
        XCTAssertEqual(try connect(withToken, account.password + (try codeNow(secret)), extra: ["auth-nocache"]), "CONNECTED")
        XCTAssertEqual(try connect(without, account.password + String(decoding: try currentCode(secret, offsetSteps: 1), as: UTF8.self), extra: ["auth-nocache"]), "CONNECTED")
        // Both renegotiations wait at once.
        let a = Process(), b = Process()
        let outA = dirs[0].appendingPathComponent("reneg.out"), outB = dirs[1].appendingPathComponent("reneg.out")
        for (p, d, out) in [(a, withToken, outA), (b, without, outB)] {
            FileManager.default.createFile(atPath: out.path, contents: nil)
            p.executableURL = URL(fileURLWithPath: script)
            p.arguments = ["wait-reneg", d.path, "30"]
            p.standardOutput = try FileHandle(forWritingTo: out)
            try p.run()
        }
        a.waitUntilExit()
        b.waitUntilExit()
        let resultA = (try? String(contentsOf: outA, encoding: .utf8)) ?? ""
        let resultB = (try? String(contentsOf: outB, encoding: .utf8)) ?? ""
        XCTAssertTrue(resultA.contains("RENEGOTIATED-OK"), "auth-gen-token: the tunnel did not survive: " + resultA)
        XCTAssertTrue(resultB.contains("RENEGOTIATED-FAILED"), "without auth-gen-token the used code was accepted again?: " + resultB)
    }
}
