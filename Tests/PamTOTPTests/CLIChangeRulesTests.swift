import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Regression tests for totp-enroll findings of a security review and a new user's trial, each
/// replaying the original steps: the password alone (no service file, or a stack without
/// pam_totp) giving recovery codes, one secret enrolled as two factors, terminal control in
/// labels, recovery codes lost to a full disk, a user removing their own last factor, checks
/// made only after the password was spent, and changes that left no log line.
///
/// Root only: useradd, a set-uid copy of the tool, /etc/pam.d/totp-enroll, /etc/pam.d/other,
/// /etc/security/pam_totp.conf and /dev/log. Every system file touched is saved first and
/// restored in tearDown, whatever happened.
final class CLIChangeRulesTests: XCTestCase {
    var root: URL!
    /// A private store for the root-only tests (--store).
    var store: URL!
    /// System files replaced by this test: their content (nil: absent) and mode before.
    var savedFiles: [(path: String, data: Data?, mode: mode_t)] = []
    var capture: SyslogCapture?

    // The unprivileged user of some tests, made by `makeUser`.
    var user = ""
    var uid: uid_t = 0
    var gid: gid_t = 0
    var binary = ""
    let password = "c0rrect-h0rse-\(UInt32.random(in: 0...UInt32.max))"
    var createdDefaultStore = false
    let defaultStore = String(decoding: Store.defaultDirectory, as: UTF8.self)

