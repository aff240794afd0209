import MFADaemon
import MFAImport
import MFAPamStacks
import MFACrypto
import MFAPolicy
import MFASystem
import XCTest

/// The pam.d reader behind `totp-enroll policy` and `check` (PamStack, docs/ARCHITECTURE.md,
/// section 5.6) over files in memory, and the outcome of a stack's pam_totp lines for one user
/// (LineRole, StackVerdict: rule 18, the first line that asks decides).
final class PamStackTests: XCTestCase {
    func read(_ files: [String: String], service: String = "svc") -> (PamStack, [String]) {
        var reads: [String] = []
        let box = ReadLog()
        let stack = PamStack.read(service: Array(service.utf8), directory: Array("/p".utf8)) { path in
            let name = String(decoding: path, as: UTF8.self)
            box.paths.append(name)
            return files[name].map { Array($0.utf8) }
        }
        reads = box.paths
        return (stack, reads)
    }

    final class ReadLog: @unchecked Sendable { var paths: [String] = [] }

    func describe(_ e: PamStack.Entry) -> String {
        let name = String(decoding: e.file, as: UTF8.self).replacingOccurrences(of: "/p/", with: "")
        return "\(name):\(e.line) \(String(decoding: e.control, as: UTF8.self)) \(String(decoding: e.module, as: UTF8.self))"
            + e.arguments.map { " " + String(decoding: $0, as: UTF8.self) }.joined()
    }

    func testIncludesAreFollowedInPlace() {
        let (stack, _) = read([
            "/p/svc": "#%PAM-1.0\nauth required pam_env.so\n@include common-auth\nauth required pam_totp.so\naccount include common-account\n",
            "/p/common-auth": "auth [success=1 default=ignore] pam_unix.so nullok\nauth requisite pam_deny.so\n"
                + "auth [success=ok default=die] pam_totp.so nullok\nsession required pam_limits.so\n",
        ])
        XCTAssertEqual(stack.entries.map(describe), [
            "svc:2 required pam_env.so",
            "svc:3 @include common-auth",
            "common-auth:1 [success=1 default=ignore] pam_unix.so nullok",
            "common-auth:2 requisite pam_deny.so",
            "common-auth:3 [success=ok default=die] pam_totp.so nullok",
            "svc:4 required pam_totp.so",
        ])
        XCTAssertEqual(stack.problems, [])
        XCTAssertEqual(stack.modules(named: Array("pam_totp.so".utf8)).map { $0.line }, [3, 4])
        XCTAssertEqual(stack.modules(named: Array("pam_totp.so".utf8)).map { $0.depth }, [1, 0])
    }

    func testIncludeAndSubstackControlsOnlyTheirType() {
        let (stack, _) = read([
            "/p/svc": "auth include a\nAUTH substack b\naccount include c\n",
            "/p/a": "auth required pam_totp.so store=/a\npassword required pam_unix.so\n",
            "/p/b": "auth requisite /lib/security/pam_totp.so\n",
        ])
        XCTAssertEqual(stack.entries.map(describe), [
            "svc:1 include a", "a:1 required pam_totp.so store=/a",
            "svc:2 substack b", "b:1 requisite /lib/security/pam_totp.so",
        ])
        XCTAssertEqual(stack.entries.map { $0.inSubstack }, [false, false, false, true])
        XCTAssertEqual(stack.modules(named: Array("pam_totp.so".utf8)).count, 2, "a module named by its full path counts")
        XCTAssertEqual(stack.problems, [], "c is never read: only auth lines are followed")
    }

    func testDashAuthBracketsCommentsAndContinuations() {
        let (stack, _) = read([
            "/p/svc": "-auth optional pam_gnome_keyring.so # a comment\n"
                + "auth   [success=ok\tnew_authtok_reqd=ok   default=die]   pam_totp.so   after_password\n"
                + "# auth required pam_totp.so commented out\n"
                + "auth required pam_exec.so [a b \\] c] quiet\n"
                + "auth required \\  \r\n  pam_totp.so forward_pass\n"
                + "auth [default=bad pam_totp.so\n"
                + "auth required\n",
        ])
        XCTAssertEqual(stack.entries.map(describe), [
            "svc:1 optional pam_gnome_keyring.so",
            "svc:2 [success=ok new_authtok_reqd=ok default=die] pam_totp.so after_password",
            "svc:4 required pam_exec.so a b ] c quiet",
            "svc:5 required pam_totp.so forward_pass",
        ])
        XCTAssertEqual(stack.entries.first?.quiet, true)
        XCTAssertEqual(stack.problems.map { $0.line }, [7, 8], "the unclosed bracket and the incomplete line")
    }

