import Foundation
import MFAFileStore
import MFAPolicy
import TestSupport
import XCTest

/// End to end through a real OpenSSH sshd on 127.0.0.1, with the shipped sshd stacks in
/// pam.d/ AS WRITTEN: `sshd` (password, then code), `sshd-nullok`, `sshd-publickey` (public
/// key, then code) and `sshd-publickey-nullok`, each logged into as an enrolled and as an
/// unenrolled user by a scripted `ssh` client driven by `expect`, with codes from oathtool.
///
/// The PAM service of each stack is the shipped file's non-comment lines, verbatim, except that
/// the bare module name `pam_totp.so` becomes the built module's absolute path followed by
/// `store=<that stack's store>`; `@include common-auth` stays (the system's, pam_unix). The
/// shipped files are the auth part of /etc/pam.d/sshd, so the test adds only
/// `account required pam_unix.so` and `session required pam_permit.so`. The sshd_config
/// directives a file documents in its comments (`#   UsePAM yes`, `#   AuthenticationMethods
/// ...`) go into that stack's sshd_config as written too.
///
/// One private sshd per stack (own host key, config, high port, store), started on first use
/// and stopped, with both users and every file, in the class tearDown. OpenSSH 9.2 (Debian 12)
/// has no `PAMServiceName`; it names its PAM service after its program name, so each sshd runs
/// through a symlink `sshd_pamtotp_<pid>_<stack>` -> /usr/sbin/sshd and its stack is
/// /etc/pam.d/sshd_pamtotp_<pid>_<stack>. That this stack is the one used is shown by the
/// prompts: Debian's /etc/pam.d/sshd has no TOTP line and always asks for the password, and the
/// random secret exists only in this stack's private `store=`.
///
/// The enrolled user is enrolled in each stack's store by `totp-enroll --secret - --code`,
/// which records the enrolment's step as used; each login that should succeed then uses a code
/// for a later step than the last one used in that store (still inside the ±5-step window).
///
/// Needs root (users, /etc/pam.d, /run/sshd, sshd's privilege separation); every other
/// requirement (sshd, ssh, expect, oathtool, the built module and totp-enroll) fails rather
/// than skips when missing.
final class SSHDTests: XCTestCase {
    /// The shipped sshd stacks, each tested below. A new pam.d/sshd* file fails
    /// testEveryShippedSSHDStackIsTested until it is added here and tested.
    static let shippedStacks = ["sshd", "sshd-nullok", "sshd-publickey", "sshd-publickey-nullok"]

    nonisolated(unsafe) private static var shared: SSHDWorld?

    override class func tearDown() {
        shared?.cleanup()
        shared = nil
        super.tearDown()
    }

    /// The stack's sshd (started on first use), with both users; skips unless root.
    private func server(_ stack: String) throws -> SSHDServer {
        try XCTSkipUnless(isRoot, "a real sshd needs root (users, /etc/pam.d, /run/sshd); make check runs as root")
        if Self.shared == nil { Self.shared = try SSHDWorld() }
        return try Self.shared!.server(stack)
    }

    // MARK: sshd: password, then code

    /// Password then the right code: authenticated, and the remote command ran.
    func testPasswordStackEnrolledUserLogsInWithPasswordAndCode() throws {
        let s = try server("sshd")
        let ok = try s.login(.enrolled, code: try s.nextCode())
        ok.expect(prompts: "PV", success: true, "enrolled, password and right code")
    }

    /// The right password with a code outside the window: denied; then the right code is
    /// accepted (so the denial was the code's).
    func testPasswordStackWrongCodeIsDenied() throws {
        let s = try server("sshd")
        let bad = try s.login(.enrolled, code: try s.wrongCode())
        bad.expect(prompts: "PV", success: false, "enrolled, password and wrong code")
        let ok = try s.login(.enrolled, code: try s.nextCode())
        ok.expect(prompts: "PV", success: true, "enrolled, password and right code after a wrong one")
    }

    /// Replay: a code that just logged in is used again at once (well inside the window) and
    /// must be refused.
    func testPasswordStackReplayedCodeIsDenied() throws {
        let s = try server("sshd")
        let code = try s.nextCode()
        let first = try s.login(.enrolled, code: code)
        first.expect(prompts: "PV", success: true, "the first login with the code")
        let replay = try s.login(.enrolled, code: code)
        replay.expect(prompts: "PV", success: false, "the same code again (a replay)")
    }

    /// Without nullok a user with no factor is asked for a code like everyone else, and denied.
    func testPasswordStackUnenrolledUserIsDenied() throws {
        let s = try server("sshd")
        let r = try s.login(.unenrolled, code: try s.oathtool(step: s.currentStep()))
        r.expect(prompts: "PV", success: false, "unenrolled, no nullok, password and a code")
    }

    // MARK: sshd-nullok: password, then code; the password alone without a factor

