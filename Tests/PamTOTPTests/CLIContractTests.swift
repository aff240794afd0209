import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The CLI contract of docs/ARCHITECTURE.md, section 5: every subcommand and option is documented in --help, and
/// an enrolment interrupted between showing the secret and the code commits nothing.
final class CLIContractTests: XCTestCase {
    /// Subcommand → the options its --help must list (docs/ARCHITECTURE.md, section 5).
    let contract: [(String, [String])] = [
        ("enroll", ["--user", "--name", "--issuer", "--algorithm", "--digits", "--period", "--secret", "--code",
                    "--qr", "--qr-svg", "--qr-png", "--quiet"]),
        ("code", ["--secret", "--time", "--algorithm", "--digits", "--period"]),
        ("list", ["--user"]),
        ("status", ["--all", "--user", "--json"]),
        ("remove", ["<label>", "--user", "--code"]),
        ("recovery-codes", ["--user"]),
        ("import-google-authenticator", ["<FILE>", "--user"]),
        ("import-pskc", ["<FILE>", "--assign", "--assign-file", "--key-file", "--passphrase-file", "--name", "--store", "--config"]),
        ("unlock", ["--user"]),
        ("policy", ["--user", "--service", "--arguments", "--config", "--pamdir", "--json"]),
        ("check", ["--json", "--pamdir", "--config", "--sshd-config", "--sshd"]),
    ]