    let secretA = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    let secretB = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
    /// Letters only (from the pid), so no digit run in a name can look like a code.
    let tag = String(String(getpid()).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(String($0))!)) })

    /// The stack PrivilegeTests uses (and the one shipped before the fix): password, then a
    /// code through pam_totp with nullok. Both the old and the new tool work with it.
    var passwordAndCodeStack: String {
        "auth     required  pam_unix.so\nauth     required  \(moduleURL.path) nullok\naccount  required  pam_unix.so\n"
    }

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: useradd, a set-uid copy, /etc/pam.d, /etc/security, /dev/log")
        root = try makeTemporaryDirectory("pam_totp_review")
        // The user of the set-uid tests and the owner of imported files must reach into it.
        XCTAssertEqual(chmod(root.path, 0o755), 0)
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: enrollURL.path), "build totp-enroll first: \(enrollURL.path)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
    }

    override func tearDown() {
        _ = capture?.stop()
        capture = nil
        // System files first, newest change last restored first.
        for saved in savedFiles.reversed() {
            if let data = saved.data {
                unlink(saved.path)
                FileManager.default.createFile(atPath: saved.path, contents: data)
                chown(saved.path, 0, 0)
                chmod(saved.path, saved.mode)
            } else {
                unlink(saved.path)
            }
        }
        savedFiles = []
        if !user.isEmpty {
            for name in [user, ".state." + user, ".lock." + user, ".tmp." + user] { unlink(defaultStore + "/" + name) }
            if createdDefaultStore { rmdir(defaultStore) }
            _ = try? runCommand(["userdel", user])
            user = ""
        }
        if let root { removeTemporaryDirectory(root) }
    }

    // MARK: - Helpers

    /// Replaces a system file (nil: removes it), saving what was there the first time.
    func setSystemFile(_ path: String, _ text: String?) throws {
        if !savedFiles.contains(where: { $0.path == path }) {
            var st = stat()
            let exists = lstat(path, &st) == 0
            savedFiles.append((path, exists ? FileManager.default.contents(atPath: path) : nil, exists ? st.st_mode & 0o7777 : 0o644))
        }
        unlink(path)
        if let text {
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
            XCTAssertEqual(chown(path, 0, 0), 0)
            XCTAssertEqual(chmod(path, 0o644), 0)
        }
    }

    /// An account with a password, a set-uid root copy of the tool it may run, the default store.
    func makeUser() throws {
        binary = root.appendingPathComponent("totp-enroll").path
        try FileManager.default.copyItem(atPath: enrollURL.path, toPath: binary)
        XCTAssertEqual(chown(binary, 0, 0), 0)
        XCTAssertEqual(chmod(binary, 0o4755), 0)
        user = "crv" + tag
        _ = try? runCommand(["userdel", user])  // a leftover of a killed run
        let added = try runCommand(["useradd", "-M", "-s", "/bin/sh", user])
        XCTAssertEqual(added.status, 0, added.stderr)
        XCTAssertEqual(try runCommand(["chpasswd"], input: "\(user):\(password)\n").status, 0)
        let pw = try XCTUnwrap(getpwnam(user))
        uid = pw.pointee.pw_uid
        gid = pw.pointee.pw_gid
        if !FileManager.default.fileExists(atPath: defaultStore) {
            XCTAssertEqual(mkdir(defaultStore, 0o700), 0)
            createdDefaultStore = true
        }
    }

    /// Runs `command` as the test user, without a controlling terminal (PAM's questions are
    /// answered on standard input).
    func asUser(_ command: [String], input: String = "") throws -> CommandResult {
        try runCommand(["setsid", "-w", "setpriv", "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups"] + command, input: input)
    }

    /// The tool under test as root, on the private store unless `store` is false.
    func tool(_ args: [String], privateStore: Bool = true, input: String = "") throws -> CommandResult {
        let command = [enrollURL.path] + args + (privateStore ? ["--store", store.path] : [])
        return try runCommand(capture?.wrap(command) ?? command, input: input)
    }

    func totp(_ b32: String, at t: Int64) -> String {
        let secret = (try? Base32.decode(Array(b32.utf8))) ?? []
        return String(decoding: (try? TOTP.code(secret: secret, parameters: .default, at: t)) ?? [], as: UTF8.self)
    }

    /// A code that is wrong for `b32` in every step of the widest window around `t`.
    func wrongCode(_ b32: String, around t: Int64) -> String {
        let window = Set((-12...12).map { totp(b32, at: t + Int64($0) * 30) })
        return ["000000", "123456", "999999", "424242", "135790", "864209"].first { !window.contains($0) }!
    }

    /// Enrols `label` with `b32` for `name` as root, proving it with the code of time `t`.
    func enrolAsRoot(_ name: String, label: String, b32: String, at t: Int64, privateStore: Bool = true) throws {
        let r = try tool(["enroll", "--user", name, "--name", label, "--secret", b32, "--code", totp(b32, at: t), "--qr", "none"],
                         privateStore: privateStore)
        XCTAssertEqual(r.status, 0, "enrol \(label): " + r.stdout + r.stderr)
    }

    func record(_ name: String, in dir: String? = nil) throws -> UserRecord? {
        try Store(path: Array((dir ?? store.path).utf8)).read(user: Array(name.utf8))
    }

    func labels(_ record: UserRecord?) -> [String] {
        (record?.factors ?? []).map { String(decoding: $0.label, as: UTF8.self) }
    }

    /// The recovery codes a `recovery-codes` run printed ("1234-5678-9012").
    func recoveryCodes(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
    }

    /// A file made by Debian's google-authenticator, owned by `owner` (mode 0400, as it writes it).
    func googleAuthenticatorFile(_ name: String, owner: String, codes: Int = 5) throws -> (url: URL, secret: String, scratch: [String]) {
        let url = root.appendingPathComponent(name)
        let r = try runCommand(["google-authenticator", "--secret=" + url.path, "--force", "--quiet", "--no-confirm",
                                "--qr-mode=NONE", "--time-based", "--disallow-reuse", "--window-size=3",
                                "--rate-limit=3", "--rate-time=30", "--emergency-codes=\(codes)"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let pw = try XCTUnwrap(getpwnam(owner))
        XCTAssertEqual(chown(url.path, pw.pointee.pw_uid, pw.pointee.pw_gid), 0)
        let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n").map(String.init)
        return (url, lines[0], lines.filter { $0.count == 8 && $0.allSatisfy { $0.isASCII && $0.isNumber } })
    }

    // MARK: - Finding 3: the password alone gave new recovery codes

    /// Without /etc/pam.d/totp-enroll libpam used `other` (here: the password alone), and a
    /// user with a factor got new recovery codes. Now the tool refuses, naming the file. With
    /// a service file that checks only the password (the shipped one), the tool asks for a
    /// current code itself: a wrong one is refused and counted, the right one works.
    func testRecoveryCodesNeedTheServiceFileAndACurrentCode() throws {
        try makeUser()
        awayFromStepBoundary(margin: 8)
        let t0 = Int64(time(nil))
        try enrolAsRoot(user, label: "phone", b32: secretA, at: t0, privateStore: false)
        let before = try XCTUnwrap(try record(user, in: defaultStore))

        // No service file; `other` checks the password alone.
        try setSystemFile("/etc/pam.d/totp-enroll", nil)
        try setSystemFile("/etc/pam.d/other", "auth     required  pam_unix.so\naccount  required  pam_unix.so\n")
        let missing = try asUser([binary, "recovery-codes"], input: password + "\n")
        XCTAssertNotEqual(missing.status, 0, "recovery codes for the password alone:\n" + missing.stdout + missing.stderr)
        XCTAssertTrue(missing.stderr.contains("/etc/pam.d/totp-enroll"), "the message names the missing file: " + missing.stderr)
        XCTAssertEqual(recoveryCodes(missing.stdout), [], "codes were printed")
        XCTAssertEqual(try record(user, in: defaultStore), before, "the record changed")

        // The shipped service file: the password only; the tool itself asks for a code.
        let shipped = try String(contentsOf: packageRoot.appendingPathComponent("pam.d/totp-enroll"), encoding: .utf8)
        XCTAssertFalse(shipped.contains("pam_totp"), "the shipped stack is expected to check the password only")
        try setSystemFile("/etc/pam.d/totp-enroll", shipped)
        let wrong = try asUser([binary, "recovery-codes"], input: password + "\n" + wrongCode(secretA, around: t0) + "\n")
        XCTAssertNotEqual(wrong.status, 0, "recovery codes for the password and a wrong code:\n" + wrong.stdout + wrong.stderr)
        XCTAssertTrue(wrong.stderr.contains("Verification code"), "the tool asked for a code: " + wrong.stderr)
        XCTAssertTrue(wrong.stderr.contains("authentication failed"), wrong.stderr)
        XCTAssertEqual(recoveryCodes(wrong.stdout), [], "codes were printed")
        XCTAssertEqual(try record(user, in: defaultStore), before, "the record changed")
        let list = try tool(["list", "--user", user], privateStore: false)
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertTrue(list.stdout.contains("Consecutive failed attempts: 1"), "the wrong code is counted like a login:\n" + list.stdout)

        let right = try asUser([binary, "recovery-codes"], input: password + "\n" + totp(secretA, at: t0 + 30) + "\n")
        XCTAssertEqual(right.status, 0, right.stdout + right.stderr)
        XCTAssertEqual(recoveryCodes(right.stdout).count, 10, right.stdout)
        XCTAssertEqual(try record(user, in: defaultStore)?.recovery?.hashes.count, 10)
    }

    // MARK: - Finding 5: one secret, two factors

    /// The same secret under a second name, and the same google-authenticator file imported
    /// twice under another --name, are refused before anything is shown; nothing is saved.
    func testOneSecretCannotBecomeTwoFactors() throws {
        awayFromStepBoundary(margin: 6)
        let t0 = Int64(time(nil))
        try enrolAsRoot("nobody", label: "phone", b32: secretA, at: t0)
        let enrolled = try XCTUnwrap(try record("nobody"))
        let twice = try tool(["enroll", "--user", "nobody", "--name", "tablet", "--secret", secretA,
                              "--code", totp(secretA, at: t0 + 30), "--qr", "none"])
        XCTAssertNotEqual(twice.status, 0, "one secret enrolled as two factors:\n" + twice.stdout + twice.stderr)
        XCTAssertTrue(twice.stderr.contains("already enrolled"), twice.stderr)
        XCTAssertFalse(twice.stdout.contains("otpauth://"), "the URI was shown: " + twice.stdout)
        XCTAssertFalse(twice.stdout.contains("Key:"), "the key was shown: " + twice.stdout)
        XCTAssertEqual(try record("nobody"), enrolled, "the record changed")

        let ga = try googleAuthenticatorFile("ga", owner: "nobody", codes: 2)
        let first = try tool(["import-google-authenticator", ga.url.path, "--user", "nobody", "--name", "ga"])
        XCTAssertEqual(first.status, 0, first.stdout + first.stderr)
        let imported = try XCTUnwrap(try record("nobody"))
        XCTAssertEqual(labels(imported), ["phone", "ga"])
        let again = try tool(["import-google-authenticator", ga.url.path, "--user", "nobody", "--name", "ga-copy"])
        XCTAssertNotEqual(again.status, 0, "one google-authenticator file imported as two factors:\n" + again.stdout + again.stderr)
        XCTAssertTrue(again.stderr.contains("already enrolled"), again.stderr)
        XCTAssertEqual(try record("nobody"), imported, "the record changed")
    }

    // MARK: - Finding 6: terminal control through labels

    /// Labels with C1 controls (CSI, U+009B) or bidi overrides (U+202E) are refused at input,
    /// by enroll and by import.
    func testLabelsWithTerminalControlsAreRefused() throws {
        let file = root.appendingPathComponent("ga")
        try Data("\(secretB)\n\" TOTP_AUTH\n".utf8).write(to: file)
        let nobody = try XCTUnwrap(getpwnam("nobody"))
        XCTAssertEqual(chown(file.path, nobody.pointee.pw_uid, nobody.pointee.pw_gid), 0)
        XCTAssertEqual(chmod(file.path, 0o400), 0)
        let now = Int64(time(nil))
        let recordPath = store.appendingPathComponent("nobody").path
        for label in ["\u{9B}2J\u{202E}", "phone\u{9B}31m", "gnp\u{202E}exe", "\u{202D}x", "a\u{85}b"] {
            let shown = label.unicodeScalars.map { $0.isASCII ? String($0) : "U+" + String($0.value, radix: 16) }.joined()
            // Each on an empty store (the old tool saved them): refused for the label itself.
            let imported = try tool(["import-google-authenticator", file.path, "--user", "nobody", "--name", label])
            XCTAssertNotEqual(imported.status, 0, "import accepted the label \(shown)")
            XCTAssertTrue(imported.stderr.contains("factor name must be"), "\(shown): " + imported.stderr)
            XCTAssertNil(try record("nobody"), "\(shown): import saved a record")
            unlink(recordPath)
            let enrol = try tool(["enroll", "--user", "nobody", "--name", label, "--secret", secretA,
                                  "--code", totp(secretA, at: now), "--qr", "none"])
            XCTAssertNotEqual(enrol.status, 0, "enroll accepted the label \(shown)")
            XCTAssertTrue(enrol.stderr.contains("factor name must be"), "\(shown): " + enrol.stderr)
            XCTAssertFalse(enrol.stdout.contains("otpauth://"), "\(shown): the URI was shown")
            XCTAssertNil(try record("nobody"), "\(shown): enroll saved a record")
            unlink(recordPath)
        }
    }

    /// A label that got into the store anyway (written by hand; a version-1 record, which both
    /// the old and the new tool read, and a version-2 one) is printed escaped by `list` and
    /// `remove`: no CSI (C2 9B), no U+202E (E2 80 AE), no ESC reaches the terminal.
    func testStoredLabelsArePrintedEscaped() throws {
        let evil = "%C2%9B2J%E2%80%AEevil"
        let evilLabel = "\u{9B}2J\u{202E}evil"
        let records = [
            ("v1", "pam_totp 1\nfactor phone sha1 6 30 1700000000 \(secretA)\nfactor \(evil) sha1 6 30 1700000000 \(secretB)\n"),
            ("v2", "pam_totp 2\naccount - 0000000000000001\nfactor phone sha1 6 30 1700000000 0 \(secretA)\nfactor \(evil) sha1 6 30 1700000000 0 \(secretB)\n"),
        ]
        func assertEscaped(_ r: CommandResult, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
            for (name, needle) in [("CSI U+009B", "\u{9B}"), ("U+202E", "\u{202E}"), ("ESC", "\u{1B}")] {
                XCTAssertFalse(r.stdout.contains(needle), "\(what): stdout carries a raw \(name): \(r.stdout.debugDescription)", file: file, line: line)
                XCTAssertFalse(r.stderr.contains(needle), "\(what): stderr carries a raw \(name): \(r.stderr.debugDescription)", file: file, line: line)
            }
        }
        for (version, text) in records {
            let dir = root.appendingPathComponent("store-" + version)
            XCTAssertEqual(mkdir(dir.path, 0o700), 0)
            let path = dir.appendingPathComponent("nobody").path
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
            XCTAssertEqual(chmod(path, 0o600), 0)
            XCTAssertEqual(labels(try record("nobody", in: dir.path)), ["phone", evilLabel], "\(version): the test's record is readable")

            let list = try runCommand([enrollURL.path, "list", "--user", "nobody", "--store", dir.path])
            XCTAssertEqual(list.status, 0, "\(version) list: " + list.stderr)
            XCTAssertTrue(list.stdout.contains("2J") && list.stdout.contains("evil"), "\(version): the label is listed: " + list.stdout)
            assertEscaped(list, "\(version) list")

            let missing = try runCommand([enrollURL.path, "remove", "\u{9B}2J\u{202E}gone", "--user", "nobody", "--store", dir.path])
            XCTAssertNotEqual(missing.status, 0, "\(version): removed a label that does not exist")
            assertEscaped(missing, "\(version) remove (no such label)")

            let removed = try runCommand([enrollURL.path, "remove", evilLabel, "--user", "nobody", "--store", dir.path])
            XCTAssertEqual(removed.status, 0, "\(version) remove: " + removed.stderr)
            XCTAssertTrue(removed.stdout.contains("Removed factor"), removed.stdout)
            assertEscaped(removed, "\(version) remove")
            XCTAssertEqual(labels(try record("nobody", in: dir.path)), ["phone"], version)
        }
    }

    // MARK: - Finding 8: recovery codes to a full disk

    /// `recovery-codes > /dev/full` exited 0 and replaced the set by codes nobody saw. Now it
    /// fails, and the old set still logs in through the module.
    func testRecoveryCodesThatCannotBeWrittenOutKeepTheOldSet() throws {
        let fixture = try PAMFixture()
        defer { fixture.cleanup() }
        try fixture.service("totp", ["auth required MODULE STORE"])
        let s = fixture.store.path
        awayFromStepBoundary(margin: 6)
        let enrol = try runCommand([enrollURL.path, "enroll", "--user", "nobody", "--store", s, "--name", "phone",
                                    "--secret", secretA, "--code", totp(secretA, at: Int64(time(nil))), "--qr", "none"])
        XCTAssertEqual(enrol.status, 0, enrol.stderr)
        let made = try runCommand([enrollURL.path, "recovery-codes", "--user", "nobody", "--store", s])
        XCTAssertEqual(made.status, 0, made.stderr)
        let codes = recoveryCodes(made.stdout)
        XCTAssertEqual(codes.count, 10, made.stdout)
        let kept = try XCTUnwrap(try record("nobody", in: s))

        let full = try runCommand(["sh", "-c", "exec \"$0\" recovery-codes --user nobody --store \"$1\" > /dev/full", enrollURL.path, s])
        XCTAssertNotEqual(full.status, 0, "recovery-codes > /dev/full exited 0: " + full.stderr)
        XCTAssertTrue(full.stderr.contains("could not write"), full.stderr)
        XCTAssertEqual(try record("nobody", in: s)?.recovery, kept.recovery, "the set was replaced by codes nobody saw")
        XCTAssertEqual(fixture.authenticate(service: "totp", user: "nobody", conversation: Conversation(answer: Array(codes[0].utf8))),
                       PAM_SUCCESS, "an old recovery code no longer logs in")
    }

    // MARK: - Issue 35: a mandatory group could not enrol

    /// With the profile enabled (pam_totp with nullok after the password, what common-auth
    /// holds) and `[group G] nullok = no`, an un-enrolled member of G ran totp-enroll and got
    /// "authentication failed: nothing was changed": the totp-enroll service asked them for a
    /// code they could not have. Now they add a first factor after the password, while a login
    /// service with the same lines still refuses them until they have one.
    func testAnUnenrolledMemberOfAMandatoryGroupCanEnrol() throws {
        try makeUser()
        let group = "totpmg" + tag
        XCTAssertEqual(try runCommand(["groupadd", group]).status, 0)
        defer { _ = try? runCommand(["groupdel", group]) }
        XCTAssertEqual(try runCommand(["usermod", "-aG", group, user]).status, 0)
        try setSystemFile("/etc/security/pam_totp.conf", "# CLIChangeRulesTests: mandatory for one group\n[group \(group)]\nnullok = no\n")
        try setSystemFile("/etc/pam.d/totp-enroll", passwordAndCodeStack)
        // A login service with the same lines: the member, un-enrolled, is asked and denied.
        let fixture = try PAMFixture()
        defer { fixture.cleanup() }
        try fixture.service("login", ["auth required MODULE store=\(defaultStore) nullok"])
        let denied = Conversation(answer: Array("123456".utf8))
        XCTAssertEqual(fixture.authenticate(service: "login", user: user, conversation: denied), PAM_AUTH_ERR)
        XCTAssertEqual(denied.prompts.filter { $0.contains("Verification code") }.count, 1)
        // totp-enroll: the password, then a first factor proved by its code.
        awayFromStepBoundary(margin: 8)
        let t0 = Int64(time(nil))
        let r = try asUser([binary, "--name", "phone", "--secret", secretA, "--code", totp(secretA, at: t0), "--qr", "none"],
                           input: password + "\n")
        XCTAssertEqual(r.status, 0, "the member could not enrol:\n" + r.stdout + r.stderr)
        XCTAssertEqual(labels(try record(user, in: defaultStore)), ["phone"])
        // Now enrolled: the login service asks and accepts the next code.
        let ok = Conversation(answer: Array(totp(secretA, at: t0 + 30).utf8))
        XCTAssertEqual(fixture.authenticate(service: "login", user: user, conversation: ok), PAM_SUCCESS)
        // The site may still forbid it for the enrolment service explicitly.
        try setSystemFile("/etc/security/pam_totp.conf",
                          "[group \(group)]\nnullok = no\n[service totp-enroll]\nnullok = no\n")
        let other = try makeOtherMember(group: group)
        defer { _ = try? runCommand(["userdel", other.name]) }
        let refused = try runCommand(["setsid", "-w", "setpriv", "--reuid=\(other.uid)", "--regid=\(other.gid)", "--clear-groups",
                                      binary, "--name", "phone", "--secret", secretB, "--code", totp(secretB, at: t0), "--qr", "none"],
                                     input: other.password + "\n123456\n")
        XCTAssertNotEqual(refused.status, 0, refused.stdout + refused.stderr)
        XCTAssertTrue(refused.stderr.contains("authentication failed"), refused.stderr)
        XCTAssertNil(try record(other.name, in: defaultStore))
    }

    /// A second throwaway member of `group` (removed by the caller).
    func makeOtherMember(group: String) throws -> (name: String, uid: uid_t, gid: gid_t, password: String) {
        let name = "crw" + tag
        _ = try? runCommand(["userdel", name])
        XCTAssertEqual(try runCommand(["useradd", "-M", "-s", "/bin/sh", "-G", group, name]).status, 0)
        let pass = "0ther-h0rse-\(UInt32.random(in: 0...UInt32.max))"
        XCTAssertEqual(try runCommand(["chpasswd"], input: "\(name):\(pass)\n").status, 0)
        let pw = try XCTUnwrap(getpwnam(name))
        return (name, pw.pointee.pw_uid, pw.pointee.pw_gid, pass)
    }

    // MARK: - Finding 9: a user removed their own last factor

    /// With nullok in /etc/security/pam_totp.conf, a user could remove their last factor (and
    /// be locked out where a stack had no nullok). Now a user can never remove their own last
    /// factor; root can.
    func testUsersCannotRemoveTheirOwnLastFactorWhateverTheConfigSays() throws {
        try makeUser()
        try setSystemFile("/etc/security/pam_totp.conf", "# CLIChangeRulesTests: nullok for every stack\nnullok\n")
        try setSystemFile("/etc/pam.d/totp-enroll", passwordAndCodeStack)
        awayFromStepBoundary(margin: 8)
        let t0 = Int64(time(nil))
        try enrolAsRoot(user, label: "phone", b32: secretA, at: t0, privateStore: false)
        let own = try asUser([binary, "remove", "phone", "--code", totp(secretA, at: t0 + 30)],
                             input: password + "\n" + totp(secretA, at: t0 + 30) + "\n")
        XCTAssertNotEqual(own.status, 0, "the user removed their own last factor:\n" + own.stdout + own.stderr)
        XCTAssertTrue(own.stderr.contains("last factor"), own.stderr)
        XCTAssertEqual(labels(try record(user, in: defaultStore)), ["phone"], "the factor is gone")

        let byRoot = try tool(["remove", "phone", "--user", user], privateStore: false)
        XCTAssertEqual(byRoot.status, 0, byRoot.stderr)
        XCTAssertNil(try record(user, in: defaultStore), "root removes a user's last factor")
    }

    // MARK: - Finding 14: checks after the password and a code were spent

    /// A QR file the user cannot write, a label that exists and a secret already enrolled are
    /// each refused before the password prompt: no "Password" on stderr, the password is left
    /// unread on standard input, no key or URI printed, nothing saved.
    func testEnrolmentIsCheckedBeforeThePasswordIsAskedFor() throws {
        try makeUser()
        try setSystemFile("/etc/pam.d/totp-enroll", passwordAndCodeStack)
        awayFromStepBoundary(margin: 8)
        let t0 = Int64(time(nil))
        try enrolAsRoot(user, label: "phone", b32: secretA, at: t0, privateStore: false)
        let before = try XCTUnwrap(try record(user, in: defaultStore))
        let rootOnly = root.appendingPathComponent("root-only")
        XCTAssertEqual(mkdir(rootOnly.path, 0o755), 0)
        let qr = rootOnly.appendingPathComponent("qr.png").path

        let cases: [(String, [String], String)] = [
            ("a QR file the user cannot write", ["--name", "tablet", "--secret", secretB, "--qr-png", qr], "cannot write"),
            ("a label that exists", ["--name", "phone", "--secret", secretB], "already exists"),
            ("a secret already enrolled", ["--name", "tablet", "--secret", secretA], "already enrolled"),
        ]
        // After the tool exits, whatever it left on standard input is printed after a marker.
        let script = "\"$0\" \"$@\"; s=$?; printf '\\nSTDIN-LEFT:'; cat; exit $s"
        let input = password + "\n" + totp(secretA, at: t0 + 30) + "\n"
        for (what, args, needle) in cases {
            let r = try asUser(["sh", "-c", script, binary, "enroll", "--qr", "none", "--code", totp(secretB, at: t0 + 30)] + args,
                               input: input)
            XCTAssertNotEqual(r.status, 0, "\(what): accepted\n" + r.stdout + r.stderr)
            XCTAssertTrue(r.stderr.contains(needle), "\(what): " + r.stderr)
            XCTAssertFalse(r.stderr.contains("Password"), "\(what): the password was asked for first: " + r.stderr)
            XCTAssertTrue(r.stdout.contains("STDIN-LEFT:" + input), "\(what): the password was read: " + r.stdout.debugDescription)
            XCTAssertFalse(r.stdout.contains("otpauth://"), "\(what): the URI was shown")
            XCTAssertFalse(r.stdout.contains("Key:"), "\(what): the key was shown")
            XCTAssertEqual(try record(user, in: defaultStore), before, "\(what): the record changed")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: qr))
    }

    // MARK: - Finding 15: no record of changes

    /// enroll, import, recovery-codes, remove, unlock and purge each log one authpriv.notice
    /// line (ident totp-enroll) naming who did it (uid 0), for whom and which label, and never
    /// a secret, a code or a recovery code.
    func testEveryChangeIsLoggedOnceWithoutSecrets() throws {
        try makeUser()
        capture = try SyslogCapture(scratch: root)
        awayFromStepBoundary(margin: 8)
        let t0 = Int64(time(nil))
        let enrolCode = totp(secretA, at: t0)
        let ga = try googleAuthenticatorFile("ga", owner: user, codes: 3)
        var outputs: [CommandResult] = []  // each run's output, for the recovery codes
        func run(_ what: String, _ args: [String]) throws {
            let r = try tool(args)
            XCTAssertEqual(r.status, 0, "\(what): " + r.stdout + r.stderr)
            outputs.append(r)
        }
        try run("enroll", ["enroll", "--user", user, "--name", "phone", "--secret", secretA, "--code", enrolCode, "--qr", "none"])
        try run("import", ["import-google-authenticator", ga.url.path, "--user", user, "--name", "ga"])
        try run("recovery-codes", ["recovery-codes", "--user", user])
        let codes = recoveryCodes(outputs.last?.stdout ?? "")
        XCTAssertEqual(codes.count, 10)
        try run("remove", ["remove", "ga", "--user", user])
        try run("unlock", ["unlock", "--user", user])
        try run("purge", ["purge", "--user", user])

        let lines = try XCTUnwrap(capture).stop()
        capture = nil
        let ours = lines.filter { $0.contains("totp-enroll") && $0.contains(user) }
        XCTAssertEqual(ours.count, 6, "one line per change; captured:\n" + lines.joined(separator: "\n"))
        for line in ours {
            XCTAssertTrue(line.hasPrefix("<85>"), "authpriv.notice: " + line)
            XCTAssertTrue(line.contains("totp-enroll["), "ident totp-enroll with the pid: " + line)
            XCTAssertTrue(line.contains("uid 0"), "who did it: " + line)
            XCTAssertTrue(line.contains(user), "for whom: " + line)
        }
        let expected: [(String, (String) -> Bool)] = [
            ("enrol \"phone\"", { $0.contains("enrol") && $0.contains("phone") }),
            ("import \"ga\"", { $0.contains("import") && $0.contains("\"ga\"") }),
            ("recovery codes", { $0.contains("recovery codes") && !$0.contains("import") }),
            ("remove \"ga\"", { $0.contains("remove") && $0.contains("\"ga\"") }),
            ("unlock", { $0.contains("unlock") }),
            ("purge", { $0.contains("purge") }),
        ]
        for (what, matches) in expected {
            XCTAssertEqual(ours.filter(matches).count, 1, "one line for \(what); ours:\n" + ours.joined(separator: "\n"))
        }

        var forbidden = [secretA, secretA.lowercased(), ga.secret, ga.secret.lowercased(), enrolCode] + ga.scratch
        for c in codes { forbidden += [c, c.replacingOccurrences(of: "-", with: "")] }
        for line in lines {
            let masked = line.replacingOccurrences(of: #"\[[0-9]+\]"#, with: "[pid]", options: .regularExpression)
            XCTAssertEqual(forbidden.filter { masked.contains($0) }, [], "a log line leaks: " + line)
        }
        print(ours.joined(separator: "\n"))
    }
}
