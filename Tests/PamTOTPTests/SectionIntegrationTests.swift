import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// `[group NAME]` and `[service NAME]` sections of the configuration file, through the real
/// libpam (pam_start_confdir) and the shipped module: membership from NSS (primary and
/// supplementary groups), the service from libpam, precedence, exempt users, bad sections.
/// Uses the system accounts `nobody` (group nogroup) and `daemon` (group daemon), which every
/// Debian system has, with records in the fixture's private store.
final class SectionIntegrationTests: XCTestCase {
    var fixture: PAMFixture!
    let secret = Array("12345678901234567890".utf8)
    var configPath: String { fixture.root.appendingPathComponent("pam_totp.conf").path }

    override func setUpWithError() throws {
        fixture = try PAMFixture()
        try fixture.enroll("nobody", secret: secret)
    }

    override func tearDown() { fixture.cleanup() }

    func writeConfig(_ text: String) throws {
        try text.write(toFile: configPath, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(configPath, 0o644), 0)
    }

    /// Service `name`: the module with the fixture's store and config, then `extra` lines.
    func service(_ name: String, args: String = "", _ extra: [String] = []) throws {
        try fixture.service(name, ["auth required MODULE STORE config=\(configPath) \(args)"] + extra)
    }

    func auth(_ service: String, _ user: String, _ answer: [UInt8]?) -> (Int32, [String]) {
        let c = Conversation(answer: answer)
        let r = fixture.authenticate(service: service, user: user, conversation: c)
        return (r, c.prompts)
    }

