import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// The stacks as admins compose them (issue 35): every shipped pam.d/ example (login, su and
/// sudo after `@include common-auth` as their comments say; the sshd stacks as written; the
/// totp-enroll service) × the pam-auth-update profile off and on (its Auth line after the
/// password in common-auth, pam.d/pam-configs-pam_totp) × a user who is enrolled, one who is
/// not, and one who is not but belongs to a `nullok = no` group × a right, a wrong and a
/// replayed code: the code prompts, the failures counted and the outcome, through libpam
/// itself (pam_start_confdir). The expected outcomes are the docs' (README "Enable it",
/// docs/ADMIN.md "Enabling it" and "Policy per group", pam_totp(8)), written out as a table,
/// not computed. The sshd stacks also run through the real OpenSSH client (SSHDTests, with the
/// profile in `testTheProfileAndTheSSHDLine...`).
///
/// common-auth here is the password module's place: `pam_permit` stands for a right password,
/// so only pam_totp's lines decide. Users are system accounts: nobody (enrolled), daemon (not
/// enrolled), bin (not enrolled; its primary group bin is the mandatory group).
final class StackMatrixTests: XCTestCase {
    let secret = Array("12345678901234567890".utf8)
    static let stacks = ["login", "su", "sudo", "sshd", "sshd-nullok", "sshd-publickey", "sshd-publickey-nullok", "totp-enroll",
                         "radiusd", "openvpn"]
    /// One field, the password followed by the code (code_after_password around pam_unix, which
    /// pam_permit stands for here: the answer's password part is anything).
    static let oneField: Set<String> = ["radiusd", "openvpn"]

    enum Who: String, CaseIterable { case enrolled = "nobody", unenrolled = "daemon", member = "bin" }
    enum Code: CaseIterable { case right, wrong, replayed }

    /// What the docs say happens: code prompts, and whether the login succeeds.
    struct Expected: Equatable, CustomStringConvertible {
        var prompts: Int
        var success: Bool
        var description: String { "\(prompts) code prompt(s), \(success ? "success" : "denied")" }
    }

    /// The table. `profile`: the pam-auth-update profile enabled.
    func expected(_ stack: String, profile: Bool, who: Who, code: Code) -> Expected {
        // totp-enroll's own stack is common-auth (and common-account): pam_totp runs there only
        // with the profile, and never asks a user without a factor (the enrolment service).
        if stack == "totp-enroll" {
            guard profile, who == .enrolled else { return Expected(prompts: 0, success: true) }
            return Expected(prompts: 1, success: code == .right)
        }
        // One field: always asked (the password is in it); the profile's line in common-auth is
        // not in these stacks; no nullok, so only an enrolled user with the right code gets in.
        if Self.oneField.contains(stack) { return Expected(prompts: 1, success: who == .enrolled && code == .right) }
        switch who {
        case .enrolled:
            // Asked once whatever the stack and the profile; only the right code gets in.
            return Expected(prompts: 1, success: code == .right)
        case .unenrolled:
            // nullok on the stack's line lets them in unasked; a strict line asks and denies,
            // the profile's nullok line before it notwithstanding.
            let nullok = stack.hasSuffix("-nullok")
            return Expected(prompts: nullok ? 0 : 1, success: nullok)
        case .member:
            // `[group bin] nullok = no` makes every line strict for bin: asked and denied.
            return Expected(prompts: 1, success: false)
        }
    }

