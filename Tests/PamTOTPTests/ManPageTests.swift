import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The manual pages in man/: each renders without a single groff warning, pam_totp(8)
/// documents every option the module parses (with the code's default and range) and every PAM
/// code it returns, and totp-enroll(1) documents every subcommand
/// and option of docs/ARCHITECTURE.md, section 5. groff (Debian: groff-base) is needed; nothing else.
final class ManPageTests: XCTestCase {
    /// docs/ARCHITECTURE.md, section 5: the subcommands of totp-enroll. Fixed by design.
    static let subcommands = [
        "enroll", "add-phone", "add-email", "code", "list", "status", "remove", "recovery-codes", "import-google-authenticator", "import-pskc", "unlock", "audit",
        "policy", "check",
    ]
    /// docs/ARCHITECTURE.md, section 5: the options of totp-enroll's subcommands (and --store, root only).
    static let enrollOptions = [
        "--user", "--name", "--issuer", "--algorithm", "--digits", "--period", "--secret", "--code",
        "--qr", "--qr-svg", "--qr-png", "--time", "--store", "--all", "--json", "--quiet",
        "--assign", "--assign-file", "--key-file", "--passphrase-file", "--show-destinations",
        "--pamdir", "--sshd-config", "--sshd",
    ]

    let modulePage = packageRoot.appendingPathComponent("man/pam_totp.8")
    let enrollPage = packageRoot.appendingPathComponent("man/totp-enroll.1")
    let daemonPage = packageRoot.appendingPathComponent("man/pam-totpd.8")

    override func setUpWithError() throws {
        let probe = try runCommand(["groff", "--version"])
        guard probe.status == 0 else {
            XCTFail("groff not found: install the Debian package groff-base")
            throw XCTSkip("no groff")
        }
    }

    // MARK: - Rendering

    func testPagesRenderWithoutWarnings() throws {
        for page in [modulePage, enrollPage, daemonPage] {
            // -t: tbl (pam_totp.8 has a table); -ww: every warning; -z: format, print nothing.
            for device in ["utf8", "ascii"] {
                let r = try runCommand(["groff", "-t", "-man", "-ww", "-z", "-T\(device)", page.path])
                XCTAssertEqual(r.status, 0, "\(page.lastPathComponent) -T\(device): \(r.stderr)")
                XCTAssertEqual(r.stderr, "", "\(page.lastPathComponent) -T\(device) warns")
            }
        }
    }

    /// man(1) runs tbl only when the first line asks for it; `groff -t` above would hide that.
    func testPagesWithTablesAskManForTbl() throws {
        for page in [modulePage, enrollPage] {
            let source = try String(contentsOf: page, encoding: .utf8)
            if source.contains("\n.TS") {
                XCTAssertTrue(source.hasPrefix("'\\\" t"), "\(page.lastPathComponent) uses tbl: its first line must be '\\\" t")
            }
        }
    }

    func testTitleLinesMatchTheFileNames() throws {
        let module = try String(contentsOf: modulePage, encoding: .utf8)
        let enroll = try String(contentsOf: enrollPage, encoding: .utf8)
        XCTAssertTrue(module.contains("\n.TH PAM_TOTP 8 "), "pam_totp.8: .TH PAM_TOTP 8")
        XCTAssertTrue(enroll.contains("\n.TH TOTP\\-ENROLL 1 "), "totp-enroll.1: .TH TOTP\\-ENROLL 1")
        XCTAssertEqual(try section("NAME", of: try render(modulePage)).first.map(collapsed),
                       "pam_totp - PAM module for time-based one-time codes (TOTP) as a second factor")
        XCTAssertTrue(try section("NAME", of: try render(enrollPage)).first.map(collapsed)?.hasPrefix("totp-enroll - ") == true)
    }

    // MARK: - pam_totp(8) against the code