    func testPasswordNullokStackEnrolledUserStillNeedsTheCode() throws {
        let s = try server("sshd-nullok")
        let bad = try s.login(.enrolled, code: try s.wrongCode())
        bad.expect(prompts: "PV", success: false, "enrolled under nullok, password and wrong code")
        let ok = try s.login(.enrolled, code: try s.nextCode())
        ok.expect(prompts: "PV", success: true, "enrolled under nullok, password and right code")
    }

    func testPasswordNullokStackUnenrolledUserLogsInWithThePasswordAlone() throws {
        let s = try server("sshd-nullok")
        let ok = try s.login(.unenrolled, code: "")
        ok.expect(prompts: "P", success: true, "unenrolled under nullok, password only")
    }

    // MARK: sshd-publickey: public key, then code

    func testPublickeyStackEnrolledUserLogsInWithKeyAndCode() throws {
        let s = try server("sshd-publickey")
        let ok = try s.login(.enrolled, code: try s.nextCode())
        ok.expect(prompts: "V", success: true, "enrolled, key and right code")
    }

    func testPublickeyStackWrongCodeIsDenied() throws {
        let s = try server("sshd-publickey")
        let bad = try s.login(.enrolled, code: try s.wrongCode())
        bad.expect(prompts: "V", success: false, "enrolled, key and wrong code")
    }

    /// Without nullok a user with no factor is asked for a code, and denied despite the key.
    func testPublickeyStackUnenrolledUserIsDenied() throws {
        let s = try server("sshd-publickey")
        let r = try s.login(.unenrolled, code: try s.oathtool(step: s.currentStep()))
        r.expect(prompts: "V", success: false, "unenrolled, no nullok, key and a code")
    }

    // MARK: sshd-publickey-nullok: public key, then code; the key alone without a factor

    /// The pam_permit line must not let an enrolled user's wrong code through.
    func testPublickeyNullokStackEnrolledUserStillNeedsTheCode() throws {
        let s = try server("sshd-publickey-nullok")
        let bad = try s.login(.enrolled, code: try s.wrongCode())
        bad.expect(prompts: "V", success: false, "enrolled under nullok, key and wrong code")
        let ok = try s.login(.enrolled, code: try s.nextCode())
        ok.expect(prompts: "V", success: true, "enrolled under nullok, key and right code")
    }

    /// The finding this file was written for: `PAM_IGNORE` alone left the stack with no success
    /// and sshd answered "Permission denied (keyboard-interactive)".
    func testPublickeyNullokStackUnenrolledUserLogsInWithTheKeyAlone() throws {
        let s = try server("sshd-publickey-nullok")
        let ok = try s.login(.unenrolled, code: "")
        ok.expect(prompts: "", success: true, "unenrolled under nullok, key only")
    }

    // MARK: the profile and the sshd line together (issue 35: one login, one verdict)

    /// The trial's composition: the pam-auth-update profile's line (`pam_totp.so nullok` after
    /// pam_unix in common-auth) and the README's `auth required pam_totp.so` in /etc/pam.d/sshd.
    /// Three wrong codes in one ssh connection (the client's three keyboard-interactive tries)
    /// were 9 prompts and 6 failures; now each try asks the password and one code, and counts
    /// one failure. Then the right code logs in with one code prompt.
    func testTheProfileAndTheSSHDLineAskAndCountOncePerTry() throws {
        let s = try profiledServer()
        let bad = try s.login(.enrolled, code: try s.wrongCode(), tries: 3)
        bad.expect(prompts: "PVPVPV", success: false, "profile + sshd line, three wrong codes in one connection")
        XCTAssertEqual(try s.failures(.enrolled), 3, "one failure per try")
        let ok = try s.login(.enrolled, code: try s.nextCode())
        ok.expect(prompts: "PV", success: true, "profile + sshd line, the right code")
        XCTAssertEqual(try s.failures(.enrolled), 0)
    }

    /// The same stack for a user without a factor: the profile's nullok line lets them pass
    /// unasked, and the sshd line (no nullok) asks and denies (what `totp-enroll policy`
    /// reports as the outcome `deny`).
    func testTheProfileAndTheSSHDLineDenyAnUnenrolledUser() throws {
        let s = try profiledServer()
        let r = try s.login(.unenrolled, code: try s.oathtool(step: s.currentStep()))
        r.expect(prompts: "PV", success: false, "profile + sshd line, unenrolled")
    }

    // MARK: what the module tells the user reaches an ssh client (issue 35)