    /// Found by the fuzzer (make fuzz, pamstack): a bracketed word where the module goes made
    /// an entry with an empty module. It is an incomplete line, as an empty bracket is.
    func testABracketedModuleIsAnIncompleteLine() {
        let (stack, _) = read(["/p/svc": "auth s []oubstack b\nauth required [x] pam_totp.so\nauth required pam_totp.so\n"])
        XCTAssertEqual(stack.entries.map(describe), ["svc:3 required pam_totp.so"])
        XCTAssertEqual(stack.problems.map { $0.line }, [1, 2])
        XCTAssertTrue(stack.entries.allSatisfy { !$0.module.isEmpty && !$0.control.isEmpty })
    }

    func testMissingFilesAreProblemsAndTheServiceFallsBackToOther() {
        let (stack, _) = read(["/p/svc": "auth include nowhere\nauth required pam_totp.so\n"])
        XCTAssertEqual(stack.entries.map(describe), ["svc:1 include nowhere", "svc:2 required pam_totp.so"])
        XCTAssertEqual(stack.problems.map { String(decoding: $0.text, as: UTF8.self) }, ["/p/svc:1: /p/nowhere cannot be read"])

        let (other, _) = read(["/p/other": "auth required pam_deny.so\n"], service: "absent")
        XCTAssertTrue(other.usedOther)
        XCTAssertEqual(String(decoding: other.file, as: UTF8.self), "/p/other")
        XCTAssertEqual(other.entries.map(describe), ["other:1 required pam_deny.so"])

        let (none, _) = read([:], service: "absent")
        XCTAssertEqual(none.entries, [])
        XCTAssertEqual(none.problems.count, 1)
        for bad in ["", "..", "a/b", "a b"] {
            XCTAssertEqual(read([:], service: bad).0.problems.count, 1, bad)
        }
    }

    func testDepthAndReadsAreBounded() {
        // A file that includes itself twice: the depth limit stops each chain, the read limit the fan-out.
        let (loop, reads) = read(["/p/svc": "@include svc\nauth include svc\nauth required pam_totp.so\n"])
        XCTAssertLessThanOrEqual(reads.count, PamStack.maxFiles)
        XCTAssertLessThanOrEqual(loop.entries.count, PamStack.maxEntries)
        XCTAssertTrue(loop.entries.allSatisfy { $0.depth <= PamStack.maxDepth })
        XCTAssertTrue(loop.problems.contains { String(decoding: $0.message, as: UTF8.self).contains("nested more than 16 deep") })

        // A straight chain deeper than the limit.
        var files: [String: String] = [:]
        for i in 0..<30 { files["/p/f\(i)"] = "auth include f\(i + 1)\nauth required pam_totp.so\n" }
        files["/p/svc"] = "auth include f0\n"
        let (chain, _) = read(files)
        XCTAssertEqual(chain.modules(named: Array("pam_totp.so".utf8)).count, PamStack.maxDepth)
        XCTAssertEqual(chain.problems.count, 1)

        // A file with bad lines included over and over: its problems once per visit, at most
        // maxProblems, the last saying so (the fuzz target found this quadratic: 256 visits
        // of a file with hundreds of bad lines).
        let bad = String(repeating: "auth\n", count: 200)
        let (noisy, noisyReads) = read(["/p/svc": String(repeating: "@include bad\n", count: 50), "/p/bad": bad])
        XCTAssertEqual(noisyReads, ["/p/svc", "/p/bad"], "each file read once")
        XCTAssertEqual(noisy.problems.count, PamStack.maxProblems)
        XCTAssertEqual(noisy.problems.last.map { String(decoding: $0.message, as: UTF8.self) },
                       "more than 255 problems in one stack: the rest are not listed")

        // A file too large is not read.
        let (big, _) = read(["/p/svc": "@include big\n", "/p/big": String(repeating: "#", count: PamStack.maxFileSize + 1)])
        XCTAssertTrue(big.problems.contains { String(decoding: $0.message, as: UTF8.self).contains("larger than 256 KiB") })
    }

