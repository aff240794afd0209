import Foundation
import MFADaemon
import MFAImport
import MFAPamStacks
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// `totp-enroll import-google-authenticator`: a file written by Debian's own
/// `google-authenticator` tool is imported, then its TOTP codes (from oathtool) and its scratch
/// codes log in through pamtester; HOTP files, unsafe files and malformed files are refused
/// without touching the store; nothing the tool prints contains the secret or a scratch code.
/// Root only (--user/--store, chown, /etc/pam.d). pamtester adds 2 s per failure: two here.
final class ImportTests: XCTestCase {
    var root: URL!
    var store: URL!
    var service = ""
    var nobody: (uid: uid_t, gid: gid_t) = (0, 0)
    let fixedSecret = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "--user/--store, chown and /etc/pam.d need root (as make check runs)")
        root = try makeTemporaryDirectory("pam_totp_import")
        // The tool opens the file as its owner (nobody), who must be able to reach it.
        XCTAssertEqual(chmod(root.path, 0o711), 0)
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        service = "pam_totp_import_\(getpid())"
        let pw = try XCTUnwrap(getpwnam("nobody"))
        nobody = (pw.pointee.pw_uid, pw.pointee.pw_gid)
    }

    override func tearDown() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        if let root { removeTemporaryDirectory(root) }
    }

    // MARK: - Helpers

    func importFile(_ path: String?, _ extra: [String] = []) throws -> CommandResult {
        try runCommand([enrollURL.path, "import-google-authenticator"] + (path.map { [$0] } ?? [])
                       + ["--user", "nobody", "--store", store.path] + extra)
    }

    /// A file made by google-authenticator itself, owned by nobody (mode 0400, as it writes it).
    func googleAuthenticatorFile(_ name: String, _ args: [String]) throws -> URL {
        let url = root.appendingPathComponent(name)
        let r = try runCommand(["google-authenticator", "--secret=" + url.path, "--force", "--quiet",
                                "--no-confirm", "--qr-mode=NONE"] + args)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(chown(url.path, nobody.uid, nobody.gid), 0)
        return url
    }

    /// A hand-written file with the given owner and mode.
    func handWritten(_ name: String, _ text: String, mode: mode_t = 0o400, owner: uid_t? = nil) throws -> URL {
        let url = root.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        XCTAssertEqual(chown(url.path, owner ?? nobody.uid, nobody.gid), 0)
        XCTAssertEqual(chmod(url.path, mode), 0)
        return url
    }

    func record() throws -> UserRecord? { try Store(path: Array(store.path.utf8)).read(user: Array("nobody".utf8)) }

    func storeEntries() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: store.path) }

    func oathtool(_ args: [String]) throws -> String {
        let r = try runCommand(["oathtool"] + args)
        XCTAssertEqual(r.status, 0, r.stderr)
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func pamtester(_ answer: String) throws -> CommandResult {
        try runCommand(["pamtester", service, "nobody", "authenticate"], input: answer + "\n")
    }

    /// Neither the secret (in any case, grouped or not) nor any scratch code appears.
    func assertNothingSecret(_ r: CommandResult, secret: String, codes: [String], file: StaticString = #filePath, line: UInt = #line) {
        let text = (r.stdout + r.stderr).uppercased().replacingOccurrences(of: " ", with: "")
        XCTAssertFalse(text.contains(secret.uppercased()), "the output contains the secret", file: file, line: line)
        XCTAssertFalse(text.contains(String(secret.uppercased().prefix(10))), "the output contains part of the secret", file: file, line: line)
        for code in codes { XCTAssertFalse(text.contains(code), "the output contains a scratch code", file: file, line: line) }
    }

    // MARK: - Tests

    /// The whole migration: google-authenticator writes the file, totp-enroll imports it, the
    /// TOTP codes and each scratch code log in through pamtester with the suggested window.
    func testImportsAGoogleAuthenticatorFileAndLogsInThroughPamtester() throws {
        let file = try googleAuthenticatorFile("ga", ["--time-based", "--disallow-reuse", "--window-size=3",
                                                      "--rate-limit=3", "--rate-time=30", "--emergency-codes=5"])
        let original = try Data(contentsOf: file)
        let lines = String(decoding: original, as: UTF8.self).split(separator: "\n").map(String.init)
        let secret = lines[0]
        let scratch = lines.filter { $0.count == 8 && $0.allSatisfy { $0.isASCII && $0.isNumber } }
        XCTAssertEqual(scratch.count, 5, "google-authenticator wrote 5 scratch codes")

        awayFromStepBoundary(margin: 10)  // the import (PBKDF2 of 5 codes) stays inside one step
        let t0 = Int(time(nil))
        let r = try importFile(file.path)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(t0 / 30, Int(time(nil)) / 30, "the import crossed a step boundary")
        for needle in ["as factor \"google-authenticator\": TOTP, SHA-1, 6 digits, 30-second steps",
                       "WINDOW_SIZE 3         -> adjacent_intervals=1",
                       "DISALLOW_REUSE        -> always on in pam_totp",
                       "RATE_LIMIT 3 30       -> suggestion: max_failures=3 lockout=30",
                       "STEP_SIZE (not set)   -> the factor's period: 30 seconds",
                       "5 scratch codes       -> 5 recovery codes (each works once)",
                       "log in with the next one", "was not changed or deleted",
                       "remove the pam_google_authenticator.so line"] {
            XCTAssertTrue(r.stdout.contains(needle), "missing \(needle):\n\(r.stdout)")
        }
        assertNothingSecret(r, secret: secret, codes: scratch)
        XCTAssertEqual(try Data(contentsOf: file), original, "the file is left alone")

        let rec = try XCTUnwrap(try record())
        XCTAssertEqual(rec.factors.count, 1)
        let factor = try XCTUnwrap(rec.factors.first)
        XCTAssertEqual(factor.label, Array("google-authenticator".utf8))
        XCTAssertEqual(factor.otpKey?.parameters, .default)
        XCTAssertEqual(factor.otpKey?.secret, try Base32.decode(Array(secret.utf8)))
        XCTAssertEqual(rec.recovery?.hashes.count, 5)
        XCTAssertEqual(rec.recovery?.iterations, RecoverySet.defaultIterations)
        let state = try Store(path: Array(store.path.utf8)).readState(user: Array("nobody".utf8))
        XCTAssertEqual(state.lastUsedStep(of: factor), UInt64(t0 / 30), "the import's step counts as used")

        // The module with the window the tool suggested.
        let suggested = try XCTUnwrap(r.stdout.range(of: "adjacent_intervals=[0-9]+", options: .regularExpression))
        try "auth required \(moduleURL.path) store=\(store.path) \(r.stdout[suggested])\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        let used = try oathtool(["--totp", "-b", secret, "--now=@\(t0)"])
        let next = try oathtool(["--totp", "-b", secret, "--now=@\(t0 + 30)"])
        if used != next {  // failure 1 of 2
            XCTAssertNotEqual(try pamtester(used).status, 0, "the code of the import's step cannot log in")
        }
        let ok = try pamtester(next)
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr)
        for code in scratch {
            let s = try pamtester(code)
            // A module built before 8-digit recovery codes refuses them all: stop at the first
            // (each pamtester failure costs 2 s).
            guard s.status == 0 else { return XCTFail("a former scratch code does not log in (is \(moduleURL.path) current?): " + s.stderr) }
        }
        XCTAssertNotEqual(try pamtester(scratch[0]).status, 0, "each scratch code works once")  // failure 2 of 2
    }

    /// HOTP files (hand-written, and made by google-authenticator --counter-based) are refused
    /// with one clear line, before the store is touched.
    func testRefusesHOTPFilesAndLeavesNoRecord() throws {
        let made = try googleAuthenticatorFile("hotp", ["--counter-based", "--window-size=3", "--no-rate-limit", "--emergency-codes=2"])
        let madeText = try String(contentsOf: made, encoding: .utf8)
        let files = [try handWritten("hand", "\(fixedSecret)\n\" HOTP_COUNTER 1\n"), made]
        for file in files {
            let r = try importFile(file.path)
            XCTAssertNotEqual(r.status, 0)
            XCTAssertTrue(r.stderr.contains("HOTP-mode files cannot be imported: pam_totp supports TOTP only; re-enrol the user with totp-enroll"), r.stderr)
            XCTAssertEqual(r.stderr.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").count, 1, r.stderr)
            XCTAssertEqual(r.stdout, "")
            let lines = (file == made ? madeText : "\(fixedSecret)\n").split(separator: "\n").map(String.init)
            assertNothingSecret(r, secret: lines[0], codes: lines.filter { $0.count == 8 && $0.allSatisfy(\.isNumber) })
        }
        XCTAssertNil(try record())
        XCTAssertEqual(try storeEntries(), [], "no record, state or lock file")
    }

    /// The file is the user's and may be hostile: a symlink, a group-writable file, a file
    /// owned by someone else, a root-only file, a FIFO, a missing file are all refused.
    func testRefusesUnsafeFiles() throws {
        let text = "\(fixedSecret)\n\" TOTP_AUTH\n12345678\n"
        let real = try handWritten("real", text)
        let link = root.appendingPathComponent("link")
        XCTAssertEqual(symlink(real.path, link.path), 0)
        let fifo = root.appendingPathComponent("fifo")
        XCTAssertEqual(mkfifo(fifo.path, 0o600), 0)
        XCTAssertEqual(chown(fifo.path, nobody.uid, nobody.gid), 0)
        let daemon = try XCTUnwrap(getpwnam("daemon")).pointee.pw_uid
        let home = String(cString: try XCTUnwrap(getpwnam("nobody")).pointee.pw_dir)
        let cases: [(String?, String)] = [
            (link.path, "is a symlink"),
            (try handWritten("groupw", text, mode: 0o620).path, "writable by group or other"),
            (try handWritten("otherw", text, mode: 0o602).path, "writable by group or other"),
            (try handWritten("daemons", text, mode: 0o644, owner: daemon).path, "not by nobody"),
            (try handWritten("roots", text, mode: 0o600, owner: 0).path, "permission denied"),
            (fifo.path, "not a regular file"),
            (root.appendingPathComponent("missing").path, "does not exist"),
            (nil, home + "/.google_authenticator"),  // the default: nobody's home
        ]
        for (path, needle) in cases {
            let r = try importFile(path)
            XCTAssertNotEqual(r.status, 0, "\(path ?? "default") was accepted")
            XCTAssertTrue(r.stderr.contains(needle), "\(path ?? "default"): \(r.stderr)")
            assertNothingSecret(r, secret: fixedSecret, codes: ["12345678"])
        }
        XCTAssertNil(try record())
        XCTAssertEqual(try storeEntries(), [])
        XCTAssertEqual(try importFile(real.path).status, 0, "the same content in a safe file is accepted")
    }

    /// Strict parsing: each malformed file is refused with its line number, never its content.
    func testMalformedFilesAreRefusedNamingTheLine() throws {
        let s = fixedSecret
        let cases: [(String, String)] = [
            ("", "is empty"),
            ("\(s)\n\" TOTP_AUTH\n\" FOO_BAR 1\n", "line 3: unknown option FOO_BAR"),
            ("\(s)\n\" TOTP_AUTH\n87654321\n7654321\n", "line 4: neither an option"),
            ("\(s)\n\" TOTP_AUTH\n01234567\n", "line 3: neither an option"),
            ("\(s)\n\" WINDOW_SIZE 0\n\" TOTP_AUTH\n", "line 2: WINDOW_SIZE must be 1 to 100"),
            ("\(s)\n\" STEP_SIZE 61\n\" TOTP_AUTH\n", "line 2: STEP_SIZE must be 1 to 60"),
            ("\(s)\n\" TOTP_AUTH\n\" RATE_LIMIT 3\n", "line 3: RATE_LIMIT needs two values"),
            ("\(s)\n\" TOTP_AUTH\n\" TOTP_AUTH\n", "line 3: TOTP_AUTH appears twice"),
            ("\(s)\n\" DISALLOW_REUSE\n", "no TOTP_AUTH line"),
            ("\(s.lowercased())!\n\" TOTP_AUTH\n", "line 1: the secret is not valid Base32"),
            ("MZXW6YTBOI======\n\" TOTP_AUTH\n", "line 1: the secret is shorter than 80 bits"),
            ("\(s)\n\" TOTP_AUTH\n" + String(repeating: "87654321\n", count: 33), "line 35: more than 32 scratch codes"),
        ]
        for (text, needle) in cases {
            let r = try importFile(try handWritten("bad", text).path)
            XCTAssertNotEqual(r.status, 0, text)
            XCTAssertTrue(r.stderr.contains(needle), "wanted \(needle): \(r.stderr)")
            assertNothingSecret(r, secret: s, codes: ["87654321", "7654321", "01234567"])
            unlink(root.appendingPathComponent("bad").path)
        }
        XCTAssertNil(try record())
        XCTAssertEqual(try storeEntries(), [])
    }

    /// Every option google-authenticator writes, a user who already has a factor and recovery
    /// codes, codes already used a step ahead (DISALLOW_REUSE), and a label that is taken.
    func testMapsEverySettingKeepsOtherFactorsAndReplacesRecoveryCodes() throws {
        var rng = SplitMix64(seed: 7)
        let old = RecoverySet.generate(count: 3, iterations: 1_000, using: &rng).set
        try Store(path: Array(store.path.utf8)).write(user: Array("nobody".utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: [UInt8](repeating: 7, count: 20)),
        ], recovery: old))
        let step = UInt64(time(nil)) / 60
        let text = """
            \(fixedSecret)
            " STEP_SIZE 60
            " WINDOW_SIZE 17
            " RATE_LIMIT 5 120 1700000000 1700000001
            " DISALLOW_REUSE \(step - 1) \(step + 2)
            " TIME_SKEW -2
            " RESETTING_TIME_SKEW\u{20}
            " TOTP_AUTH

            23456789
            98765432

            """
        let file = try handWritten("ga", text)
        let r = try importFile(file.path, ["--name", "ga"])
        XCTAssertEqual(r.status, 0, r.stderr)
        for needle in ["as factor \"ga\": TOTP, SHA-1, 6 digits, 60-second steps",
                       "STEP_SIZE 60          -> the factor's period: 60 seconds",
                       "WINDOW_SIZE 17        -> adjacent_intervals=8",
                       "RATE_LIMIT 5 120      -> suggestion: max_failures=5 lockout=120",
                       "TIME_SKEW -2          -> not carried over", "adjacent_intervals=10",
                       "RESETTING_TIME_SKEW   -> dropped",
                       "2 scratch codes       -> 2 recovery codes (each works once)",
                       "3 existing recovery codes are replaced by the 2 imported scratch codes"] {
            XCTAssertTrue(r.stdout.contains(needle), "missing \(needle):\n\(r.stdout)")
        }
        assertNothingSecret(r, secret: fixedSecret, codes: ["23456789", "98765432"])

        let rec = try XCTUnwrap(try record())
        XCTAssertEqual(rec.factors.map { String(decoding: $0.label, as: UTF8.self) }, ["phone", "ga"])
        XCTAssertEqual(rec.factors.last?.otpKey?.parameters.period, 60)
        let recovery = try XCTUnwrap(rec.recovery)
        XCTAssertNotEqual(recovery.id, old.id)
        XCTAssertEqual(recovery.hashes.count, 2)
        XCTAssertEqual(recovery.match(Array("23456789".utf8), used: 0), 0)
        XCTAssertEqual(recovery.match(Array("98765432".utf8), used: 0), 1)
        let state = try Store(path: Array(store.path.utf8)).readState(user: Array("nobody".utf8))
        XCTAssertEqual(rec.factor(labelled: Array("ga".utf8)).flatMap { state.lastUsedStep(of: $0) }, step + 2,
                       "a code already used a step ahead stays used")

        // The label is taken now: refused, nothing changes.
        let again = try importFile(file.path, ["--name", "ga"])
        XCTAssertNotEqual(again.status, 0)
        XCTAssertTrue(again.stderr.contains("a factor named \"ga\" already exists for nobody"), again.stderr)
        XCTAssertEqual(try record(), rec)
    }
}