    /// OpenSSH (9.2) collects a PAM message and sends it with the next prompt; when no prompt
    /// follows (the module failed), sshd sends the collected text as the instruction of a
    /// keyboard-interactive request without prompts, which the client prints at its default
    /// LogLevel (INFO; `ssh -q` hides it). Shown here with the real client, for each message the
    /// module has: no code could be sent (a phone-only user, no pam-totpd: nothing counted), none
    /// of the user's factors allowed here, and a token out of sync (a prompt of its own).
    func testTheModulesMessagesReachTheSSHClient() throws {
        try XCTSkipUnless(isRoot, "a real sshd needs root (users, /etc/pam.d, /run/sshd); make check runs as root")
        if Self.shared == nil { Self.shared = try SSHDWorld() }
        let w = try XCTUnwrap(Self.shared)
        let user = try XCTUnwrap(w.users[.enrolled]).name
        let uid = try XCTUnwrap(getpwnam(user)).pointee.pw_uid
        let dir = w.root.appendingPathComponent("messages")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: false)
        /// A store of its own holding `factor` for the enrolled user.
        func store(_ name: String, _ factor: Factor) throws -> String {
            let path = dir.appendingPathComponent(name).path
            XCTAssertEqual(mkdir(path, 0o700), 0)
            try Store(path: Array(path.utf8)).write(user: Array(user.utf8), record: UserRecord(uid: UInt32(uid), factors: [factor]))
            return path
        }

        // A phone-only user, a sender configured, pam-totpd not running: told at each try, and
        // nothing counted against them.
        let phone = try store("phone", Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array("+15105551234".utf8),
                                              created: 1_700_000_000))
        let conf = dir.appendingPathComponent("pam_totp.conf")
        try "sms_command = /bin/false\nsocket = \(dir.path)/no-socket\n".write(to: conf, atomically: true, encoding: .utf8)
        let s = try w.server("sshd", moduleArguments: "store=\(phone) config=\(conf.path)", tag: "phone")
        let r = try s.login(.enrolled, code: "123456", tries: 3, logLevel: "INFO")
        r.expect(prompts: "PPP", success: false, "phone only, no pam-totpd")
        XCTAssertEqual(r.output.components(separatedBy: "could not send a code: use your app or a recovery code").count - 1, 3, r.output)
        XCTAssertEqual(r.output.components(separatedBy: "Try again later, or ask your administrator.").count - 1, 3, r.output)
        XCTAssertEqual(try Store(path: Array(phone.utf8)).readState(user: Array(user.utf8)).failures, 0)
        // The same with the profile's line before the sshd line: told once per try, not twice.
        let both = try w.server("sshd", moduleArguments: "store=\(phone) config=\(conf.path)", tag: "phone-profile", profile: true)
        let b = try both.login(.enrolled, code: "123456", tries: 2, logLevel: "INFO")
        b.expect(prompts: "PP", success: false, "phone only, no pam-totpd, profile + sshd line")
        XCTAssertEqual(b.output.components(separatedBy: "could not send a code").count - 1, 2, b.output)

        // Only kinds the user has not are allowed here.
        let kinds = try w.server("sshd", moduleArguments: "factor_kinds=hotp", tag: "kinds")
        let k = try kinds.login(.enrolled, code: try kinds.nextCode(), logLevel: "INFO")
        k.expect(prompts: "P", success: false, "factor_kinds=hotp, a TOTP user")
        XCTAssertTrue(k.output.contains("None of your factors may be used here."), k.output)

        // A token pressed past its window: asked for the next press, which resyncs it.
        let secret = Array("12345678901234567890".utf8)
        let token = try store("token", Factor(kind: .hotp, label: Array("fob".utf8), parameters: .default, created: 1_700_000_000,
                                              counter: 0, secret: secret))
        let hotp = try w.server("sshd", moduleArguments: "store=\(token) hotp_window=3", tag: "hotp")
        func press(_ counter: Int) throws -> String {  // oathtool: the token's code at `counter`
            let r = try runCommand(["oathtool", "--hotp", "-c", String(counter), "3132333435363738393031323334353637383930"])
            XCTAssertEqual(r.status, 0, r.stderr)
            return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let t = try hotp.login(.enrolled, code: try press(10), logLevel: "INFO", resync: try press(11))
        t.expect(prompts: "PVT", success: true, "a token 10 presses ahead, then its next press")
    }

    private func profiledServer() throws -> SSHDServer {
        try XCTSkipUnless(isRoot, "a real sshd needs root (users, /etc/pam.d, /run/sshd); make check runs as root")
        if Self.shared == nil { Self.shared = try SSHDWorld() }
        return try Self.shared!.server("sshd", moduleArguments: "", tag: "profile", profile: true)
    }

    // MARK: the list above is every shipped sshd stack

    /// The README's sshd_config lines, added to Debian's own file, did not work: Debian's file
    /// says "KbdInteractiveAuthentication no" and sshd keeps the first value (`sshd -t`:
    /// "AuthenticationMethods cannot be satisfied"). The shipped drop-in
    /// (sshd_config.d/pam_totp.conf) is read through Debian's Include, before that line.
    func testTheShippedDropInWorksWithDebiansSshdConfig() throws {
        let debian = try String(contentsOfFile: "/usr/share/openssh/sshd_config", encoding: .utf8)
        let include = "Include /etc/ssh/sshd_config.d/*.conf"
        XCTAssertTrue(debian.contains(include), "Debian's sshd_config includes its drop-in directory")
        let dir = try makeTemporaryDirectory("pam_totp_dropin")
        defer { removeTemporaryDirectory(dir) }
        let key = dir.appendingPathComponent("hostkey").path
        XCTAssertEqual(try runCommand(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key]).status, 0)
        let dropins = dir.appendingPathComponent("sshd_config.d")
        try FileManager.default.createDirectory(at: dropins, withIntermediateDirectories: false)
        let ours = debian.replacingOccurrences(of: include, with: "Include \(dropins.path)/*.conf") + "HostKey \(key)\n"
        // The lines appended to Debian's file: refused.
        let appended = dir.appendingPathComponent("appended")
        try (ours + "UsePAM yes\nKbdInteractiveAuthentication yes\nAuthenticationMethods keyboard-interactive\n")
            .write(to: appended, atomically: true, encoding: .utf8)
        let refused = try runCommand(["/usr/sbin/sshd", "-t", "-f", appended.path])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("AuthenticationMethods cannot be satisfied"), refused.stderr)
        // The shipped drop-in: accepted, and in effect.
        try FileManager.default.copyItem(at: packageRoot.appendingPathComponent("sshd_config.d/pam_totp.conf"),
                                         to: dropins.appendingPathComponent("pam_totp.conf"))
        let config = dir.appendingPathComponent("sshd_config")
        try ours.write(to: config, atomically: true, encoding: .utf8)
        let test = try runCommand(["/usr/sbin/sshd", "-t", "-f", config.path])
        XCTAssertEqual(test.status, 0, test.stderr)
        let effective = try runCommand(["/usr/sbin/sshd", "-T", "-f", config.path])
        XCTAssertEqual(effective.status, 0, effective.stderr)
        for line in ["usepam yes", "kbdinteractiveauthentication yes", "authenticationmethods keyboard-interactive"] {
            XCTAssertTrue(effective.stdout.split(separator: "\n").contains(Substring(line)), "\(line) not in effect")
        }
    }

    func testEveryShippedSSHDStackIsTested() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: packageRoot.appendingPathComponent("pam.d").path)
        XCTAssertEqual(Set(files.filter { $0.hasPrefix("sshd") }), Set(Self.shippedStacks))
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        for stack in Self.shippedStacks {
            XCTAssertTrue(source.contains("server(\"\(stack)\")"), "no test logs in through pam.d/\(stack)")
        }
    }
}

