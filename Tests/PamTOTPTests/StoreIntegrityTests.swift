import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The security review's findings, each replayed as the review did it, through real peers:
/// pamtester (out of process, as root, service files in /etc/pam.d), libpam in process
/// (pam_start_confdir), and the totp-enroll CLI, which writes every record (secret on stdin).
/// Nothing here uses the library to write the store, so these tests run unchanged against older
/// binaries (PAM_TOTP_SO, TOTP_ENROLL): each failed against the module and CLI before the fix.
///
/// Resource limits are set by a small python3 wrapper in the child only (SIGXFSZ ignored, as
/// an attacker would before a set-uid program): the child's output goes through pipes, which
/// RLIMIT_FSIZE does not limit, and a child killed by a signal is reported as such.
///
/// Codes are computed for fixed steps around the step the test starts in (s0 - 2 ... s0 + 1),
/// so no test waits for a step boundary: with the default window (adjacent_intervals=5, in
/// totp-enroll and the module) each stays current for at least 90 s.
final class StoreIntegrityTests: XCTestCase {
    var fixture: PAMFixture!
    var services: [String] = []
    var users: [String] = []
    /// Letters only (from the pid): no digit run in a name can look like a code.
    let tag = "rr" + String(String(getpid()).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(String($0))!)) })

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "--user/--store, /etc/pam.d service files, useradd and resource limits need root")
        fixture = try PAMFixture()
        try fixture.service("totp", ["auth required MODULE STORE"])
    }

    override func tearDown() {
        for s in services { unlink("/etc/pam.d/" + s) }
        services = []
        for u in users { _ = try? runCommand(["userdel", u]) }
        users = []
        fixture?.cleanup()
    }

    // MARK: - Helpers

    var store: String { fixture.store.path }

    /// Writes /etc/pam.d/<tag>_<name> (MODULE is the module under test, STORE its store=) and
    /// returns the service name.
    func systemService(_ name: String, _ lines: [String]) throws -> String {
        let full = tag + "_" + name
        services.append(full)
        let text = lines.map {
            $0.replacingOccurrences(of: "MODULE", with: moduleURL.path).replacingOccurrences(of: "STORE", with: "store=" + store)
        }.joined(separator: "\n") + "\n"
        try text.write(toFile: "/etc/pam.d/" + full, atomically: true, encoding: .utf8)
        return full
    }

    static let wrapperSource = """
        import resource, signal, subprocess, sys
        fsize = int(sys.argv[1])
        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            if fsize >= 0:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        p = subprocess.run(sys.argv[2:], stdin=sys.stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           preexec_fn=limit, restore_signals=False)
        sys.stdout.buffer.write(p.stdout)
        sys.stderr.buffer.write(p.stderr)
        if p.returncode < 0:
            sys.stderr.write("killed by signal %d\\n" % -p.returncode)
            sys.exit(128 - p.returncode)
        sys.exit(p.returncode)
        """

    /// Runs `command` with SIGXFSZ ignored and, if `fsize` is given, RLIMIT_FSIZE = fsize
    /// (soft and hard). A child killed by signal N exits 128+N with "killed by signal N".
    func run(_ command: [String], input: String = "", fsize: Int? = nil) throws -> CommandResult {
        try runCommand(["python3", "-c", Self.wrapperSource, String(fsize ?? -1)] + command, input: input)
    }

    /// totp-enroll ARGS --store STORE.
    func tool(_ args: [String], input: String = "", fsize: Int? = nil) throws -> CommandResult {
        try run([enrollURL.path] + args + ["--store", store], input: input, fsize: fsize)
    }

    /// Enrols `label` for `user` with the Base32 `secret` (on stdin), proved by the code of `step`.
    func enrol(_ user: String, _ label: String, _ secret: [UInt8], step: Int64, fsize: Int? = nil) throws -> CommandResult {
        try tool(["enroll", "--user", user, "--name", label, "--secret", "-", "--code", code(secret, step), "--qr", "none"],
                 input: Base32.encodeString(secret) + "\n", fsize: fsize)
    }

    func pamtester(_ service: String, _ user: String, _ answer: String, fsize: Int? = nil) throws -> CommandResult {
        try run(["pamtester", service, user, "authenticate"], input: answer + "\n", fsize: fsize)
    }

    /// One authentication through libpam in process (the fixture's service "totp", no fail delay).
    func auth(_ user: String, _ answer: String) -> Int32 {
        fixture.authenticate(service: "totp", user: user, conversation: Conversation(answer: Array(answer.utf8)))
    }

    func currentStep() -> Int64 { Int64(time(nil)) / 30 }

    func code(_ secret: [UInt8], _ step: Int64) -> String {
        String(decoding: (try? TOTP.code(secret: secret, parameters: .default, at: step * 30)) ?? [], as: UTF8.self)
    }

    func randomSecret() -> [UInt8] { (0..<20).map { _ in UInt8.random(in: 0...255) } }

    /// A 6-digit code that matches none of `secrets` within 6 steps of `step`.
    func wrongCode(_ secrets: [[UInt8]], around step: Int64) -> String {
        let window = Set(secrets.flatMap { s in (-6...6).map { code(s, step + Int64($0)) } })
        var n = 314_159
        while window.contains(String(format: "%06d", n)) { n = (n + 1) % 1_000_000 }
        return String(format: "%06d", n)
    }

    func exists(_ name: String) -> Bool {
        var st = stat()
        return lstat(store + "/" + name, &st) == 0
    }

    func storeListing() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: store)) ?? []).sorted()
    }

    func recoveryCodes(_ output: String) -> [String] {
        output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
    }

    func describe(_ r: CommandResult) -> String { "status \(r.status), stdout \(r.stdout.debugDescription), stderr \(r.stderr.debugDescription)" }

    static let authFailure = "Authentication failure"
    static let authInfoUnavailable = "Authentication service cannot retrieve authentication info"
    static let authenticated = "successfully authenticated"

    /// A uid that no account has, not in `excluding`.
    func freeUID(excluding: [uid_t] = []) -> uid_t {
        var uid = uid_t(42_000 + getpid() % 10_000)
        while getpwuid(uid) != nil || excluding.contains(uid) { uid += 1 }
        return uid
    }

    // MARK: - Findings

    /// Finding 1 (high): a code oracle under RLIMIT_FSIZE=0. The attempt cannot be recorded,
    /// and the right code used to answer PAM_AUTHINFO_UNAVAIL where a wrong one answered
    /// PAM_AUTH_ERR. Now every answer under the limit gets exactly the wrong-code output, for a
    /// user with a state file and one without, and for a recovery code; none is used up.
    func testNoCodeOracleUnderFileSizeLimit() throws {
        let s0 = currentStep()
        let withState = "daemon", withoutState = "bin"
        let secretA = randomSecret(), secretB = randomSecret()
        let service = try systemService("oracle", ["auth required MODULE STORE"])
        let enrolA = try enrol(withState, "phone", secretA, step: s0 - 2)
        XCTAssertEqual(enrolA.status, 0, describe(enrolA))
        let enrolB = try enrol(withoutState, "phone", secretB, step: s0 - 2)
        XCTAssertEqual(enrolB.status, 0, describe(enrolB))
        let first = try pamtester(service, withState, code(secretA, s0 - 1))
        XCTAssertEqual(first.status, 0, "a first login gives \(withState) a state file: " + describe(first))
        XCTAssertTrue(exists(".state." + withState))
        // (Older versions wrote a state file at enrolment; this user must have none.)
        unlink(store + "/.state." + withoutState)
        XCTAssertFalse(exists(".state." + withoutState))
        let recovery = try tool(["recovery-codes", "--user", withState])
        XCTAssertEqual(recovery.status, 0, describe(recovery))
        let recoveryCode = try XCTUnwrap(recoveryCodes(recovery.stdout).first, recovery.stdout)

        let wrong = wrongCode([secretA, secretB], around: s0)
        let rightA = code(secretA, s0), rightB = code(secretB, s0)
        for (user, right) in [(withState, rightA), (withoutState, rightB)] {
            let r = try pamtester(service, user, right, fsize: 0)
            let w = try pamtester(service, user, wrong, fsize: 0)
            XCTAssertNotEqual(w.status, 0, describe(w))
            XCTAssertTrue(w.stderr.contains(Self.authFailure), "a wrong code is a wrong code: " + describe(w))
            XCTAssertEqual(r.status, w.status, "\(user): right vs wrong code under RLIMIT_FSIZE=0: \(describe(r)) vs \(describe(w))")
            XCTAssertEqual(r.stdout, w.stdout, "\(user): right vs wrong code, stdout")
            XCTAssertEqual(r.stderr, w.stderr, "\(user): right vs wrong code, stderr")
            XCTAssertFalse(r.stderr.contains(Self.authInfoUnavailable), "\(user): the right code is told apart: " + describe(r))
            if user == withState {
                let c = try pamtester(service, user, recoveryCode, fsize: 0)
                XCTAssertEqual(c.status, w.status, "recovery code vs wrong code under the limit: \(describe(c)) vs \(describe(w))")
                XCTAssertEqual(c.stdout, w.stdout, "recovery code vs wrong code, stdout")
                XCTAssertEqual(c.stderr, w.stderr, "recovery code vs wrong code, stderr")
            }
        }
        XCTAssertFalse(exists(".state." + withoutState), "nothing could be written")

        // The limit lifted: nothing denied above was used up; the recovery code then works once.
        for (user, right) in [(withState, rightA), (withoutState, rightB)] {
            let ok = try pamtester(service, user, right)
            XCTAssertEqual(ok.status, 0, "\(user): the code denied under the limit still works: " + describe(ok))
            XCTAssertTrue(ok.stdout.contains(Self.authenticated), describe(ok))
        }
        let once = try pamtester(service, withState, recoveryCode)
        XCTAssertEqual(once.status, 0, "the recovery code denied under the limit still works: " + describe(once))
        let twice = try pamtester(service, withState, recoveryCode)
        XCTAssertNotEqual(twice.status, 0, "a recovery code works once: " + describe(twice))
        XCTAssertTrue(twice.stderr.contains(Self.authFailure), describe(twice))
    }

    /// Finding 2 (medium): replay protection after 32 labels. Once a user had used 32
    /// factors, the state kept the entry of a removed factor and had no room for a new one,
    /// so the new factor's codes were never recorded as used and each worked any number of times.
    func testReplayProtectionAfter32Labels() throws {
        let s0 = currentStep()
        let user = "daemon"
        var secrets: [[UInt8]] = []
        for i in 1...32 {
            let secret = randomSecret()
            secrets.append(secret)
            let r = try enrol(user, "f\(i)", secret, step: s0 - 2)
            XCTAssertEqual(r.status, 0, "f\(i): " + describe(r))
        }
        for (i, secret) in secrets.enumerated() {
            XCTAssertEqual(auth(user, code(secret, s0 - 1)), PAM_SUCCESS, "f\(i + 1) logs in once")
        }
        let removed = try tool(["remove", "f1", "--user", user])
        XCTAssertEqual(removed.status, 0, describe(removed))
        let secret33 = randomSecret()
        let added = try enrol(user, "f33", secret33, step: s0 - 2)
        XCTAssertEqual(added.status, 0, describe(added))
        let c = code(secret33, s0 - 1)
        XCTAssertEqual(auth(user, c), PAM_SUCCESS, "f33's code, first use")
        XCTAssertEqual(auth(user, c), PAM_AUTH_ERR, "f33's code replayed")
        XCTAssertEqual(auth(user, c), PAM_AUTH_ERR, "f33's code replayed again")
        XCTAssertEqual(auth(user, code(secrets[1], s0 - 1)), PAM_AUTH_ERR, "f2's code replayed")
        XCTAssertEqual(auth(user, code(secrets[0], s0)), PAM_AUTH_ERR, "f1 is gone")
    }

    /// Finding 4 (low): a failed enrolment saved the factor. Under RLIMIT_FSIZE=1000 the
    /// record fit but the state file did not: totp-enroll reported "write failed: File too
    /// large" and exited non-zero, yet the factor was saved and its enrolment code logged in.
    /// Now an enrolment either succeeds whole (and its code counts as used) or saves nothing.
    func testFailedEnrolmentSavesNothing() throws {
        let s0 = currentStep()
        for (user, limit) in [("daemon", 1000), ("bin", 50)] {
            let secret = randomSecret()
            let r = try enrol(user, "phone", secret, step: s0 - 1, fsize: limit)
            let list = try tool(["list", "--user", user])
            XCTAssertEqual(list.status, 0, describe(list))
            if r.status == 0 {
                XCTAssertNotEqual(limit, 50, "a 50-byte limit cannot hold a record, yet the enrolment succeeded: " + describe(r))
                XCTAssertTrue(list.stdout.contains("phone"), "reported enrolled, so it is saved: " + list.stdout)
                XCTAssertEqual(auth(user, code(secret, s0 - 1)), PAM_AUTH_ERR,
                               "RLIMIT_FSIZE=\(limit): the enrolment's own code must not log in")
                XCTAssertEqual(auth(user, code(secret, s0)), PAM_SUCCESS, "RLIMIT_FSIZE=\(limit): a later code logs in")
            } else {
                XCTAssertFalse(list.stdout.contains("phone"),
                               "RLIMIT_FSIZE=\(limit): the enrolment failed (\(r.stderr.trimmingCharacters(in: .newlines))) but the factor was saved: " + list.stdout)
                XCTAssertTrue(list.stdout.contains("no factors"), list.stdout)
                XCTAssertFalse(exists(user), "RLIMIT_FSIZE=\(limit): no record")
                XCTAssertEqual(auth(user, code(secret, s0 - 1)), PAM_AUTH_ERR,
                               "RLIMIT_FSIZE=\(limit): the failed enrolment's code must not log in")
            }
            XCTAssertFalse(storeListing().contains { $0.hasPrefix(".tmp.") }, "no temp file left: \(storeListing())")
        }
    }

    /// Finding 11 (low): a version-1 state slot whose checksum line ends exactly at the slot's
    /// end (no newline after the 64 hex digits, everything else valid) made the parser read one
    /// byte past the slot: the module trapped and took its host down (pamtester died of
    /// SIGILL). Now the slot is invalid, and with no valid slot the login is denied.
    func testCraftedStateSlotDoesNotTrap() throws {
        let s0 = currentStep()
        let user = "daemon"
        let secret = randomSecret()
        let enrolled = try enrol(user, "phone", secret, step: s0 - 1)
        XCTAssertEqual(enrolled.status, 0, describe(enrolled))
        let path = store + "/.state." + user
        unlink(path)
        try Data(craftedVersion1StateFile()).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chmod(path, 0o600), 0)
        let service = try systemService("crafted", ["auth required MODULE STORE"])
        let r = try pamtester(service, user, code(secret, s0))
        XCTAssertFalse(r.stderr.contains("killed by signal"), "the module crashed pamtester: " + describe(r))
        XCTAssertLessThan(r.status, 128, describe(r))
        XCTAssertNotEqual(r.status, 0, "a state with no valid slot denies: " + describe(r))
        XCTAssertTrue(r.stderr.contains(Self.authInfoUnavailable), "PAM_AUTHINFO_UNAVAIL: " + describe(r))
    }

    /// Finding 12: factors outlived the account. A record enrolled for a deleted account was
    /// used for the next account that got the same name. Now it is not (no nullok: denied like
    /// an unenrolled user; nullok: ignored), the module says why, and root can purge it.
    func testFactorsDoNotOutliveTheAccount() throws {
        let user = tag + "x"
        // Accounts made by other test classes at the same time take the next free uid (the
        // highest + 1): the second account's uid is far from the first, and a uid taken between
        // the look-up and useradd (status 4, "not unique") is tried again with another.
        enum AccountError: Error { case useradd(String) }
        func addUser(excluding: [uid_t]) throws -> uid_t {
            var uid = freeUID(excluding: excluding)
            for _ in 0..<20 {
                let add = try runCommand(["useradd", "-M", "-s", "/usr/sbin/nologin", "-u", String(uid), user])
                if add.status == 0 { return uid }
                guard add.status == 4 else { throw AccountError.useradd(add.stderr) }
                uid = freeUID(excluding: excluding + [uid])
            }
            throw AccountError.useradd("no free uid")
        }
        users.append(user)
        let uid1 = try addUser(excluding: [])
        let capture = try SyslogCapture(scratch: fixture.root)
        defer { _ = capture.stop() }

        let s0 = currentStep()
        let secret = randomSecret()
        let enrolled = try enrol(user, "phone", secret, step: s0 - 1)
        XCTAssertEqual(enrolled.status, 0, describe(enrolled))
        let strict = try systemService("reuse", ["auth required MODULE STORE"])
        let lenient = try systemService("reusenullok", ["auth [success=done ignore=ignore default=die] MODULE STORE nullok",
                                                        "auth required pam_permit.so"])
        let first = try runCommand(capture.wrap(["pamtester", strict, user, "authenticate"]), input: code(secret, s0) + "\n")
        XCTAssertEqual(first.status, 0, "the account it was enrolled for logs in: " + describe(first))

        XCTAssertEqual(try runCommand(["userdel", user]).status, 0)
        let uid2 = try addUser(excluding: Array(uid1...(uid1 + 1_000)))
        XCTAssertNotEqual(uid1, uid2)

        let reused = try runCommand(capture.wrap(["pamtester", strict, user, "authenticate"]), input: code(secret, s0 + 1) + "\n")
        XCTAssertNotEqual(reused.status, 0, "the old account's factor logs the new account in: " + describe(reused))
        XCTAssertTrue(reused.stderr.contains(Self.authFailure), "denied like an unenrolled user (PAM_AUTH_ERR): " + describe(reused))
        let anyAnswer = try runCommand(capture.wrap(["pamtester", lenient, user, "authenticate"]), input: "000000\n")
        XCTAssertEqual(anyAnswer.status, 0, "nullok treats the new account as unenrolled (PAM_IGNORE): " + describe(anyAnswer))
        XCTAssertTrue(anyAnswer.stdout.contains(Self.authenticated), describe(anyAnswer))

        // purge: root only; removes the record, the state and the lock file.
        XCTAssertEqual(Set(storeListing()), [user, ".state." + user, ".lock." + user])
        let pw = try XCTUnwrap(getpwnam(user))
        let refused = try runCommand(["setpriv", "--reuid=\(pw.pointee.pw_uid)", "--regid=\(pw.pointee.pw_gid)", "--clear-groups",
                                      enrollURL.path, "purge", "--user", user, "--store", store])
        XCTAssertNotEqual(refused.status, 0, describe(refused))
        XCTAssertTrue(refused.stderr.contains("root only"), describe(refused))
        XCTAssertTrue(exists(user), "a refused purge removes nothing")
        let purged = try tool(["purge", "--user", user])
        XCTAssertEqual(purged.status, 0, describe(purged))
        XCTAssertTrue(purged.stdout.contains("Purged"), describe(purged))
        XCTAssertEqual(storeListing(), [], "record, state and lock file removed")

        let lines = capture.stop()
        XCTAssertTrue(lines.contains { $0.contains(user) && $0.contains("was enrolled for uid \(uid1)") },
                      "the module logs why the record is not used; captured (\(capture.modeDescription)): "
                      + lines.filter { $0.contains(user) }.joined(separator: "\n"))
    }

    /// Finding 12, the other half of purge: a name with nothing stored is reported as such
    /// (exit 0, "Nothing stored"), is not logged as purged, and leaves no file behind.
    func testPurgeOfANameWithNothingStoredSaysSo() throws {
        let user = tag + "y"  // no account, nothing stored
        let r = try tool(["purge", "--user", user])
        XCTAssertEqual(r.status, 0, describe(r))
        XCTAssertTrue(r.stdout.contains("Nothing stored"), "nothing was stored for \(user): " + describe(r))
        XCTAssertFalse(r.stdout.contains("Purged"), describe(r))
        XCTAssertEqual(storeListing(), [], "purge leaves no file (not even a lock file)")
    }

    /// Finding 1, a limit that cuts the state write short instead of refusing it: with
    /// RLIMIT_FSIZE=1000 the pwrite of a 2048-byte slot at offset 0 writes 1000 bytes and the
    /// rest fails (EFBIG). The attempt is denied as "could not be recorded", so like any denied
    /// answer it must change nothing: the same right code must still work once the limit is
    /// lifted (docs/ARCHITECTURE.md, section 4.1, §4.13).
    func testShortStateWriteUnderFileSizeLimitUsesNothingUp() throws {
        let s0 = currentStep()
        let user = "daemon"
        let secret = randomSecret()
        let service = try systemService("short", ["auth required MODULE STORE"])
        let enrolled = try enrol(user, "phone", secret, step: s0 - 2)
        XCTAssertEqual(enrolled.status, 0, describe(enrolled))
        // The first login creates the state file with its first slot write in the second slot
        // (sequence 1); the next write goes to the first slot, at offset 0.
        let first = try pamtester(service, user, code(secret, s0 - 1))
        XCTAssertEqual(first.status, 0, describe(first))
        let denied = try pamtester(service, user, code(secret, s0), fsize: 1000)
        XCTAssertNotEqual(denied.status, 0, "the attempt could not be recorded whole: " + describe(denied))
        XCTAssertTrue(denied.stderr.contains(Self.authFailure), describe(denied))
        let after = try pamtester(service, user, code(secret, s0))
        XCTAssertEqual(after.status, 0, "the code denied under RLIMIT_FSIZE=1000 was used up anyway: " + describe(after))
    }

    /// Second review: an NSS failure for an enrolled user's name read as "no such account", so
    /// the uid-bound record looked foreign, the user "unenrolled", and nullok let them through
    /// without a code. An LD_PRELOAD shim (test only) makes getpwnam_r fail with EIO for that
    /// name inside pamtester.
    func testAccountLookUpFailureDeniesUnderNullok() throws {
        let secret = randomSecret()
        let enrolled = try enrol("daemon", "phone", secret, step: currentStep())
        XCTAssertEqual(enrolled.status, 0, describe(enrolled))
        let dir = try makeTemporaryDirectory("nssfail")
        defer { removeTemporaryDirectory(dir) }
        let source = dir.appendingPathComponent("nssfail.c"), shim = dir.appendingPathComponent("nssfail.so")
        try """
            #define _GNU_SOURCE
            #include <dlfcn.h>
            #include <errno.h>
            #include <pwd.h>
            #include <string.h>
            int getpwnam_r(const char *name, struct passwd *pwd, char *buf, size_t len, struct passwd **result) {
                static int (*real)(const char *, struct passwd *, char *, size_t, struct passwd **);
                if (!real) real = dlsym(RTLD_NEXT, "getpwnam_r");
                if (strcmp(name, "daemon") == 0) { *result = NULL; return EIO; }
                return real(name, pwd, buf, len, result);
            }
            """.write(to: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["cc", "-shared", "-fPIC", "-o", shim.path, source.path, "-ldl"])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        let service = try systemService("nssfail", ["auth [success=done ignore=ignore default=die] MODULE STORE nullok",
                                                    "auth required pam_permit.so"])
        let wrong = wrongCode([secret], around: currentStep())
        let normal = try pamtester(service, "daemon", wrong)
        XCTAssertTrue(normal.stderr.contains("Authentication failure"), "control: a wrong code is denied: \(describe(normal))")
        let failing = try runCommand(["env", "LD_PRELOAD=" + shim.path, "pamtester", service, "daemon", "authenticate"],
                                     input: wrong + "\n")
        XCTAssertNotEqual(failing.status, 0, "an NSS failure let a wrong code through under nullok: \(describe(failing))")
        XCTAssertFalse(failing.stdout.contains("successfully authenticated"), describe(failing))
    }
}

/// A 4096-byte state file: slot 1 is a version-1 text slot, valid but for one thing — it ends
/// exactly with the last hex digit of its checksum line (no newline, no zero after it); slot 2
/// is zeros. With one byte less of filler and the newline, the same slot is valid.
func craftedVersion1StateFile(withNewline: Bool = false) -> [UInt8] {
    let slotSize = 2048
    var body = Array("pam_totp-state 1\n".utf8)
    // "end " + 64 hex digits (+ "\n") after the body fill the slot: pad with valid lines.
    let target = slotSize - 4 - 64 - (withNewline ? 1 : 0)
    while body.count + 6 <= target - 7 { body += Array("seq 1\n".utf8) }
    var last = "seq 1"
    while body.count + last.utf8.count + 1 < target { last += "0" }
    body += Array((last + "\n").utf8)
    precondition(body.count == target)
    var slot = body + Array("end ".utf8) + Array(hex(SHA256.hash(body)).utf8)
    if withNewline { slot.append(0x0A) }
    precondition(slot.count == slotSize)
    return slot + [UInt8](repeating: 0, count: slotSize)
}
