import Foundation
import MFACore
import TestSupport
import XCTest

/// totp-enroll as a user runs it: verify-before-commit, the printed URI, the QR code (decoded
/// by zbarimg from the terminal rendering), and `code` against oathtool.
final class EnrollTests: XCTestCase {
    var root: URL!
    var store: URL!
    let secretB32 = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "--user and --store are root-only")
        root = try makeTemporaryDirectory("pam_totp_enroll")
        store = root.appendingPathComponent("store")
    }

    override func tearDown() { if let root { removeTemporaryDirectory(root) } }

    func enroll(_ extra: [String], input: String = "") throws -> CommandResult {
        try runCommand([enrollURL.path, "--store", store.path, "--user", "nobody"] + extra, input: input)
    }

    func oathCode(_ extra: [String] = []) throws -> String {
        try runCommand(["oathtool", "--totp", "-b", secretB32] + extra).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func record() throws -> UserRecord? { try Store(path: Array(store.path.utf8)).read(user: Array("nobody".utf8)) }

    func testCommitsOnlyAfterAValidCode() throws {
        awayFromStepBoundary()
        let wrong = try oathCode() == "123456" ? "654321" : "123456"
        let r1 = try enroll(["--secret", secretB32, "--code", wrong, "--qr", "none"])
        XCTAssertNotEqual(r1.status, 0)
        XCTAssertTrue(r1.stderr.contains("nothing was saved"), r1.stderr)
        XCTAssertNil(try record(), "a wrong code leaves no factor")
        // Three wrong answers at the prompt: still nothing.
        let r2 = try enroll(["--secret", secretB32, "--qr", "none"], input: "\(wrong)\n\(wrong)\n\(wrong)\n")
        XCTAssertNotEqual(r2.status, 0)
        XCTAssertNil(try record())
        XCTAssertFalse((r1.stdout + r1.stderr + r2.stdout + r2.stderr).contains(try oathCode()), "never prints the right code")
        // A good code on the second try commits.
        let r3 = try enroll(["--secret", secretB32, "--name", "phone", "--qr", "none"], input: "\(wrong)\n\(try oathCode())\n")
        XCTAssertEqual(r3.status, 0, r3.stderr)
        let rec = try XCTUnwrap(try record())
        XCTAssertEqual(rec.factors.map { String(decoding: $0.label, as: UTF8.self) }, ["phone"])
        XCTAssertEqual(rec.factors.first?.secret, try Base32.decode(Array(secretB32.utf8)))
        // The same name again is refused before anything is shown.
        let r4 = try enroll(["--secret", secretB32, "--name", "phone", "--code", try oathCode(), "--qr", "none"])
        XCTAssertNotEqual(r4.status, 0)
        XCTAssertTrue(r4.stderr.contains("already exists"), r4.stderr)
    }

    func testGeneratedSecretURIAndQRCodeDecodeToTheSameString() throws {
        // No --code and no input: the tool prints everything, then fails for lack of a code.
        let r = try enroll(["--issuer", "Example Co", "--name", "laptop"])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertNil(try record())
        let lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let uri = try XCTUnwrap(lines.first { $0.hasPrefix("URI:  ") }).dropFirst(6)
        XCTAssertTrue(uri.hasPrefix("otpauth://totp/Example%20Co:nobody?secret="), String(uri))
        let parsed = try OTPAuthURI(parsing: Array(uri.utf8))
        XCTAssertEqual(parsed.secret.count, 20, "160-bit secret for SHA-1")
        let key = try XCTUnwrap(lines.first { $0.hasPrefix("Key:  ") }).dropFirst(6)
        XCTAssertEqual(try Base32.decode(Array(key.utf8)), parsed.secret)

        // Rebuild the bitmap from the half-block rendering and let zbarimg decode it.
        let qrLines = lines.filter { $0.contains("\u{2588}") || $0.contains("\u{2580}") || $0.contains("\u{2584}") }
        XCTAssertGreaterThan(qrLines.count, 10)
        var rows: [[Bool]] = []  // true = dark
        for line in qrLines {
            var top: [Bool] = [], bottom: [Bool] = []
            for ch in line {
                switch ch {
                case "\u{2588}": top.append(false); bottom.append(false)
                case "\u{2580}": top.append(false); bottom.append(true)
                case "\u{2584}": top.append(true); bottom.append(false)
                default: top.append(true); bottom.append(true)
                }
            }
            rows.append(top); rows.append(bottom)
        }
        let scale = 4, width = rows[0].count * scale, height = rows.count * scale
        var pgm = "P2\n\(width) \(height)\n255\n"
        for row in rows { for _ in 0..<scale { pgm += row.flatMap { Array(repeating: $0 ? "0" : "255", count: scale) }.joined(separator: " ") + "\n" } }
        let image = root.appendingPathComponent("qr.pgm")
        try pgm.write(to: image, atomically: true, encoding: .ascii)
        let zbar = try runCommand(["zbarimg", "--raw", "-q", image.path])
        XCTAssertEqual(zbar.status, 0, zbar.stderr)
        XCTAssertEqual(zbar.stdout.trimmingCharacters(in: .whitespacesAndNewlines), String(uri))
    }

    func testCodeSubcommandMatchesOathtool() throws {
        for (args, oath) in [([String](), [String]()),
                             (["--algorithm", "sha512", "--digits", "8", "--period", "60"], ["--totp=SHA512", "--digits=8", "--time-step-size=60s"])] {
            for t in ["59", "1111111109", "20000000000"] {
                let ours = try runCommand([enrollURL.path, "code", "--secret", secretB32, "--time", t] + args)
                XCTAssertEqual(ours.status, 0, ours.stderr)
                let theirs = try runCommand(["oathtool", "-b", secretB32, "--now=@\(t)"] + (oath.isEmpty ? ["--totp"] : oath))
                XCTAssertEqual(ours.stdout, theirs.stdout)
            }
        }
        // The secret can come from stdin, keeping it out of the process list.
        let stdin = try runCommand([enrollURL.path, "code", "--secret", "-", "--time", "59"], input: secretB32 + "\n")
        XCTAssertEqual(stdin.stdout, try runCommand(["oathtool", "--totp", "-b", secretB32, "--now=@59"]).stdout)
    }

    func testBadInputGetsOneClearLine() throws {
        for (args, needle) in [(["code", "--secret", "not base32!"], "Base32"),
                               (["code", "--secret", "MZXW6"], "too short"),
                               (["code", "--secret", secretB32, "--digits", "9"], "digits"),
                               (["code", "--secret", secretB32, "--algorithm", "md5"], "algorithm")] {
            let r = try runCommand([enrollURL.path] + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains(needle), "\(args): \(r.stderr)")
        }
        let unprivileged = try runCommand(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                           enrollURL.path, "--user", "root", "--qr", "none"])
        XCTAssertNotEqual(unprivileged.status, 0)
        XCTAssertTrue(unprivileged.stderr.contains("root only"), unprivileged.stderr)
    }
}