// MARK: - The shipped files

/// A shipped pam.d/ file read as written.
struct ShippedStack {
    /// The non-comment lines, with `pam_totp.so` made absolute and given the test's store.
    var pamLines: [String]
    /// The sshd_config directives the file's comments document (`#   Keyword value`).
    var sshdConfig: [String]

    init(_ name: String, module: String, store: String) throws {
        let url = packageRoot.appendingPathComponent("pam.d").appendingPathComponent(name)
        let text = try String(contentsOf: url, encoding: .utf8)
        var pamLines: [String] = [], sshdConfig: [String] = [], modules = 0
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw)
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("#") {
                // "#   AuthenticationMethods publickey,keyboard-interactive": an sshd_config line
                // (a capitalised keyword and a value, indented by three spaces).
                let rest = line.hasPrefix("#   ") ? line.dropFirst(4) : ""
                let words = rest.split(separator: " ")
                if let keyword = words.first, rest.first?.isUppercase == true, words.count >= 2,
                   keyword.allSatisfy({ $0.isASCII && $0.isLetter }) {
                    sshdConfig.append(String(rest))
                }
                continue
            }
            if trimmed.isEmpty { continue }
            pamLines.append(try Self.absolute(line, module: module, store: store, count: &modules))
        }
        guard modules >= 1 else { throw SSHDFailure("pam.d/\(name) has no active pam_totp.so line") }
        // One stack per file: exactly one documented AuthenticationMethods, and UsePAM.
        guard sshdConfig.contains("UsePAM yes"), sshdConfig.filter({ $0.hasPrefix("AuthenticationMethods ") }).count == 1 else {
            throw SSHDFailure("pam.d/\(name) must document `UsePAM yes` and exactly one `AuthenticationMethods` for sshd_config: \(sshdConfig)")
        }
        self.pamLines = pamLines
        self.sshdConfig = sshdConfig
    }

    /// `line` with its one bare `pam_totp.so` word (if any) replaced by `module store=store`.
    static func absolute(_ line: String, module: String, store: String, count: inout Int) throws -> String {
        let occurrences = line.components(separatedBy: "pam_totp.so").count - 1
        guard occurrences > 0 else { return line }
        guard occurrences == 1, let r = line.range(of: "pam_totp.so"), r.lowerBound > line.startIndex,
              line[line.index(before: r.lowerBound)].isWhitespace,
              r.upperBound == line.endIndex || line[r.upperBound].isWhitespace else {
            throw SSHDFailure("not one bare pam_totp.so word: \(line)")
        }
        count += 1
        return line.replacingCharacters(in: r, with: module + " store=" + store)
    }
}