    /// Every setting the module's parser takes (ModuleOptions.swift, `equals(name, "…")`, and
    /// `config=`) is in SYNOPSIS and has an OPTIONS entry that gives its default; the numeric
    /// ones give the default and range the code has. The man page is the one reference: no
    /// other copy of the table is kept in step.
    func testModulePageDocumentsEveryOptionTheModuleParses() throws {
        let source = try String(contentsOf: packageRoot.appendingPathComponent("Sources/MFAPolicy/ModuleOptions.swift"), encoding: .utf8)
        var names = ["config"]
        var rest = source[...]
        while let r = rest.range(of: "equals(name, \"") {
            let tail = rest[r.upperBound...]
            guard let end = tail.firstIndex(of: "\"") else { break }
            names.append(String(tail[..<end]))
            rest = tail[end...]
        }
        XCTAssertGreaterThanOrEqual(names.count, 14, "the option names did not parse from ModuleOptions.swift: \(names)")
        XCTAssertTrue(names.contains("adjacent_intervals") && names.contains("postgresql_file"), "\(names)")

        let text = try render(modulePage)
        let synopsis = try section("SYNOPSIS", of: text).joined(separator: " ")
        let entries = try definitionEntries(try section("OPTIONS", of: text))
        func entry(_ name: String) -> (tag: String, body: String)? {
            entries.first { $0.tag == name || $0.tag.hasPrefix(name + "=") || $0.tag.hasPrefix(name + " ") }
        }
        for name in names {
            XCTAssertTrue(words(synopsis).contains { $0 == name || $0.hasPrefix(name + "=") }, "SYNOPSIS of pam_totp.8 lacks \(name)")
            guard let e = entry(name) else {
                XCTFail("OPTIONS of pam_totp.8 has no entry for \(name)")
                continue
            }
            XCTAssertTrue(e.body.contains("Default"), "pam_totp.8, \(name): no default in: \(e.body)")
        }
        let defaults = ModuleOptions()
        let numeric: [(String, String, String)] = [
            ("adjacent_intervals", "\(defaults.adjacentIntervals)", "0\u{2013}\(TOTPVerifier.maxAdjacentIntervals)"),
            ("max_failures", "\(defaults.maxFailures)",
             "\(ModuleOptions.maxFailuresRange.lowerBound)\u{2013}\(ModuleOptions.maxFailuresRange.upperBound)"),
            ("lockout", "\(defaults.lockoutSeconds)", "\(ModuleOptions.lockoutRange.lowerBound)\u{2013}\(ModuleOptions.lockoutRange.upperBound)"),
        ]
        for (name, value, range) in numeric {
            let body = try XCTUnwrap(entry(name), name).body
            XCTAssertTrue(containsPhrase(body, "Default " + value), "pam_totp.8, \(name): default \(value) (the code's) is not in: \(body)")
            XCTAssertTrue(containsPhrase(body, range) || containsPhrase(body, range.replacingOccurrences(of: "\u{2013}", with: "-")),
                          "pam_totp.8, \(name): range \(range) (the code's) is not in: \(body)")
        }
    }

    /// Every PAM code the module returns (Sources/PamTOTP: ErrorMapping.swift's table and the
    /// early returns of the login flow) is named in RETURN VALUES.
    func testModulePageNamesEveryCodeTheModuleReturns() throws {
        let dir = packageRoot.appendingPathComponent("Sources/PamTOTP")
        var codes = Set<String>()
        for file in try FileManager.default.contentsOfDirectory(atPath: dir.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: dir.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") where line.contains("return PAM_") && !line.contains("// never") {
                var rest = line[...]
                while let r = rest.range(of: "PAM_") {
                    let token = rest[r.lowerBound...].prefix { $0.isUppercase || $0 == "_" }
                    codes.insert(String(token))
                    rest = rest[r.upperBound...]
                }
            }
        }
        XCTAssertTrue(codes.isSuperset(of: ["PAM_SUCCESS", "PAM_AUTH_ERR", "PAM_IGNORE", "PAM_SERVICE_ERR"]), "\(codes)")
        let returnValues = try section("RETURN VALUES", of: try render(modulePage)).joined(separator: " ")
        for code in codes.sorted() {
            XCTAssertTrue(returnValues.contains(code), "RETURN VALUES of pam_totp.8 does not name \(code), which the module returns")
        }
    }

    func testModulePageHasTheRequiredSections() throws {
        let text = try render(modulePage)
        for name in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "CONFIGURATION FILE", "THE STORE AND STATE FILES",
                     "RETURN VALUES", "FILES", "EXAMPLES", "SECURITY NOTES", "SEE ALSO"] {
            XCTAssertNoThrow(try section(name, of: text), "pam_totp.8 lacks \(name)")
        }
        let seeAlso = try section("SEE ALSO", of: text).joined(separator: " ")
        for ref in ["totp-enroll(1)", "pam(8)", "pam.conf(5)", "pam-auth-update(8)", "sshd_config(5)"] {
            XCTAssertTrue(seeAlso.contains(ref), "SEE ALSO of pam_totp.8 lacks \(ref)")
        }
    }

    // MARK: - totp-enroll(1) against docs/ARCHITECTURE.md, section 5

    func testEnrollPageDocumentsEverySubcommand() throws {
        let text = try render(enrollPage)
        let synopsis = try section("SYNOPSIS", of: text).joined(separator: " ")
        // Subsection headings of SUBCOMMANDS are indented by 3: "   remove LABEL".
        let headings = try section("SUBCOMMANDS", of: text)
            .filter { $0.hasPrefix("   ") && !$0.hasPrefix("    ") }
            .compactMap { words($0).first }
        for name in Self.subcommands {
            XCTAssertTrue(synopsis.contains("totp-enroll " + name) || synopsis.contains("totp-enroll [" + name + "]"),
                          "SYNOPSIS of totp-enroll.1 lacks \(name)")
            XCTAssertTrue(headings.contains(name), "SUBCOMMANDS of totp-enroll.1 has no subsection \(name): \(headings)")
        }
        let all = Set(words(text.joined(separator: " ")))
        for option in Self.enrollOptions {
            XCTAssertTrue(all.contains(option), "totp-enroll.1 does not mention \(option)")
        }
        for name in ["NAME", "SYNOPSIS", "DESCRIPTION", "SUBCOMMANDS", "EXIT STATUS", "FILES", "EXAMPLES", "SEE ALSO"] {
            XCTAssertNoThrow(try section(name, of: text), "totp-enroll.1 lacks \(name)")
        }
    }

    // MARK: - Helpers

    /// The page as plain ASCII text, without hyphenation, 2000 columns wide (so a paragraph, a
    /// tag or a table row is one line).
    func render(_ page: URL) throws -> [String] {
        let r = try runCommand(["groff", "-t", "-man", "-Tascii", "-rHY=0", "-rLL=2000n",
                                "-P-c", "-P-b", "-P-u", page.path])
        XCTAssertEqual(r.status, 0, r.stderr)
        return r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map {
            var line = String($0)
            while line.last == " " { line.removeLast() }
            return line
        }
    }

    struct MissingSection: Error, CustomStringConvertible { var description: String }

    /// The lines under the heading `name` (a line at column 0), up to the next heading.
    func section(_ name: String, of lines: [String]) throws -> [String] {
        guard let start = lines.firstIndex(of: name) else { throw MissingSection(description: "no section \(name)") }
        var out: [String] = []
        for line in lines[(start + 1)...] {
            if let c = line.first, c != " " { break }
            if !line.isEmpty { out.append(line) }
        }
        return out
    }

    /// `.TP` entries of a section: a tag at indentation 7, its text below at 14 (or, for a
    /// short tag, on the same line).
    func definitionEntries(_ lines: [String]) throws -> [(tag: String, body: String)] {
        var entries: [(tag: String, body: String)] = []
        for line in lines {
            let indent = line.prefix { $0 == " " }.count
            if indent == 7 {
                entries.append((collapsed(line), ""))
            } else if indent > 7, !entries.isEmpty {
                entries[entries.count - 1].body += " " + collapsed(line)
            }
        }
        return entries.map { ($0.tag, collapsed($0.body)) }
    }

    /// `phrase` occurs in `text` and is not part of a longer word or number ("1-10" is not in
    /// "1-100").
    func containsPhrase(_ text: String, _ phrase: String) -> Bool {
        var searchRange = text.startIndex..<text.endIndex
        while let found = text.range(of: phrase, range: searchRange) {
            let before = found.lowerBound == text.startIndex ? nil : text[text.index(before: found.lowerBound)]
            let after = found.upperBound == text.endIndex ? nil : text[found.upperBound]
            let joins = { (c: Character?) in c.map { $0.isLetter || $0.isNumber } ?? false }
            if !joins(before) && !joins(after) { return true }
            searchRange = text.index(after: found.lowerBound)..<text.endIndex
        }
        return false
    }

    func collapsed(_ text: String) -> String {
        text.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// Words made of letters, digits, "-", "_", "=" and "." (so "--qr" and "--qr-svg" differ).
    func words(_ text: String) -> [String] {
        text.split(whereSeparator: { !($0.isLetter || $0.isNumber || "-_=.".contains($0)) })
            .map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: ".")) }
    }
}

