import XCTest
import TestSupport
@testable import MFACrypto
@testable import MFAFileStore
@testable import MFAPolicy
@testable import MFASystem

/// `[group NAME]` and `[service NAME]` sections of pam_totp.conf (docs/ARCHITECTURE.md, section 5.4):
/// the pure policy computation, with an injected membership look-up.
final class SectionTests: XCTestCase {
    var root: URL!

    override func setUpWithError() throws { root = try makeTemporaryDirectory() }
    override func tearDown() { removeTemporaryDirectory(root) }

    func config(_ text: String) throws -> [UInt8] {
        let url = root.appendingPathComponent("pam_totp.conf")
        try text.write(to: url, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(url.path, 0o644), 0)
        return Array(("config=" + url.path).utf8)
    }

    /// The options for a login to `service` by a member of `groups`; `asked` collects every
    /// group the policy asked about.
    func options(_ text: String, service: String = "sshd", groups: Set<String> = [], args: [String] = [],
                 asked: inout [String]) throws -> ModuleOptions {
        let c = try config(text)
        return try ModuleOptions.load([c] + args.map { Array($0.utf8) }, service: Array(service.utf8)) { (g) throws(MFAError) -> Bool in
            let name = String(decoding: g, as: UTF8.self)
            asked.append(name)
            return groups.contains(name)
        }
    }

    func options(_ text: String, service: String = "sshd", groups: Set<String> = [], args: [String] = []) throws -> ModuleOptions {
        var asked: [String] = []
        return try options(text, service: service, groups: groups, args: args, asked: &asked)
    }

    let rollout = """
        # Everyone may still log in without a factor during the rollout...
        nullok
        adjacent_intervals = 5

        # ...except admins, who must have one.
        [group admins]
        nullok = no

        # sudo: a stricter window for everyone.
        [service sudo]
        adjacent_intervals = 1

        # The break-glass account is exempt (PAM_IGNORE, never PAM_SUCCESS).
        [group breakglass]
        exempt
        """

    /// The enrolment tool's own service: a mandatory group's un-enrolled members add a first
    /// factor there (issue 35); the source says so; the site's own [service totp-enroll]
    /// section wins; enrolment at login is never offered inside the tool's re-authentication.
    func testTheEnrolmentServiceLetsAMandatoryGroupEnrol() throws {
        let admin = try options(rollout + "\nenroll_at_login = 2099-12-31\n", service: "totp-enroll", groups: ["admins"])
        XCTAssertTrue(admin.nullok)
        XCTAssertTrue(String(decoding: admin.source(of: .nullok) ?? [], as: UTF8.self).hasPrefix("built in for the totp-enroll service"),
                      String(decoding: admin.source(of: .nullok) ?? [], as: UTF8.self))
        XCTAssertNil(admin.enrollAtLoginUntil)
        XCTAssertFalse(try options(rollout, service: "sshd", groups: ["admins"]).nullok, "only the enrolment service")
        XCTAssertTrue(try options(rollout, service: "sshd").nullok, "unchanged elsewhere")
        let strict = try options(rollout + "\n[service totp-enroll]\nnullok = no\n", service: "totp-enroll", groups: ["admins"])
        XCTAssertFalse(strict.nullok, "the site's own section for the service wins")
        // A strict pam.d line on the service cannot take it away either: the site file decides.
        XCTAssertTrue(try options("", service: "totp-enroll").nullok)
    }

    func testGroupSectionAppliesToMembersOnly() throws {
        XCTAssertTrue(try options(rollout).nullok)
        XCTAssertFalse(try options(rollout, groups: ["admins"]).nullok)
        XCTAssertTrue(try options(rollout, groups: ["staff"]).nullok)
        XCTAssertFalse(try options(rollout).exempt)
    }

    func testServiceSectionAppliesToThatServiceOnly() throws {
        XCTAssertEqual(try options(rollout, service: "sudo").adjacentIntervals, 1)
        XCTAssertEqual(try options(rollout, service: "sshd").adjacentIntervals, 5)
        XCTAssertEqual(try options(rollout, service: "sudo-i").adjacentIntervals, 5, "exact names only")
        XCTAssertEqual(try options(rollout, service: "").adjacentIntervals, 5)
    }

    func testExemptIsSetOnlyBySectionsAndNamesItsSection() throws {
        let o = try options(rollout, groups: ["breakglass"])
        XCTAssertTrue(o.exempt)
        XCTAssertTrue(String(decoding: o.exemptBy, as: UTF8.self).hasPrefix("[group breakglass] at "), String(decoding: o.exemptBy, as: UTF8.self))
        XCTAssertTrue(String(decoding: o.exemptBy, as: UTF8.self).hasSuffix("pam_totp.conf:14"), String(decoding: o.exemptBy, as: UTF8.self))
        // A later section can take it back.
        let back = try options(rollout + "\n[service sshd]\nexempt = no\n", groups: ["breakglass"])
        XCTAssertFalse(back.exempt)
        XCTAssertEqual(back.exemptBy, [])
    }