    /// Both programs say their release (NEWS's first entry), which the Debian package's version
    /// starts with too (the Makefile reads the same line).
    func testBothProgramsSayTheRelease() throws {
        let news = try String(contentsOf: packageRoot.appendingPathComponent("NEWS"), encoding: .utf8)
        let release = try XCTUnwrap(news.split(separator: "\n").first { $0.first?.isNumber == true }?.split(separator: " ").first)
        for (program, name) in [(enrollURL.path, "totp-enroll"), (daemonURL.path, "pam-totpd")] {
            let r = try runCommand([program, "--version"])
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stdout, "\(name) \(release)\n")
        }
        let make = try runCommand(["make", "-s", "--no-print-directory", "-C", packageRoot.path, "version"])
        XCTAssertEqual(make.stdout, "\(release)\n", "the Makefile's release (the package's version)")
    }

    func testHelpIsCompleteForEverySubcommand() throws {
        let top = try runCommand([enrollURL.path, "--help"])
        XCTAssertEqual(top.status, 0, top.stderr)
        for (sub, options) in contract {
            XCTAssertTrue(top.stdout.contains(sub), "top-level help lists \(sub)")
            for form in [[sub, "--help"], ["help", sub]] {
                let r = try runCommand([enrollURL.path] + form)
                XCTAssertEqual(r.status, 0, "\(form): \(r.stderr)")
                XCTAssertTrue(r.stdout.contains("USAGE: totp-enroll \(sub)"), "\(form): \(r.stdout)")
                for option in options {
                    XCTAssertTrue(r.stdout.contains(option), "\(sub) --help documents \(option)")
                }
            }
        }
    }

    /// `totp-enroll --config F list` failed with "Unexpected argument 'list'" (a new admin's
    /// trial): the options every subcommand shares may come before its name.
    func testSharedOptionsMayComeBeforeTheSubcommand() throws {
        try XCTSkipUnless(isRoot, "--user and --store are root's")
        let dir = try makeTemporaryDirectory("pam_totp_cli_order")
        defer { removeTemporaryDirectory(dir) }
        XCTAssertEqual(chmod(dir.path, 0o700), 0)
        try Store(path: Array(dir.path.utf8)).write(user: Array("nobody".utf8), record: UserRecord(uid: 65534, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000, secret: Array("12345678901234567890".utf8))]))
        let after = try runCommand([enrollURL.path, "list", "--user", "nobody", "--store", dir.path])
        XCTAssertEqual(after.status, 0, after.stderr)
        for before in [["--store", dir.path, "--user", "nobody", "list"], ["--store=\(dir.path)", "list", "--user", "nobody"],
                       ["--user", "nobody", "--store", dir.path, "list"]] {
            let r = try runCommand([enrollURL.path] + before)
            XCTAssertEqual(r.status, 0, "\(before): \(r.stderr)")
            XCTAssertEqual(r.stdout, after.stdout, "\(before)")
        }
        // A subcommand's own option before its name is still an error, as typed.
        XCTAssertNotEqual(try runCommand([enrollURL.path, "--all", "status"]).status, 0)
    }

    /// `totp-enroll policy`: the effective policy of a user on a service and where each
    /// setting came from, with the stack read from a pam.d directory (includes followed).
    func testPolicyShowsEachSettingAndWhereItCameFrom() throws {
        try XCTSkipUnless(isRoot, "policy is root's")
        let dir = try makeTemporaryDirectory("pam_totp_cli_policy")
        defer { removeTemporaryDirectory(dir) }
        let config = dir.appendingPathComponent("pam_totp.conf").path
        try "nullok\nlockout = 600\n[group nogroup]\nnullok = no\nadjacent_intervals = 2\n".write(toFile: config, atomically: true, encoding: .utf8)
        let pamdir = dir.path
        let service = "pamtotp_policy"
        try "auth [success=1 default=ignore] pam_unix.so\nauth required pam_totp.so nullok adjacent_intervals=3 max_failures=5\n"
            .write(toFile: "\(pamdir)/\(service)-common", atomically: true, encoding: .utf8)
        try "# a stack\n@include \(service)-common\naccount required pam_unix.so\n".write(toFile: "\(pamdir)/" + service, atomically: true, encoding: .utf8)
        let r = try runCommand([enrollURL.path, "policy", "--user", "nobody", "--service", service, "--config", config, "--pamdir", pamdir])
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = r.stdout.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
        XCTAssertTrue(lines.contains("pam_totp line 1 of 1: \(pamdir)/\(service)-common:2: auth required pam_totp.so nullok adjacent_intervals=3 max_failures=5"), r.stdout)
        XCTAssertTrue(lines.contains("nullok no [group nogroup] at \(config):3 (the pam.d line's is not stricter)"), r.stdout)
        XCTAssertTrue(lines.contains("adjacent_intervals 2 [group nogroup] at \(config):3 (the pam.d line's is not stricter)"), r.stdout)
        XCTAssertTrue(lines.contains("max_failures 5 the pam.d line"), r.stdout)
        XCTAssertTrue(lines.contains("lockout 600 s \(config):2"), r.stdout)
        XCTAssertTrue(lines.contains("exempt no the built-in default"), r.stdout)
        // daemon is not in nogroup: the file's and the line's nullok agree.
        let d = try runCommand([enrollURL.path, "policy", "--user", "daemon", "--service", service, "--config", config,
                                "--arguments", "adjacent_intervals=1"])
        XCTAssertTrue(d.stdout.contains("adjacent_intervals  1       the pam.d line"), d.stdout)
        XCTAssertTrue(d.stdout.contains("nullok              yes     \(config):1"), d.stdout)
        XCTAssertNotEqual(try runCommand(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", enrollURL.path,
                                          "policy", "--user", "nobody", "--service", service]).status, 0, "root only")
    }

    func testUnknownSubcommandOrOptionIsOneClearError() throws {
        for args in [["frobnicate"], ["list", "--bogus"], ["code"], ["remove"]] {
            let r = try runCommand([enrollURL.path] + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.hasPrefix("Error: "), "\(args): \(r.stderr)")
        }
    }

    /// `--secret -` reads one line of standard input as readLine did: "\n" or "\r\n" ends it, a
    /// last line needs no newline, and a lone "\r" at the end of input is part of the value
    /// (not valid Base32), not a line ending. The second line stays for the next reader.
    func testSecretFromStandardInputIsOneLine() throws {
        let secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        for input in [secret + "\n", secret + "\r\n", secret, secret + "\nJUNK\n"] {
            let r = try runCommand([enrollURL.path, "code", "--secret", "-", "--time", "59", "--digits", "8"], input: input)
            XCTAssertEqual(r.status, 0, "\(input.debugDescription): \(r.stderr)")
            XCTAssertEqual(r.stdout, "94287082\n", input.debugDescription)
        }
        let cr = try runCommand([enrollURL.path, "code", "--secret", "-", "--time", "59"], input: secret + "\r")
        XCTAssertEqual(cr.status, 1, cr.stdout)
        XCTAssertTrue(cr.stderr.hasPrefix("Error: the secret is not valid Base32"), cr.stderr)
    }

    /// SIGKILL while the tool waits for the code: the pending secret lived only in that
    /// process, so no factor (and no record) exists afterwards.
    func testKilledBetweenShowingTheSecretAndTheCodeCommitsNothing() throws {
        try XCTSkipUnless(isRoot, "--user and --store are root-only")
        let root = try makeTemporaryDirectory("pam_totp_pending")
        defer { removeTemporaryDirectory(root) }
        let store = root.appendingPathComponent("store").path
        let out = root.appendingPathComponent("out").path
        // The tool reads the code from a FIFO that nobody ever writes, so it waits forever.
        let fifo = root.appendingPathComponent("in").path
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "exec 3<>\(fifo); exec \(enrollURL.path) --store \(store) --user nobody --qr none <\(fifo) >\(out) 2>&1"]
        try p.run()
        var shown = false
        for _ in 0..<100 where !shown {
            usleep(100_000)
            shown = (try? String(contentsOfFile: out, encoding: .utf8))?.contains("otpauth://") ?? false
        }
        XCTAssertTrue(shown, "the secret was shown and the tool is waiting for the code")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        XCTAssertNil(try Store(path: Array(store.utf8)).read(user: Array("nobody".utf8)), "no factor after the kill")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: store)) ?? []
        XCTAssertFalse(left.contains("nobody"), "\(left)")
    }
}