    func testTheShippedStacksWithAndWithoutTheProfile() throws {
        var mismatches: [String] = []
        var cases = 0
        for stack in Self.stacks {
            for profile in [false, true] {
                let pam = try PAMFixture()
                defer { pam.cleanup() }
                try pam.enroll("nobody", secret: secret)
                let config = pam.root.appendingPathComponent("pam_totp.conf")
                try "[group bin]\nnullok = no\n".write(to: config, atomically: true, encoding: .utf8)
                let args = "store=\(pam.store.path) config=\(config.path)"
                try writeStack(stack, profile: profile, into: pam, moduleArguments: args)
                awayFromStepBoundary(margin: 5)
                let right = try currentCode(secret)
                for who in Who.allCases {
                    for code in Code.allCases {
                        cases += 1
                        let before = try pam.state(who.rawValue).failures
                        let code6: [UInt8] = code == .wrong ? try wrongCode() : right
                        let answer = Self.oneField.contains(stack) ? Array("pass word".utf8) + code6 : code6
                        let c = Conversation(answer: answer)
                        let result = pam.authenticate(service: stack, user: who.rawValue, conversation: c)
                        let prompts = c.prompts.filter { $0.contains("erification code") }.count
                        let got = Expected(prompts: prompts, success: result == PAM_SUCCESS)
                        // The replayed code is the right one again, after the right case used it.
                        let want = expected(stack, profile: profile, who: who, code: code)
                        let failures = try pam.state(who.rawValue).failures - before
                        // A failure is counted only for a user with a record, once per login.
                        let wantFailures: UInt32 = (who == .enrolled && want.prompts == 1 && !want.success) ? 1 : 0
                        if got != want || failures != wantFailures {
                            mismatches.append("\(stack), profile \(profile ? "on" : "off"), \(who), \(code) code: "
                                              + "expected \(want), \(wantFailures) failure(s); got \(got) (PAM \(result)), \(failures) failure(s)")
                        }
                    }
                }
            }
        }
        XCTAssertEqual(cases, Self.stacks.count * 2 * 3 * 3)
        XCTAssertTrue(mismatches.isEmpty, "\(mismatches.count) of \(cases) cases differ from the docs:\n" + mismatches.joined(separator: "\n"))
    }

    /// Every shipped stack is in the matrix.
    func testEveryShippedStackIsInTheMatrix() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: packageRoot.appendingPathComponent("pam.d").path)
        XCTAssertEqual(Set(files.filter { $0 != "pam-configs-pam_totp" }), Set(Self.stacks))
    }

    /// The stack `name` as the docs compose it into `pam.confdir`, with common-auth (the
    /// password, and with the profile its line) and common-account beside it.
    func writeStack(_ name: String, profile: Bool, into pam: PAMFixture, moduleArguments: String) throws {
        let module = moduleURL.path + " " + moduleArguments
        let text = try String(contentsOf: packageRoot.appendingPathComponent("pam.d").appendingPathComponent(name), encoding: .utf8)
        var lines = text.split(separator: "\n").map(String.init)
            .filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty && !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
            .map { $0.replacingOccurrences(of: "pam_totp.so", with: module).replacingOccurrences(of: "pam_unix.so use_first_pass", with: "pam_permit.so") }
        // login, su and sudo: "right after @include common-auth" (their comments, the README).
        if ["login", "su", "sudo"].contains(name) { lines.insert("@include common-auth", at: 0) }
        // pam_start_confdir reads includes from /etc/pam.d: name the test's files by path.
        lines = lines.map { $0.replacingOccurrences(of: "@include common-", with: "@include " + pam.confdir.path + "/common-") }
        try (lines.joined(separator: "\n") + "\n").write(to: pam.confdir.appendingPathComponent(name), atomically: true, encoding: .utf8)
        // The profile's Auth line, as pam-auth-update puts it after the primary block.
        let profileText = try String(contentsOf: packageRoot.appendingPathComponent("pam.d/pam-configs-pam_totp"), encoding: .utf8)
        let authLine = try XCTUnwrap(profileText.components(separatedBy: "Auth:\n").last?.split(separator: "\n").first)
            .trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "pam_totp.so", with: module)
        let common = ["auth required pam_permit.so"] + (profile ? ["auth " + authLine] : [])
        try (common.joined(separator: "\n") + "\n").write(to: pam.confdir.appendingPathComponent("common-auth"), atomically: true, encoding: .utf8)
        try "account required pam_permit.so\n".write(to: pam.confdir.appendingPathComponent("common-account"), atomically: true, encoding: .utf8)
    }

    /// A code no step of the widest window matches.
    func wrongCode() throws -> [UInt8] {
        let now = Int64(time(nil))
        let window = Set(try (-12...12).map { try TOTP.code(secret: secret, parameters: .default, at: now + Int64($0) * 30) })
        return try XCTUnwrap(["000000", "111111", "123456", "424242"].map { Array($0.utf8) }.first { !window.contains($0) })
    }
}
