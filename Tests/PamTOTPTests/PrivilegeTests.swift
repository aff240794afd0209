import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// totp-enroll as an unprivileged user would run it: installed set-uid root (a copy of the
/// built binary), re-authenticating through /etc/pam.d/totp-enroll (password via pam_unix, then
/// a code via the built pam_totp.so with nullok), on the default store. Run under `setsid`, so
/// there is no terminal and PAM's questions are answered on standard input.
final class PrivilegeTests: XCTestCase {
    var fixture: SetUIDFixture!
    var root: URL { fixture.root }
    var binary: String { fixture.binary }
    var user: String { fixture.user }
    var uid: uid_t { fixture.uid }
    var gid: gid_t { fixture.gid }
    var password: String { fixture.password }
    let secretB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    /// A second factor needs a secret of its own (one secret enrolled twice is refused).
    let tabletB32 = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
    var storePath: String { fixture.storePath }

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "needs root: useradd, a set-uid copy, /etc/pam.d/totp-enroll")
        fixture = try SetUIDFixture(prefix: "totpu", service: SetUIDFixture.passwordAndModuleService)
    }

    override func tearDown() {
        guard isRoot, fixture != nil else { return }
        fixture.cleanup()
    }

    /// Runs `command` as the test user, without a controlling terminal.
    func asUser(_ command: [String], input: String = "") throws -> CommandResult {
        try runCommand(["setsid", "-w", "setpriv", "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups"] + command, input: input)
    }

    func code(offsetSteps: Int64 = 0, key: String? = nil) -> String {
        let secret = (try? Base32.decode(Array((key ?? secretB32).utf8))) ?? []
        let t = Int64(time(nil)) + offsetSteps * 30
        return String(decoding: (try? TOTP.code(secret: secret, parameters: .default, at: t)) ?? [], as: UTF8.self)
    }

    func record() throws -> UserRecord? { try Store(path: Array(storePath.utf8)).read(user: Array(user.utf8)) }

    func testUnprivilegedUserEnrolsListsAndIsConfined() throws {
        // The set-uid tool cannot be made to write where the user cannot: QR files are written
        // by a child running as the user.
        for target in ["/etc/pam_totp_evil.png", "/root/pam_totp_evil.svg", storePath + "/evil.png"] {
            let opt = target.hasSuffix(".svg") ? "--qr-svg" : "--qr-png"
            let r = try asUser([binary, "--name", "evil", "--qr", "none", opt, target, "--code", "000000"], input: password + "\n")
            XCTAssertNotEqual(r.status, 0, target)
            XCTAssertTrue(r.stderr.contains("cannot write"), "\(target): \(r.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: target), target)
        }
        let own = root.appendingPathComponent("mine")
        XCTAssertEqual(mkdir(own.path, 0o700), 0)
        XCTAssertEqual(chown(own.path, uid, gid), 0)
        let png = own.appendingPathComponent("qr.png").path
        let wrote = try asUser([binary, "--name", "spare", "--qr", "none", "--qr-png", png, "--secret", secretB32, "--code", "000000"],
                               input: password + "\n")
        XCTAssertNotEqual(wrote.status, 0, "000000 is not this secret's code now (nothing saved)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: png), wrote.stderr)
        let pngAttrs = try FileManager.default.attributesOfItem(atPath: png)
        XCTAssertEqual((pngAttrs[.ownerAccountID] as? NSNumber)?.uint32Value, uid, "written as the user, not root")

        awayFromStepBoundary(margin: 6)
        // A wrong password: refused before any secret is generated or shown.
        let wrong = try asUser([binary, "--secret", secretB32, "--qr", "none", "--code", code()], input: "not-my-password\n")
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertTrue(wrong.stderr.contains("Password"), "asked for the password first: " + wrong.stderr)
        XCTAssertTrue(wrong.stderr.contains("authentication failed"), wrong.stderr)
        XCTAssertFalse(wrong.stdout.contains("otpauth://"), "nothing shown before re-authentication")
        XCTAssertNil(try record())

        // The right password: enrols (no factor yet, so pam_totp's nullok lets the password decide).
        let ok = try asUser([binary, "--name", "phone", "--secret", secretB32, "--qr", "none", "--code", code()],
                            input: password + "\n")
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr)
        XCTAssertEqual(try record()?.factors.map { String(decoding: $0.label, as: UTF8.self) }, ["phone"])
        let attrs = try FileManager.default.attributesOfItem(atPath: storePath + "/" + user)
        XCTAssertEqual((attrs[.ownerAccountID] as? NSNumber)?.intValue, 0, "the record belongs to root")

        // list: own factors, no password needed, no secret shown.
        let list = try asUser([binary, "list"])
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertTrue(list.stdout.contains("phone"), list.stdout)
        XCTAssertFalse(list.stdout.contains(secretB32))

        // The store is not readable by the user, directly.
        XCTAssertNotEqual(try asUser(["cat", storePath + "/" + user]).status, 0)
        XCTAssertNotEqual(try asUser(["ls", storePath]).status, 0)

        // Cannot act on another user, or point the tool at another store.
        for args in [["list", "--user", "root"], ["--user", "root", "--qr", "none"], ["list", "--store", root.path],
                     ["unlock", "--user", user]] {
            let r = try asUser([binary] + args, input: password + "\n")
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains("root only"), "\(args): \(r.stderr)")
        }

        // A second factor needs the password AND a current code of the first one.
        awayFromStepBoundary(margin: 6)
        let second = try asUser([binary, "--name", "tablet", "--secret", tabletB32, "--qr", "none", "--code", code(offsetSteps: 2, key: tabletB32)],
                                input: password + "\n" + "000000" + "\n")
        XCTAssertNotEqual(second.status, 0, "a wrong current code refuses the change")
        XCTAssertEqual(try record()?.factors.count, 1)
        let third = try asUser([binary, "--name", "tablet", "--secret", tabletB32, "--qr", "none", "--code", code(offsetSteps: 2, key: tabletB32)],
                               input: password + "\n" + code(offsetSteps: 1) + "\n")
        XCTAssertEqual(third.status, 0, third.stdout + third.stderr)
        XCTAssertEqual(try record()?.factors.count, 2)

        // remove: password + a current code through PAM (--code answers the code prompt).
        awayFromStepBoundary(margin: 6)
        let removed = try asUser([binary, "remove", "tablet", "--code", code(offsetSteps: 3)], input: password + "\n")
        XCTAssertEqual(removed.status, 0, removed.stdout + removed.stderr)
        XCTAssertEqual(try record()?.factors.count, 1)
        // And the factor logs in: the whole path a new user takes, through the real module.
        let service = "pam_totp_suid_\(getpid())"
        try "auth required \(moduleURL.path)\n".write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        defer { unlink("/etc/pam.d/" + service) }
        let login = try runCommand(["pamtester", service, user, "authenticate"], input: code(offsetSteps: 4) + "\n")
        XCTAssertEqual(login.status, 0, login.stdout + login.stderr)
        // ...but not the last factor (the site has no nullok).
        let last = try asUser([binary, "remove", "phone", "--code", code(offsetSteps: 5)], input: password + "\n")
        XCTAssertNotEqual(last.status, 0)
        XCTAssertTrue(last.stderr.contains("last factor"), last.stderr)
        XCTAssertEqual(try record()?.factors.count, 1)
    }

    func testEnvironmentIsClearedAndCodeRunsUnprivileged() throws {
        // `code` drops privileges at once: it can read only what the caller can.
        let r = try asUser([binary, "code", "--secret", "-", "--time", "59"], input: secretB32 + "\n")
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "287082")
        // A hostile environment changes nothing (and the loader ignores LD_* for set-uid anyway).
        let env = try asUser(["env", "LANG=xx_XX.bogus", "LC_ALL=xx", "PATH=/nonexistent", "TERM=dumb", binary, "list"])
        XCTAssertEqual(env.status, 0, env.stderr)
        XCTAssertTrue(env.stdout.contains("no factors"), env.stdout)
    }
}
