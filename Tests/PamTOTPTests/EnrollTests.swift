import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
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
        XCTAssertEqual(rec.factors.first?.otpKey?.secret, try Base32.decode(Array(secretB32.utf8)))
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
        XCTAssertTrue(uri.hasPrefix("otpauth://totp/Example%20Co:nobody%20%28laptop%29?secret="), "the label names the factor in the app: \(uri)")
        let parsed = try OTPAuthURI(parsing: Array(uri.utf8))
        XCTAssertEqual(parsed.secret.count, 20, "160-bit secret for SHA-1")
        let key = try XCTUnwrap(lines.first { $0.hasPrefix("Key:  ") }).dropFirst(6)
        XCTAssertEqual(try Base32.decode(Array(key.utf8)), parsed.secret)

        // What a terminal shows, on a light and on a dark theme: both must decode.
        for theme in [TerminalTheme.light, .dark] {
            let image = root.appendingPathComponent("qr-\(theme).pgm")
            try terminalImage(r.stdout, theme: theme).write(to: image, atomically: true, encoding: .ascii)
            let zbar = try runCommand(["zbarimg", "--raw", "-q", image.path])
            XCTAssertEqual(zbar.status, 0, "\(theme) terminal: \(zbar.stderr)")
            XCTAssertEqual(zbar.stdout.trimmingCharacters(in: .whitespacesAndNewlines), String(uri), "\(theme) terminal")
        }
    }

    func testQuietPrintsNoSecret() throws {
        awayFromStepBoundary()
        let r = try enroll(["--name", "phone", "--secret", "-", "--code", try oathCode(), "--quiet"], input: secretB32 + "\n")
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "Enrolled factor \"phone\" for nobody.\n")
        for needle in [secretB32, "otpauth", "Key:", "\u{1B}[", "\u{2580}", "ecovery"] {
            XCTAssertFalse((r.stdout + r.stderr).contains(needle), needle)
        }
        XCTAssertEqual(try record()?.factors.count, 1)
        // A generated key would never be shown; QR files hold the key.
        for (args, needle) in [(["--name", "x", "--code", "123456", "--quiet"], "--quiet needs --secret"),
                               (["--name", "x", "--secret", secretB32, "--quiet", "--qr-png", root.appendingPathComponent("q.png").path], "--qr-png")] {
            let bad = try enroll(args)
            XCTAssertNotEqual(bad.status, 0)
            XCTAssertTrue(bad.stderr.contains(needle), bad.stderr)
        }
    }

    func testRecoveryCodesAreOfferedAtTheEndOfAnInteractiveEnrolment() throws {
        awayFromStepBoundary()
        // Declined: nothing made, and the user is told how to make them later.
        let no = try enroll(["--name", "phone", "--secret", secretB32, "--qr", "none"], input: try oathCode() + "\nn\n")
        XCTAssertEqual(no.status, 0, no.stderr)
        XCTAssertTrue(no.stderr.contains("Make 10 now? [Y/n]"), no.stderr)
        XCTAssertTrue(no.stdout.contains("totp-enroll recovery-codes any time"), no.stdout)
        XCTAssertNil(try record()?.recovery)
        // Accepted (the default): ten codes shown once, their hashes stored.
        awayFromStepBoundary()
        let tablet = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        let code = try runCommand(["oathtool", "--totp", "-b", tablet]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let yes = try enroll(["--name", "tablet", "--secret", tablet, "--qr", "none"], input: code + "\n\n")
        XCTAssertEqual(yes.status, 0, yes.stderr)
        let codes = yes.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.range(of: #"^\d{4}-\d{4}-\d{4}$"#, options: .regularExpression) != nil }
        XCTAssertEqual(codes.count, 10, yes.stdout)
        XCTAssertEqual(try record()?.recovery?.hashes.count, 10)
        // A user who has codes is not asked again; --code (a script) is never asked.
        let third = try enroll(["--name", "laptop", "--secret", "MFRGGZDFMZTWQ2LKNNWG23TPOBYXE43U", "--qr", "none"],
                               input: (try runCommand(["oathtool", "--totp", "-b", "MFRGGZDFMZTWQ2LKNNWG23TPOBYXE43U"]).stdout))
        XCTAssertEqual(third.status, 0, third.stderr)
        XCTAssertFalse(third.stderr.contains("Make 10 now"), third.stderr)
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

/// A terminal's default colours.
enum TerminalTheme { case light, dark }

/// The picture a terminal draws for `text` (half blocks and SGR colour codes 0, 30-37, 40-47,
/// 39, 49), as a binary PGM, 4 pixels per half cell: cells without an explicit colour take the
/// theme's (light: black on white; dark: white on black). Only the lines holding half blocks.
func terminalImage(_ text: String, theme: TerminalTheme) -> String {
    let defaultFG = theme == .light ? 0 : 255, defaultBG = theme == .light ? 255 : 0
    func shade(_ code: Int) -> Int { code == 0 ? 0 : (code == 7 ? 255 : 128) }  // black, white, other
    var rows: [[Int]] = []
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        guard line.contains("\u{2588}") || line.contains("\u{2580}") || line.contains("\u{2584}") || line.contains("\u{1B}[30;47m") else { continue }
        var fg = defaultFG, bg = defaultBG
        var top: [Int] = [], bottom: [Int] = []
        var scalars = Array(line.unicodeScalars)[...]
        while let c = scalars.first {
            scalars = scalars.dropFirst()
            if c == "\u{1B}", scalars.first == "[" {
                var params = ""
                scalars = scalars.dropFirst()
                while let p = scalars.first, p != "m" { params.unicodeScalars.append(p); scalars = scalars.dropFirst() }
                scalars = scalars.dropFirst()
                for p in params.split(separator: ";").compactMap({ Int($0) }) + (params.isEmpty ? [0] : []) {
                    switch p {
                    case 0: fg = defaultFG; bg = defaultBG
                    case 30...37: fg = shade(p - 30)
                    case 39: fg = defaultFG
                    case 40...47: bg = shade(p - 40)
                    case 49: bg = defaultBG
                    default: break
                    }
                }
                continue
            }
            switch c {
            case "\u{2588}": top.append(fg); bottom.append(fg)
            case "\u{2580}": top.append(fg); bottom.append(bg)
            case "\u{2584}": top.append(bg); bottom.append(fg)
            default: top.append(bg); bottom.append(bg)
            }
        }
        rows.append(top)
        rows.append(bottom)
    }
    let scale = 4, width = (rows.map(\.count).max() ?? 0) * scale, height = rows.count * scale
    var pgm = "P2\n\(width) \(height)\n255\n"
    for row in rows {
        let padded = row + Array(repeating: defaultBG, count: width / scale - row.count)
        for _ in 0..<scale { pgm += padded.flatMap { Array(repeating: String($0), count: scale) }.joined(separator: " ") + "\n" }
    }
    return pgm
}
