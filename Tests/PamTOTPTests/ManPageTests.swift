import Foundation
import TestSupport
import XCTest

/// The manual pages in man/: each renders without a single groff warning, pam_totp(8)
/// documents every option of README.md's "Module options" table (with its default and range)
/// and every row of its "Error mapping" table, and totp-enroll(1) documents every subcommand
/// and option of docs/ARCHITECTURE.md, section 5. groff (Debian: groff-base) is needed; nothing else.
final class ManPageTests: XCTestCase {
    /// docs/ARCHITECTURE.md, section 5: the subcommands of totp-enroll. Fixed by design.
    static let subcommands = [
        "enroll", "code", "list", "status", "remove", "recovery-codes", "import-google-authenticator", "unlock", "audit", "policy",
    ]
    /// docs/ARCHITECTURE.md, section 5: the options of totp-enroll's subcommands (and --store, root only).
    static let enrollOptions = [
        "--user", "--name", "--issuer", "--algorithm", "--digits", "--period", "--secret", "--code",
        "--qr", "--qr-svg", "--qr-png", "--time", "--store", "--all", "--json", "--quiet",
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

    // MARK: - pam_totp(8) against README.md

    func testModulePageDocumentsEveryReadmeOption() throws {
        let rows = try readmeTable("## Module options")
        let options = rows.compactMap { row -> (name: String, defaultValue: String, range: String)? in
            guard row.count >= 3, let first = backticked(row[0]).first else { return nil }
            let name = String(first.prefix { $0 != "=" })
            return (name, plain(row[1]), plain(row[2]))
        }
        XCTAssertGreaterThanOrEqual(options.count, 8, "README's option table did not parse: \(rows)")
        XCTAssertTrue(options.contains { $0.name == "adjacent_intervals" }, "README's option table did not parse: \(rows)")

        let text = try render(modulePage)
        let synopsis = try section("SYNOPSIS", of: text).joined(separator: " ")
        let entries = try definitionEntries(try section("OPTIONS", of: text))
        for option in options {
            XCTAssertTrue(words(synopsis).contains { $0 == option.name || $0.hasPrefix(option.name + "=") },
                          "SYNOPSIS of pam_totp.8 lacks \(option.name)")
            guard let entry = entries.first(where: {
                $0.tag == option.name || $0.tag.hasPrefix(option.name + "=") || $0.tag.hasPrefix(option.name + " ")
            }) else {
                XCTFail("OPTIONS of pam_totp.8 has no entry for \(option.name)")
                continue
            }
            // "Default 5; range 0-10." (quotes around a default such as the prompt left out).
            let body = entry.body.replacingOccurrences(of: "\"", with: "")
            XCTAssertTrue(containsPhrase(body, "Default " + option.defaultValue),
                          "pam_totp.8, \(option.name): default \"\(option.defaultValue)\" (README) is not in: \(entry.body)")
            XCTAssertTrue(containsPhrase(body, option.range),
                          "pam_totp.8, \(option.name): range \"\(option.range)\" (README) is not in: \(entry.body)")
        }
    }

    func testModulePageHasEveryRowOfTheReadmeErrorTable() throws {
        let rows = try readmeTable("## Error mapping").filter { $0.count >= 3 }
        XCTAssertGreaterThanOrEqual(rows.count, 5, "README's error table did not parse")
        // At a line length of 2000 every table row is one line: "outcome  PAM_CODE  yes|no".
        let lines = try section("RETURN VALUES", of: try render(modulePage)).map(collapsed)
        for row in rows {
            let expected = collapsed(plain(row[0]) + " " + plain(row[1]) + " " + plain(row[2]))
            XCTAssertTrue(lines.contains(expected), "RETURN VALUES of pam_totp.8 lacks the README row: \(expected)")
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

    /// The cells of each row of the first Markdown table under `heading` in README.md (header
    /// and separator rows left out).
    func readmeTable(_ heading: String) throws -> [[String]] {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(of: heading) else {
            XCTFail("README.md has no \"\(heading)\"")
            return []
        }
        var rows: [[String]] = []
        var inTable = false
        for line in lines[(start + 1)...] {
            if line.hasPrefix("## ") { break }
            if line.hasPrefix("|") {
                inTable = true
                var cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
                cells = Array(cells.dropFirst().dropLast())
                rows.append(cells)
            } else if inTable {
                break
            }
        }
        // Header row, then the |---| separator.
        return rows.count >= 2 ? Array(rows.dropFirst(2)) : []
    }

    /// The contents of the `backticked` parts of a Markdown cell.
    func backticked(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated()
            .filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// A Markdown cell as groff -Tascii writes it: no backticks or emphasis, en dashes as "-",
    /// surrounding spaces gone.
    func plain(_ cell: String) -> String {
        collapsed(cell.replacingOccurrences(of: "`", with: "")
            .replacingOccurrences(of: "**", with: "")
            .replacingOccurrences(of: "\u{2013}", with: "-"))
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
    /// the limits in Sources/pam-totpd/Server.swift, and the sections an admin looks for.
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
        let server = try String(contentsOf: packageRoot.appendingPathComponent("Sources/pam-totpd/Server.swift"), encoding: .utf8)
        let limits = try section("LIMITS", of: text).joined(separator: " ")
        for (field, phrase) in [("requestTimeout: TimeAmount = .seconds(5)", "5 s after it was accepted"),
                                ("maxConnections = 4096", "4096 in all"), ("maxConnectionsPerUser = 64", "64 open connections per uid"),
                                ("maxQueued = 256", "more than 256 requests waiting"), ("workers = 4", "4 worker threads"),
                                ("maxQueuedPerUser = 8", "more than 8 of one uid other than root")] {
            XCTAssertTrue(server.contains(field), "Server.swift no longer has \(field): update pam-totpd.8")
            XCTAssertTrue(collapsed(limits).contains(phrase), "pam-totpd.8 LIMITS lacks \"\(phrase)\"")
        }
    }
}