    // MARK: - The outcome

    let alice = Array("alice".utf8)

    func options(_ args: String) throws -> ModuleOptions {
        try ModuleOptions.parse(args.split(separator: " ").map { Array($0.utf8) })
    }

    func record() throws -> UserRecord {
        UserRecord(uid: 1000, factors: [try Factor(label: Array("phone".utf8), parameters: .default, created: 1_700_000_000,
                                                   secret: Array("12345678901234567890".utf8))])
    }

    func verdict(_ lines: [String], _ enrolment: LineEnrolment) throws -> StackVerdict {
        let roles = try lines.map { LineRole.of(options: try options($0), enrolment: enrolment, user: alice, now: 1_800_000_000) }
        return StackVerdict(roles: roles, places: lines.indices.map { Array("L\($0 + 1)".utf8) }, user: alice)
    }

    func testProfileNullokLineThenStrictServiceLine() throws {
        let enrolled = try verdict(["nullok", ""], .enrolled(try record()))
        XCTAssertEqual(enrolled.outcome, .ask)
        XCTAssertEqual(enrolled.deciding, 0, "the first line asks and decides")
        XCTAssertTrue(String(decoding: enrolled.reason, as: UTF8.self).hasPrefix("L1 decides: alice is enrolled"))

        let unenrolled = try verdict(["nullok", ""], .unenrolled)
        XCTAssertEqual(unenrolled.outcome, .deny)
        XCTAssertEqual(unenrolled.deciding, 1, "the nullok line asks nothing; the strict line decides")

        let both = try verdict(["nullok", "nullok"], .unenrolled)
        XCTAssertEqual(both.outcome, .pass)
        XCTAssertNil(both.deciding)

        XCTAssertEqual(try verdict([], .unenrolled).outcome, .pass)
        XCTAssertEqual(try verdict(["exempt", ""], .enrolled(try record())).deciding, 1, "exempt asks nothing")
        XCTAssertEqual(try verdict(["exempt"], .enrolled(try record())).outcome, .pass)
        XCTAssertEqual(try verdict(["", "nullok"], .unenrolled).deciding, 0, "a strict first line decides")
    }

    func testForwardPassEnrolAtLoginKindsAndErrors() throws {
        // forward_pass asks the one question even under nullok (the answer goes on as the
        // password), but its ignore binds no later line: a strict line after it decides, and denies.
        let forward = try verdict(["forward_pass nullok", ""], .unenrolled)
        XCTAssertEqual(forward.outcome, .deny)
        XCTAssertEqual(forward.deciding, 1)
        XCTAssertEqual(try verdict(["forward_pass nullok"], .unenrolled).outcome, .pass)
        XCTAssertEqual(try verdict(["forward_pass after_password", ""], .unenrolled).deciding, 1, "after_password asks nothing")
        // Enrolment at first login asks, until its day ends.
        XCTAssertEqual(try verdict(["nullok enroll_at_login=2099-01-01"], .unenrolled).outcome, .ask)
        XCTAssertEqual(try verdict(["nullok enroll_at_login=2001-01-01"], .unenrolled).outcome, .pass)
        // Only kinds that are not allowed here: denied unasked.
        XCTAssertEqual(try verdict(["factor_kinds=sms"], .enrolled(try record())).outcome, .deny)
        XCTAssertEqual(try verdict([""], .unreadable(Array("EIO".utf8))).outcome, .deny)
        let invalid = LineRole.of(options: nil, invalid: Array("bogus".utf8), enrolment: .unenrolled, user: alice, now: 0)
        XCTAssertEqual(invalid.outcome, .deny)
        XCTAssertTrue(invalid.decides)
    }
}