extension ManPageTests {
    /// pam-totpd(8) names what the daemon really does: its options (as --help prints them),
    /// the limits in Sources/MFADaemon/Limits.swift, and the sections an admin looks for.
    func testDaemonPageMatchesTheDaemon() throws {
        let text = try render(daemonPage)
        for name in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "LIMITS", "SYSTEMD", "RUNNING WITHOUT SYSTEMD", "LOGGING", "FILES", "SEE ALSO"] {
            XCTAssertNoThrow(try section(name, of: text), "pam-totpd.8 lacks \(name)")
        }
        let help = try runCommand([daemonURL.path, "--help"])
        XCTAssertEqual(help.status, 0)
        for option in ["--config", "--socket"] {
            XCTAssertTrue(help.stdout.contains(option), "pam-totpd --help lacks \(option)")
            XCTAssertTrue(try section("OPTIONS", of: text).joined(separator: " ").contains(option), "pam-totpd.8 lacks \(option)")
        }
        let server = try String(contentsOf: packageRoot.appendingPathComponent("Sources/MFADaemon/Limits.swift"), encoding: .utf8)
        let limits = try section("LIMITS", of: text).joined(separator: " ")
        for (field, phrase) in [("requestTimeoutMilliseconds: Int64 = 5_000", "5 s after it was accepted"),
                                ("maxConnections = 4096", "4096 in all"), ("maxConnectionsPerUser = 64", "64 open connections per uid"),
                                ("maxQueued = 256", "more than 256 requests waiting"), ("workers = 4", "4 worker threads"),
                                ("maxQueuedPerUser = 8", "more than 8 of one uid other than root")] {
            XCTAssertTrue(server.contains(field), "Limits.swift no longer has \(field): update pam-totpd.8")
            XCTAssertTrue(collapsed(limits).contains(phrase), "pam-totpd.8 LIMITS lacks \"\(phrase)\"")
        }
    }
}