struct SSHDFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

private func check(_ r: CommandResult, _ what: String) throws {
    guard r.status == 0 else { throw SSHDFailure("\(what) exited \(r.status): \(r.stdout)\(r.stderr)") }
}

// MARK: - Users, client key, client script: shared by every stack

enum SSHDUser { case enrolled, unenrolled }

/// Two throw-away local users with random passwords and one authorised client key (the
/// enrolled one gets a factor in each stack's store), a host key, the client script, and the
/// servers started so far. `cleanup` undoes all of it.
final class SSHDWorld {
    let root: URL
    var users: [SSHDUser: (name: String, password: String)] = [:]
    let secretB32: String
    let clientKey: URL
    let hostKey: URL
    let script: URL
    var servers: [String: SSHDServer] = [:]

    init() throws {
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        for tool in ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen", enrollURL.path] {
            guard FileManager.default.isExecutableFile(atPath: tool) else { throw SSHDFailure("\(tool) missing") }
        }
        root = try makeTemporaryDirectory("pam_totp_sshd")
        clientKey = root.appendingPathComponent("clientkey")
        hostKey = root.appendingPathComponent("hostkey")
        script = root.appendingPathComponent("client.exp")
        // A random 20-byte (160-bit) secret, Base32 without padding.
        let alphabet32 = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        secretB32 = String((0..<32).map { _ in alphabet32.randomElement()! })
        do {
            try check(runCommand(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey.path]), "ssh-keygen (host)")
            try check(runCommand(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", clientKey.path]), "ssh-keygen (client)")
            try Self.clientScript.write(to: script, atomically: true, encoding: .utf8)
            if !FileManager.default.fileExists(atPath: "/run/sshd") {
                try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o755])
            }
            let publicKey = try String(contentsOf: clientKey.appendingPathExtension("pub"), encoding: .utf8)
            for (kind, tag) in [(SSHDUser.enrolled, "e"), (.unenrolled, "n")] {
                try addUser(kind, tag: tag, publicKey: publicKey)
            }
        } catch {
            cleanup()
            throw error
        }
    }

    /// A user with a random password (alphanumeric: typed through a tty by expect) and the
    /// client key in ~/.ssh/authorized_keys.
    private func addUser(_ kind: SSHDUser, tag: String, publicKey: String) throws {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        let name = "totpssh" + tag + String(getpid() % 100_000) + String((0..<3).map { _ in letters.randomElement()! })
        let alphabet = Array("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        let password = String((0..<20).map { _ in alphabet.randomElement()! })
        try check(runCommand(["useradd", "-m", "-s", "/bin/sh", name]), "useradd")
        users[kind] = (name, password)
        try check(runCommand(["chpasswd"], input: "\(name):\(password)\n"), "chpasswd")
        guard let pw = getpwnam(name) else { throw SSHDFailure("getpwnam \(name)") }
        let ssh = String(cString: pw.pointee.pw_dir) + "/.ssh"
        try check(runCommand(["install", "-d", "-m", "0700", "-o", name, "-g", name, ssh]), "install ~/.ssh")
        try publicKey.write(toFile: ssh + "/authorized_keys", atomically: true, encoding: .utf8)
        try check(runCommand(["chown", "\(name):\(name)", ssh + "/authorized_keys"]), "chown authorized_keys")
        guard chmod(ssh + "/authorized_keys", 0o600) == 0 else { throw SSHDFailure("chmod authorized_keys") }
    }

    func server(_ stack: String) throws -> SSHDServer {
        if let s = servers[stack] { return s }
        let s = try SSHDServer(stack: stack, world: self)
        servers[stack] = s
        return s
    }

    /// A shipped stack whose module line gets `moduleArguments` too (another sshd, store and
    /// PAM service; `tag` names them).
    /// `profile`: common-auth as the pam-auth-update profile leaves it (pam_totp with nullok
    /// after the password module) before the stack's own pam_totp line.
    func server(_ stack: String, moduleArguments: String, tag: String, profile: Bool = false) throws -> SSHDServer {
        let key = stack + "+" + tag
        if let s = servers[key] { return s }
        let s = try SSHDServer(stack: stack, world: self, moduleArguments: moduleArguments, tag: tag, profile: profile)
        servers[key] = s
        return s
    }

    /// Idempotent, and safe after a partial set-up.
    func cleanup() {
        for s in servers.values { s.stop() }
        servers = [:]
        for (_, user) in users {
            // -f only as a fallback: a session process that outlived its connection.
            if (try? runCommand(["userdel", "-r", user.name]))?.status != 0 { _ = try? runCommand(["userdel", "-r", "-f", user.name]) }
        }
        users = [:]
        removeTemporaryDirectory(root)  // keys, script, every stack's symlink, store, config and log
    }

    /// The client: argv port user command identity ("-" for none: keyboard-interactive only).
    /// Answers each prompt once per sighting, at most 8 rounds, 20 s per wait; prints the
    /// prompts it answered (P = Password, V = Verification code) and exits with ssh's status
    /// (90+ for its own timeouts). The secrets come through the environment, not argv.
    static let clientScript = clientScript(answering: #"""
                -ex "Password:" { send -- "$env(PAMTOTP_PASSWORD)\r"; append seen P }
                -ex "Verification code:" { send -- "$env(PAMTOTP_CODE)\r"; append seen V }
                -ex "Token out of sync" { send -- "$env(PAMTOTP_RESYNC)\r"; append seen T }

        """#)

    /// The client with `answers` (expect clauses, one per prompt, each appending its letter to
    /// `seen`) in its loop of at most 8 rounds.
    static func clientScript(answering answers: String) -> String {
        #"""
        set timeout 20
        log_user 1
        lassign $argv port user command identity
        set options [list -F /dev/null -p $port -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
            -o LogLevel=[expr {[info exists env(PAMTOTP_LOGLEVEL)] ? $env(PAMTOTP_LOGLEVEL) : "ERROR"}] -o NumberOfPasswordPrompts=[expr {[info exists env(PAMTOTP_TRIES)] ? $env(PAMTOTP_TRIES) : 1}] \
            -o ConnectTimeout=5]
        if {$identity eq "-"} {
            lappend options -o PubkeyAuthentication=no -o PreferredAuthentications=keyboard-interactive
        } else {
            lappend options -i $identity -o IdentitiesOnly=yes -o PreferredAuthentications=publickey,keyboard-interactive
        }
        spawn ssh {*}$options $user@127.0.0.1 $command
        set seen ""
        set open 1
        for {set round 0} {$round < 12 && $open} {incr round} {
            expect {

        """# + answers + #"""
                eof { set open 0 }
                timeout { puts "\nEXPECT-PROMPTS:$seen\nEXPECT-TIMEOUT"; exit 90 }
            }
        }
        if {$open} {
            expect {
                eof {}
                timeout { puts "\nEXPECT-PROMPTS:$seen\nEXPECT-TIMEOUT"; exit 91 }
            }
        }
        set result [wait]
        puts "\nEXPECT-PROMPTS:$seen"
        if {[lindex $result 2] != 0} { exit 92 }
        exit [lindex $result 3]
        """#
    }
}

// MARK: - One sshd per shipped stack

final class SSHDServer {
    let stack: String
    unowned let world: SSHDWorld
    let dir: URL
    let store: URL
    let service: String
    let usesKey: Bool
    var port: UInt16 = 0
    var pid: pid_t?
    var serviceWritten = false
    /// The last time step used in this store by the enrolled user (enrolment, then logins).
    var lastStep: Int64 = 0
    let logURL: URL
    static let remoteCommand = "echo pam-totp-ok-$((6*7))"
    static let remoteOutput = "pam-totp-ok-42"

    let profile: Bool
    let moduleArguments: String

    init(stack: String, world: SSHDWorld, moduleArguments: String = "", tag: String = "", profile: Bool = false) throws {
        self.profile = profile
        self.moduleArguments = moduleArguments
        self.stack = stack
        self.world = world
        let name = tag.isEmpty ? stack : stack + "-" + tag
        dir = world.root.appendingPathComponent(name)
        store = dir.appendingPathComponent("store")
        logURL = dir.appendingPathComponent("sshd.log")
        service = "sshd_pamtotp_\(getpid())_" + name.replacingOccurrences(of: "-", with: "_")
        let shipped = try ShippedStack(stack, module: moduleURL.path,
                                       store: store.path + (moduleArguments.isEmpty ? "" : " " + moduleArguments))
        usesKey = shipped.sshdConfig.contains { $0.hasPrefix("AuthenticationMethods ") && $0.contains("publickey") }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: false)
        do { try start(shipped) } catch { stop(); removeTemporaryDirectory(dir); throw error }
    }

    private func start(_ shipped: ShippedStack) throws {
        try enroll()

        // The PAM service, named after the symlink sshd runs through.
        // With the profile: its Auth line (pam.d/pam-configs-pam_totp) right after common-auth.
        var lines = shipped.pamLines
        if profile, let i = lines.firstIndex(of: "@include common-auth") {
            lines.insert("auth required \(moduleURL.path) store=\(store.path)\(moduleArguments.isEmpty ? "" : " " + moduleArguments) nullok",
                         at: i + 1)
        }
        let pam = lines + ["account required pam_unix.so", "session required pam_permit.so"]
        try (pam.joined(separator: "\n") + "\n").write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        serviceWritten = true
        let link = dir.appendingPathComponent(service)
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "/usr/sbin/sshd")

        // sshd on a free high port; a lost race for the port is retried (bounded).
        for attempt in 1...3 {
            port = try freePort()
            let config = dir.appendingPathComponent("sshd_config")
            let lines = shipped.sshdConfig + [
                "ListenAddress 127.0.0.1",
                "Port \(port)",
                "HostKey \(world.hostKey.path)",
                "PidFile \(dir.appendingPathComponent("sshd.pid").path)",
                "PasswordAuthentication no",
                "PermitRootLogin no",
                "StrictModes no",
                "LogLevel VERBOSE",
            ]
            try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
            try check(runCommand([link.path, "-t", "-f", config.path]), "sshd -t (\(stack))")
            if try startDaemon(link: link, config: config) { return }
            if attempt == 3 || !log().contains("Address already in use") { break }
        }
        throw SSHDFailure("sshd (\(stack)) did not start listening on 127.0.0.1:\(port)\n--- sshd log ---\n\(log())")
    }

    /// Enrols the enrolled user in this stack's store through the CLI (secret on stdin).
    private func enroll() throws {
        guard let user = world.users[.enrolled] else { throw SSHDFailure("no enrolled user") }
        let step = currentStep()
        let code = try oathtool(step: step)
        try check(runCommand([enrollURL.path, "--user", user.name, "--store", store.path, "--name", "phone",
                              "--secret", "-", "--code", code, "--qr", "none"], input: world.secretB32 + "\n"),
                  "totp-enroll (\(stack))")
        lastStep = max(step, currentStep())
    }

    /// Starts sshd in the foreground (-D), logging to the log (-e); true once it listens.
    ///
    /// posix_spawn, not Foundation's Process: Process watches a child through a socket the
    /// child inherits and, when that socket closes, blocks its one monitor thread in
    /// waitpid(child). sshd closes every inherited descriptor at start-up, so the monitor would
    /// wait for sshd forever and no later Process (runCommand: oathtool, expect) would ever
    /// be seen to exit.
    private func startDaemon(link: URL, config: URL) throws -> Bool {
        let child = try spawn(link.path, ["-D", "-e", "-f", config.path], output: logURL)
        pid = child
        let listening = "Server listening on 127.0.0.1 port \(port)"
        for _ in 0..<100 {  // 10 s at most
            if log().contains(listening) { return true }
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child { pid = nil; return false }
            usleep(100_000)
        }
        stopDaemon()
        return false
    }

    /// `path` (absolute; also argv[0], which names sshd's PAM service) with stdin /dev/null and
    /// stdout and stderr appended to `output`.
    private func spawn(_ path: String, _ arguments: [String], output: URL) throws -> pid_t {
        let input = open("/dev/null", O_RDONLY | O_CLOEXEC)
        let out = open(output.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        defer { for fd in [input, out] where fd >= 0 { close(fd) } }
        guard input >= 0, out >= 0 else { throw SSHDFailure("open for \(path): errno \(errno)") }
        // Reaped by stopDaemon; default signal handling and an empty mask, whatever the runner set.
        let child = SpawnedProcess()
        try child.run([path] + arguments, stdin: input, stdout: out, stderr: out)
        return child.processIdentifier
    }

    /// SIGTERM, up to 5 s, then SIGKILL; always reaps.
    private func stopDaemon() {
        guard let child = pid else { return }
        pid = nil
        var status: Int32 = 0
        if waitpid(child, &status, WNOHANG) == child { return }
        kill(child, SIGTERM)
        for _ in 0..<50 {
            if waitpid(child, &status, WNOHANG) == child { return }
            usleep(100_000)
        }
        kill(child, SIGKILL)
        for _ in 0..<50 {
            if waitpid(child, &status, WNOHANG) == child { return }
            usleep(100_000)
        }
    }

    /// Stops sshd and removes its PAM service (the rest is under the world's directory).
    func stop() {
        stopDaemon()
        if serviceWritten { unlink("/etc/pam.d/" + service); serviceWritten = false }
    }

    // MARK: codes

    func currentStep() -> Int64 { Int64(time(nil)) / 30 }

    func oathtool(step: Int64, window: Int = 0) throws -> String {
        let r = try runCommand(["oathtool", "--totp", "-b", world.secretB32, "-w", String(window), "-N", "@\(step * 30)"])
        try check(r, "oathtool")
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A code for the first step after the last one used in this store (a right code the
    /// module accepts once); waits (bounded) if that step is too far ahead of now.
    func nextCode() throws -> String {
        var waited = 0
        while lastStep + 1 > currentStep() + 3 && waited < 40 { sleep(1); waited += 1 }
        let step = max(currentStep(), lastStep + 1)
        lastStep = step
        return try oathtool(step: step)
    }

    /// A 6-digit code that matches no step within ±6 of now (the module accepts ±5).
    func wrongCode() throws -> String {
        let window = Set(try oathtool(step: currentStep() - 6, window: 12).split(separator: "\n").map(String.init))
        XCTAssertEqual(window.count, 13, "oathtool -w 12 printed no window of 13 codes")
        return ["000000", "111111", "222222", "333333", "444444", "555555", "123456"].first { !window.contains($0) }!
    }

    // MARK: logging in

    struct Login {
        var what: String
        var status: Int32
        var output: String
        var prompts: String?
        var ranCommand: Bool
        var log: String      // sshd's log lines written during this login
        var user: String
        var usesKey: Bool

        /// Asserts the prompts the client answered, and success (remote command ran, exit 0,
        /// sshd logged "Accepted keyboard-interactive/pam") or failure (no command, non-zero
        /// exit, "Failed keyboard-interactive/pam"); with a key, that the key was checked first.
        func expect(prompts expected: String, success: Bool, _ message: String,
                    file: StaticString = #filePath, line: UInt = #line) {
            let context = "\(what): \(message)\n--- client ---\n\(output)\n--- sshd log ---\n\(log)"
            XCTAssertEqual(prompts, expected, "prompts answered (P = Password, V = Verification code, T = Token out of sync); " + context,
                           file: file, line: line)
            if success {
                XCTAssertTrue(ranCommand, "did not log in; " + context, file: file, line: line)
                XCTAssertEqual(status, 0, context, file: file, line: line)
                XCTAssertTrue(log.contains("Accepted keyboard-interactive/pam for \(user) from 127.0.0.1"), context,
                              file: file, line: line)
            } else {
                XCTAssertFalse(ranCommand, "logged in; " + context, file: file, line: line)
                XCTAssertNotEqual(status, 0, context, file: file, line: line)
                XCTAssertTrue(log.contains("Failed keyboard-interactive/pam for \(user) from 127.0.0.1"), context,
                              file: file, line: line)
            }
            if usesKey {
                XCTAssertTrue(log.contains("Partial publickey for \(user) from 127.0.0.1"), "the key was not checked first; " + context,
                              file: file, line: line)
            }
        }
    }

    /// One ssh login as `kind`, answering its password and `code` if asked (and offering the
    /// client key when the stack's AuthenticationMethods start with publickey).
    /// The failures counted for `kind` in this stack's store.
    func failures(_ kind: SSHDUser) throws -> UInt32 {
        guard let user = world.users[kind] else { throw SSHDFailure("no \(kind) user") }
        return try Store(path: Array(store.path.utf8)).readState(user: Array(user.name.utf8)).failures
    }

    /// `tries`: the client's keyboard-interactive tries in the one connection (ssh's
    /// NumberOfPasswordPrompts), each answered with the same password and code.
    /// `logLevel`: the client's LogLevel (ERROR by default, which hides what the server sends
    /// as a keyboard-interactive instruction; a user's ssh has INFO).
    /// `resync`: the answer to "Token out of sync: ..." (a counter-based token's next press).
    func login(_ kind: SSHDUser, code: String, tries: Int = 1, logLevel: String = "ERROR", resync: String = "") throws -> Login {
        guard let user = world.users[kind] else { throw SSHDFailure("no \(kind) user") }
        var environment = ProcessInfo.processInfo.environment
        environment["PAMTOTP_PASSWORD"] = user.password
        environment["PAMTOTP_CODE"] = code
        let before = log().utf8.count
        environment["PAMTOTP_TRIES"] = String(tries)
        environment["PAMTOTP_LOGLEVEL"] = logLevel
        environment["PAMTOTP_RESYNC"] = resync
        let r = try runCommand(["expect", "-f", world.script.path, String(port), user.name, Self.remoteCommand,
                                usesKey ? world.clientKey.path : "-"], environment: environment)
        let output = r.stdout + r.stderr
        // sshd writes its verdict line after the client has gone (a failure: after PAM's fail
        // delay): waited for, so that a busy machine does not read the log before it.
        waitUntil(timeout: 10) {
            let added = String(decoding: Array(self.log().utf8).dropFirst(before), as: UTF8.self)
            return added.contains("Accepted ") || added.contains("Failed ") || added.contains("Disconnected from")
                || added.contains("Connection closed by")
        }
        let prompts = output.components(separatedBy: "\n").last { $0.hasPrefix("EXPECT-PROMPTS:") }
            .map { String($0.dropFirst("EXPECT-PROMPTS:".count)).trimmingCharacters(in: .whitespacesAndNewlines) }
        return Login(what: "pam.d/\(stack), \(kind) user \(user.name)", status: r.status, output: output, prompts: prompts,
                     ranCommand: output.contains(Self.remoteOutput),
                     log: String(decoding: Array(log().utf8).dropFirst(before), as: UTF8.self),
                     user: user.name, usesKey: usesKey)
    }

    func log() -> String {
        guard let data = try? Data(contentsOf: logURL) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    /// A port in 20000–39999 that 127.0.0.1 can bind now (sshd may still lose a race: retried).
    private func freePort() throws -> UInt16 {
        for _ in 0..<20 {
            let candidate = UInt16.random(in: 20000..<40000)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = candidate.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if bound == 0 { return candidate }
        }
        throw SSHDFailure("no free port in 20000–39999 after 20 tries")
    }
}