    /// Forgets nobody's state (used steps, learned drift, failures), so each check starts afresh.
    func resetState() {
        let path = fixture.store.appendingPathComponent(".state.nobody").path
        XCTAssertTrue(unlink(path) == 0 || errno == ENOENT, "unlink \(path): errno \(errno)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }

    func testGroupSectionMakesTheFactorMandatoryForMembersOnly() throws {
        // The rollout recipe: optional for everyone, mandatory for one group.
        try writeConfig("nullok\n[group nogroup]\nnullok = no\n")
        try service("rollout", ["auth required pam_permit.so"])
        // daemon (not in nogroup), unenrolled: PAM_IGNORE without a prompt, pam_permit decides.
        let (r1, p1) = auth("rollout", "daemon", nil)
        XCTAssertEqual(r1, PAM_SUCCESS)
        XCTAssertEqual(p1, [], "nullok: not prompted")
        // nobody, a member of nogroup, without a factor: asked and denied.
        unlink(fixture.store.appendingPathComponent("nobody").path)
        let (r2, p2) = auth("rollout", "nobody", Array("123456".utf8))
        XCTAssertEqual(r2, PAM_AUTH_ERR, "a member of the group without a factor is denied")
        XCTAssertEqual(p2, ["Verification code: "])
    }

    func testServiceSectionAndPrecedence() throws {
        // A stricter window for one service; later sections override earlier ones; where the
        // file and the pam.d line both set it, the stricter value wins.
        try writeConfig("""
            adjacent_intervals = 5
            [service strict-sudo]
            adjacent_intervals = 0
            [group nogroup]
            max_failures = 50
            [service loose-later]
            adjacent_intervals = 0
            [group nogroup]
            adjacent_intervals = 4
            [service line-looser]
            adjacent_intervals = 0
            """)
        // nobody is in nogroup: its last section (4) applies on every service but line-looser.
        try service("strict-sudo")
        try service("plain")
        try service("loose-later")
        try service("line-looser", args: "adjacent_intervals=3")
        try service("line-stricter", args: "adjacent_intervals=1")
        func check(_ service: String, ahead: Int64) throws -> Int32 {
            resetState()
            awayFromStepBoundary()
            return auth(service, "nobody", try currentCode(secret, offsetSteps: ahead)).0
        }
        // daemon is not in nogroup: strict-sudo's window is 0, other services' 5.
        try fixture.enroll("daemon", secret: secret)
        func checkDaemon(_ service: String, ahead: Int64) throws -> Int32 {
            unlink(fixture.store.appendingPathComponent(".state.daemon").path)
            awayFromStepBoundary()
            return auth(service, "daemon", try currentCode(secret, offsetSteps: ahead)).0
        }
        XCTAssertEqual(try checkDaemon("strict-sudo", ahead: 1), PAM_AUTH_ERR)
        XCTAssertEqual(try checkDaemon("strict-sudo", ahead: 0), PAM_SUCCESS)
        XCTAssertEqual(try checkDaemon("plain", ahead: 5), PAM_SUCCESS)
        XCTAssertEqual(try checkDaemon("loose-later", ahead: 1), PAM_AUTH_ERR)
        // For nobody the later [group nogroup] (4) overrides [service strict-sudo] and
        // [service loose-later] (0), and the global 5.
        XCTAssertEqual(try check("strict-sudo", ahead: 4), PAM_SUCCESS)
        XCTAssertEqual(try check("loose-later", ahead: 4), PAM_SUCCESS)
        XCTAssertEqual(try check("plain", ahead: 5), PAM_AUTH_ERR)
        // The pam.d line's 3 cannot loosen the section's 0 (it used to override it).
        XCTAssertEqual(try check("line-looser", ahead: 3), PAM_AUTH_ERR)
        XCTAssertEqual(try check("line-looser", ahead: 0), PAM_SUCCESS)
        // A pam.d line stricter than the file (1 against [group nogroup]'s 4) holds.
        XCTAssertEqual(try check("line-stricter", ahead: 1), PAM_SUCCESS)
        XCTAssertEqual(try check("line-stricter", ahead: 2), PAM_AUTH_ERR)
    }

    /// A new admin's trial: the README's "mandatory for one group" file had no effect with the
    /// pam-auth-update profile enabled, because the profile's line carries nullok and a pam.d
    /// option overrode the file: an unenrolled member of the group logged in with the password
    /// alone, and nothing was logged. The stricter of the file and the line now wins.
    func testAGroupsMandatoryPolicyBeatsTheProfilesNullok() throws {
        try writeConfig("nullok\n[group nogroup]\nnullok = no\n")
        try service("profile", args: "nullok", ["auth required pam_permit.so"])
        unlink(fixture.store.appendingPathComponent("nobody").path)
        // nobody, a member of nogroup, without a factor: asked and denied (was: PAM_IGNORE, in).
        let (member, asked) = auth("profile", "nobody", Array("123456".utf8))
        XCTAssertEqual(member, PAM_AUTH_ERR)
        XCTAssertEqual(asked.count, 1)
        // daemon, not a member, without a factor: the file's nullok and the line's agree.
        let (other, notAsked) = auth("profile", "daemon", nil)
        XCTAssertEqual(other, PAM_SUCCESS)
        XCTAssertEqual(notAsked, [])
        // The file's global nullok = no beats the profile's nullok for everyone.
        try writeConfig("nullok = no\n")
        XCTAssertEqual(auth("profile", "daemon", Array("123456".utf8)).0, PAM_AUTH_ERR)
    }

    func testExemptGivesIgnoreNeverSuccess() throws {
        try writeConfig("[group nogroup]\nexempt\n")
        try service("exempt-alone")
        try service("exempt-permit", ["auth required pam_permit.so"])
        // Alone in the stack: PAM_IGNORE does not count, so the stack has no success.
        let (alone, prompts) = auth("exempt-alone", "nobody", Array("000000".utf8))
        XCTAssertNotEqual(alone, PAM_SUCCESS, "an exempt user must never get PAM_SUCCESS from the module")
        XCTAssertEqual(prompts, [], "an exempt user is not asked for a code")
        // Followed by pam_permit: the stack succeeds, so the module's answer was not a failure.
        XCTAssertEqual(auth("exempt-permit", "nobody", nil).0, PAM_SUCCESS)
        // Not a member: asked and checked as usual.
        try fixture.enroll("daemon", secret: Array("abcdefghijabcdefghij".utf8))
        let (other, otherPrompts) = auth("exempt-permit", "daemon", Array("000000".utf8))
        XCTAssertEqual(other, PAM_AUTH_ERR)
        XCTAssertEqual(otherPrompts, ["Verification code: "])
        // A later section takes the exemption back.
        try writeConfig("[group nogroup]\nexempt\n[service exempt-permit]\nexempt = no\n")
        XCTAssertEqual(auth("exempt-permit", "nobody", Array("000000".utf8)).0, PAM_AUTH_ERR)
    }

    func testExemptWithForwardPassStillAsksTheOneQuestionAndIgnores() throws {
        // A one-prompt client (a screen locker): the exempt user is asked the one question, the
        // whole answer is the password for the next module, and the module answers PAM_IGNORE.
        try writeConfig("[group nogroup]\nexempt\n")
        try service("exempt-fp", args: "forward_pass", ["auth required pam_permit.so"])
        try service("exempt-fp-alone", args: "forward_pass")
        let (r, prompts) = auth("exempt-fp", "nobody", Array("hunter2".utf8))
        XCTAssertEqual(r, PAM_SUCCESS)
        XCTAssertEqual(prompts, ["Password and verification code: "])
        XCTAssertNotEqual(auth("exempt-fp-alone", "nobody", Array("hunter2".utf8)).0, PAM_SUCCESS, "PAM_IGNORE is no success")
        XCTAssertEqual(try fixture.state("nobody").failures, 0, "nothing was checked or counted")
    }

    func testBadSectionsDenyWithServiceErrWithoutPrompting() throws {
        try service("bad")
        for text in ["[group]\n", "[host x]\nnullok\n", "[group nogroup]\nstore = /tmp\n", "[service bad]\nexempt = maybe\n",
                     "[service nothing-matches]\nadjacent_intervals = 99\n"] {
            try writeConfig(text)
            let (r, prompts) = auth("bad", "nobody", try currentCode(secret))
            XCTAssertEqual(r, PAM_SERVICE_ERR, text)
            XCTAssertEqual(prompts, [], text)
        }
    }

    func testOneGroupOnly() throws {
        // Only members of one group are asked: everyone is exempt, the group takes it back.
        try writeConfig("exempt\n[group nogroup]\nexempt = no\n")
        try service("one-group", ["auth required pam_permit.so"])
        try fixture.enroll("daemon", secret: secret)
        let (outsider, outsiderPrompts) = auth("one-group", "daemon", nil)
        XCTAssertEqual(outsider, PAM_SUCCESS, "PAM_IGNORE, then pam_permit")
        XCTAssertEqual(outsiderPrompts, [])
        let (member, memberPrompts) = auth("one-group", "nobody", Array("000000".utf8))
        XCTAssertEqual(member, PAM_AUTH_ERR)
        XCTAssertEqual(memberPrompts, ["Verification code: "])
        // exempt=no on the pam.d line overrides the file: nobody is exempt on this service.
        try service("never-exempt", args: "exempt=no", ["auth required pam_permit.so"])
        XCTAssertEqual(auth("never-exempt", "daemon", Array("000000".utf8)).0, PAM_AUTH_ERR)
    }

    /// A [group NAME] that NSS does not know (a typo, a directory group not there yet, a
    /// directory answering "no such group") must not be skipped: in the "one group only"
    /// recipe that would exempt the whole group. Every login is denied like a bad line.
    func testAGroupNSSDoesNotKnowDeniesInsteadOfSkippingTheSection() throws {
        let ghost = "pamtotp-no-such-group-\(getpid())"
        XCTAssertNotEqual(try runCommand(["getent", "group", ghost]).status, 0)
        try service("ghost-group", ["auth required pam_permit.so"])
        try fixture.enroll("daemon", secret: secret)
        for text in ["exempt\n[group \(ghost)]\nexempt = no\n", "nullok\n[group \(ghost)]\nnullok = no\n"] {
            try writeConfig(text)
            for user in ["nobody", "daemon", "pamtotp-no-such-user-\(getpid())"] {
                let (r, prompts) = auth("ghost-group", user, Array("000000".utf8))
                XCTAssertEqual(r, PAM_SERVICE_ERR, "\(user): \(text)")
                XCTAssertEqual(prompts, [], "\(user): \(text)")
            }
        }
    }

    /// libpam lowercases the service name (pam_start): `[service Rollout]` could never match,
    /// so a stricter section written that way was silently ignored. It is a bad line now.
    func testAServiceSectionWithCapitalsIsRefusedNotSilentlyIgnored() throws {
        try writeConfig("nullok\n[service Rollout]\nnullok = no\n")
        try service("rollout", ["auth required pam_permit.so"])
        let (r, prompts) = auth("Rollout", "daemon", nil)
        XCTAssertEqual(r, PAM_SERVICE_ERR, "the section meant for this service was skipped")
        XCTAssertEqual(prompts, [])
    }

    func testSupplementaryGroupsCount() throws {
        // A supplementary group of a throwaway account (useradd -G); primary groups are covered above.
        try XCTSkipUnless(isRoot, "useradd needs root")
        let name = "ptsec\(getpid() % 100000)"
        let group = name + "g"
        XCTAssertEqual(try runCommand(["groupadd", group]).status, 0)
        defer { _ = try? runCommand(["groupdel", group]) }
        let add = try runCommand(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", group, name])
        XCTAssertEqual(add.status, 0, add.stderr)
        defer { _ = try? runCommand(["userdel", name]) }
        try fixture.enroll(name, secret: secret)
        try writeConfig("[group \(group)]\nexempt\n")
        try service("supp", ["auth required pam_permit.so"])
        let (r, prompts) = auth("supp", name, nil)
        XCTAssertEqual(r, PAM_SUCCESS)
        XCTAssertEqual(prompts, [], "a supplementary group's section applies")
    }
}