    func testLaterSectionsOverrideEarlierOnesAndArgumentsOverrideAll() throws {
        let text = """
            adjacent_intervals = 3
            [group a]
            adjacent_intervals = 4
            max_failures = 7
            [group b]
            adjacent_intervals = 6
            [service sshd]
            max_failures = 9
            """
        XCTAssertEqual(try options(text).adjacentIntervals, 3)
        XCTAssertEqual(try options(text, groups: ["a"]).adjacentIntervals, 4)
        XCTAssertEqual(try options(text, groups: ["a", "b"]).adjacentIntervals, 6, "b comes later")
        XCTAssertEqual(try options(text, service: "sudo", groups: ["a"]).maxFailures, 7)
        XCTAssertEqual(try options(text, groups: ["a"]).maxFailures, 9, "[service sshd] comes later than [group a]")
        let args = try options(text, groups: ["a", "b"], args: ["adjacent_intervals=2", "max_failures=1"])
        XCTAssertEqual(args.adjacentIntervals, 2, "the pam.d line overrides everything")
        XCTAssertEqual(args.maxFailures, 1)
    }

    func testGroupsAreLookedUpOnlyForGroupSections() throws {
        var asked: [String] = []
        _ = try options("nullok\n[service sudo]\nnullok = no\n", asked: &asked)
        XCTAssertEqual(asked, [], "no group section: no membership look-up")
        _ = try options(rollout, asked: &asked)
        XCTAssertEqual(asked, ["admins", "breakglass"])
    }

    func testAFailedMembershipLookupIsAnError() throws {
        let c = try config(rollout)
        XCTAssertThrowsError(try ModuleOptions.load([c], service: Array("sshd".utf8)) { (_) throws(MFAError) -> Bool in
            throw .system(operation: "getgrouplist", errno: .ioError)
        })
    }

    func testBadSectionsNameFileAndLine() throws {
        let cases: [(String, Int, String)] = [
            ("nullok\n[group]\n", 2, "section header"),
            ("[group admins\nnullok\n", 1, "section header"),
            ("[groups admins]\n", 1, "unknown section kind"),
            ("[user root]\n", 1, "unknown section kind"),
            ("[group a b]\n", 1, "section name"),
            ("[service \u{7}x]\n", 1, "section name"),
            ("[group " + String(repeating: "g", count: 257) + "]\n", 1, "section name"),
            ("\n[group admins]\nstore = /tmp/x\n", 3, "whole process"),
            ("[service sudo]\nsocket = /run/x\n", 2, "whole process"),
            ("[service sudo]\nexempt = maybe\n", 2, "exempt takes"),
            // Lines of sections that do not apply to this login are checked all the same.
            ("[group nobody-is-in-it]\nbogus = 1\n", 2, "unknown"),
            ("[service other]\nadjacent_intervals = 11\n", 2, "adjacent_intervals"),
            ("[service other]\nconfig = /etc/x\n", 2, "config= is not allowed"),
        ]
        for (text, line, why) in cases {
            XCTAssertThrowsError(try options(text), text) { error in
                guard case .invalidOption(let m) = error as? MFAError else { return XCTFail("\(error)") }
                XCTAssertTrue(m.string.contains("pam_totp.conf:\(line):"), "\(text): \(m.string)")
                XCTAssertTrue(m.string.contains(why), "\(text): \(m.string)")
            }
        }
    }

    func testOneGroupOnlyAndThePamLine() throws {
        // "One group only": everyone is exempt but the members of one group.
        let text = "exempt\n[group mfa]\nexempt = no\n"
        let outsider = try options(text)
        XCTAssertTrue(outsider.exempt)
        XCTAssertTrue(String(decoding: outsider.exemptBy, as: UTF8.self).hasSuffix("pam_totp.conf:1"))
        XCTAssertFalse(try options(text, groups: ["mfa"]).exempt)
        // The pam.d line overrides everything, both ways.
        XCTAssertFalse(try options(text, args: ["exempt=no"]).exempt)
        let line = try options("", groups: ["mfa"], args: ["exempt"])
        XCTAssertTrue(line.exempt)
        XCTAssertEqual(String(decoding: line.exemptBy, as: UTF8.self), "the pam.d line")
    }

    func testSpacesInsideHeadersAndCommentsAfterThem() throws {
        let o = try options("[ service   sudo ]   # stricter\nadjacent_intervals=0\n", service: "sudo")
        XCTAssertEqual(o.adjacentIntervals, 0)
    }
}
