import CPAM
import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import TestSupport
import XCTest

/// Out of process: pamtester against the module with codes from oathtool (an independent
/// implementation), faketime to move the clock, and checks of the shipped .so's symbols and
/// dependencies. pamtester reads services from /etc/pam.d only, so these need root.
final class PamtesterTests: XCTestCase {
    var root: URL!
    var store: URL!
    var service = ""
    let secretB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d (run as root, as make check in CI does)")
        root = try makeTemporaryDirectory("pam_totp_pamtester")
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        service = "pam_totp_test_\(getpid())"
    }

    override func tearDown() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        if let root { removeTemporaryDirectory(root) }
    }

    func writeService(_ arguments: String = "") throws {
        try "auth required \(moduleURL.path) store=\(store.path) \(arguments)\n"
            .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
    }

    func oathtool(_ args: [String]) throws -> String {
        let r = try runCommand(["oathtool"] + args)
        XCTAssertEqual(r.status, 0, r.stderr)
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func pamtester(_ user: String, answer: String, faketime: String? = nil) throws -> CommandResult {
        let cmd = (faketime.map { ["faketime", $0] } ?? []) + ["pamtester", service, user, "authenticate"]
        return try runCommand(cmd, input: answer + "\n")
    }

    /// Enrols with the real totp-enroll (--user/--store as root), proving the code with oathtool,
    /// then logs in through pamtester with a fresh oathtool code.
    func testEnrolWithTotpEnrollThenLogInThroughPamtester() throws {
        try writeService()
        awayFromStepBoundary()
        let enrol = try runCommand([enrollURL.path, "--store", store.path, "--user", "nobody", "--name", "phone",
                                    "--secret", secretB32, "--code", try oathtool(["--totp", "-b", secretB32]), "--qr", "none"])
        XCTAssertEqual(enrol.status, 0, enrol.stderr)
        // totp-enroll recorded the step of the enrolment code: that code is used up. The next
        // step's code (inside the window) logs in.
        let replay = try pamtester("nobody", answer: try oathtool(["--totp", "-b", secretB32]))
        XCTAssertNotEqual(replay.status, 0, "the code that proved the enrolment cannot log in")
        let ok = try pamtester("nobody", answer: try oathtool(["--totp", "-b", secretB32, "--now=@\(Int(time(nil)) + 30)"]))
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr)
        XCTAssertTrue(ok.stderr.contains("Verification code: ") || ok.stdout.contains("Verification code: "))
        let unknown = try pamtester("daemon", answer: try oathtool(["--totp", "-b", secretB32]))
        XCTAssertNotEqual(unknown.status, 0, "unenrolled users are denied")
    }

    /// The window edges with the clock moved by faketime: oathtool computes codes for T±5 and
    /// T±6 steps; ±5 pass with adjacent_intervals=5, ±6 fail. Also SHA-256 / 8 digits / 60 s.
    /// A wrong 8-digit answer (recovery-shaped) was recorded only after the PBKDF2 that a right
    /// code skipped: pamtester killed between the two moments had a right code accepted and
    /// kept while a wrong one was dropped uncounted. Killed at every offset of a login (every
    /// 3 ms, over the whole login), a right code is never kept where a wrong one at the same
    /// offset went uncounted.
    func testKillingALoginAtAnyOffsetNeverKeepsARightCodeWhereAWrongOneGoesUncounted() throws {
        try writeService()
        let secret = Array("12345678901234567890".utf8)
        let eight = try OTPParameters(algorithm: .sha1, digits: 8, period: 30)
        var rng = SplitMix64(seed: 3)
        let (_, set) = RecoverySet.generate(count: 4, iterations: 100_000, using: &rng)
        let files = try Store(path: Array(store.path.utf8))
        let user = Array("nobody".utf8)
        func reset() throws {
            unlink(store.appendingPathComponent(".state.nobody").path)
            try files.write(user: user, record: UserRecord(uid: 65534, factors: [
                try Factor(label: Array("key".utf8), parameters: eight, created: 1, secret: secret)], recovery: set))
        }
        /// pamtester started with `answer` on its standard input, and when it started.
        func started(_ answer: String) throws -> (Process, Date) {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/pamtester")
            p.arguments = [service, "nobody", "authenticate"]
            let input = Pipe()
            p.standardInput = input
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            let t0 = Date()
            try p.run()
            input.fileHandleForWriting.write(Data((answer + "\n").utf8))
            return (p, t0)
        }
        func killed(_ p: Process) { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() }
        /// pamtester with `answer`, SIGKILLed after `delay` µs (or reaped if it ended first).
        func login(_ answer: String, killAfter delay: UInt32) throws {
            let (p, _) = try started(answer)
            usleep(delay)
            killed(p)
        }
        awayFromStepBoundary(margin: 10)
        let right = String(decoding: try currentCode(secret, eight), as: UTF8.self)
        let wrong = right == "00000000" ? "11111111" : "00000000"
        func kept() throws -> Bool { try files.readState(user: user).lastStep(forLabel: Array("key".utf8)) != nil }
        func counted() throws -> Bool { try files.readState(user: user).failures > 0 }
        /// How long after its start a login has recorded what `done` looks for (at most 3 s).
        func timeToRecord(_ answer: String, _ done: () throws -> Bool) throws -> UInt32 {
            try reset()
            let (p, t0) = try started(answer)
            while try !done(), Date().timeIntervalSince(t0) < 3 { usleep(500) }
            let took = Date().timeIntervalSince(t0)
            killed(p)
            return UInt32(took * 1_000_000)
        }
        let whole = max(try timeToRecord(right, kept), try timeToRecord(wrong, counted))
        var violations: [String] = []
        var delay: UInt32 = 0
        while delay < whole + 15_000 {
            try reset()
            try login(right, killAfter: delay)
            let rightKept = try kept()
            try reset()
            try login(wrong, killAfter: delay)
            if rightKept, try !counted() { violations.append("\(delay / 1000) ms") }
            delay += 3_000
        }
        XCTAssertEqual(violations, [], "a right code kept where a wrong one went uncounted (login records after \(whole / 1000) ms)")
    }

    func testWindowEdgesUnderFaketime() throws {
        try writeService("adjacent_intervals=5")
        let s = try Store(path: Array(store.path.utf8))
        let secret = try Base32.decode(Array(secretB32.utf8))
        let p256 = try OTPParameters(algorithm: .sha256, digits: 8, period: 60)
        try s.write(user: Array("alice".utf8), record: UserRecord(factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret),
        ]))
        try s.write(user: Array("bob".utf8), record: UserRecord(factors: [
            try Factor(label: Array("token".utf8), parameters: p256, created: 1, secret: secret),
        ]))
        let t: Int64 = 2_000_000_010  // 10 s into a 30 s step, 50 s into a 60 s step... fixed either way
        let at = "@\(t)"
        // Accepted steps must increase (replay guard), so the passing offsets go in order.
        for (offset, expectOK) in [(-6, false), (6, false), (-5, true), (0, true), (5, true)] {
            let code = try oathtool(["--totp", "-b", secretB32, "--now=@\(t + Int64(offset) * 30)"])
            let inside = try (-5...5).map { try oathtool(["--totp", "-b", secretB32, "--now=@\(t + Int64($0) * 30)"]) }
            if !expectOK && inside.contains(code) { continue }  // chance collision: not an edge test
            let r = try pamtester("alice", answer: code, faketime: at)
            XCTAssertEqual(r.status == 0, expectOK, "offset \(offset): \(r.stderr)")
        }
        let code256 = try oathtool(["--totp=SHA256", "--digits=8", "--time-step-size=60s", "-b", secretB32, "--now=@\(t + 5 * 60)"])
        XCTAssertEqual(try pamtester("bob", answer: code256, faketime: at).status, 0)
    }

    /// The module, the set-uid tool and the daemon bind every symbol at load and keep their
    /// relocated data read-only (full RELRO: BIND_NOW plus a GNU_RELRO segment).
    func testBinariesAreLinkedWithFullRELRO() throws {
        for binary in [moduleURL, enrollURL, daemonURL] {
            let dynamic = try runCommand(["readelf", "--dynamic", "--wide", binary.path])
            XCTAssertEqual(dynamic.status, 0, dynamic.stderr)
            XCTAssertTrue(dynamic.stdout.contains("BIND_NOW"), "\(binary.lastPathComponent) is not linked with -z now")
            let segments = try runCommand(["readelf", "--segments", "--wide", binary.path])
            XCTAssertEqual(segments.status, 0, segments.stderr)
            XCTAssertTrue(segments.stdout.contains("GNU_RELRO"), "\(binary.lastPathComponent) has no RELRO segment")
        }
        // No RUNPATH on the module: its one dlopen (libqrencode, first-login enrolment) searches
        // only the system's library directories, never the directory the module was loaded from.
        let dynamic = try runCommand(["readelf", "--dynamic", "--wide", moduleURL.path])
        XCTAssertFalse(dynamic.stdout.contains("RUNPATH") || dynamic.stdout.contains("RPATH"), dynamic.stdout)
    }

    /// The shipped .so exports only pam_sm_* and loads with libc and libpam alone.
    func testExportsAndDependencies() throws {
        let nm = try runCommand(["nm", "-D", "--defined-only", "--extern-only", moduleURL.path])
        XCTAssertEqual(nm.status, 0, nm.stderr)
        let exported = nm.stdout.split(separator: "\n").compactMap { $0.split(separator: " ").last.map(String.init) }.sorted()
        XCTAssertEqual(exported, ["pam_sm_authenticate", "pam_sm_setcred"])
        // Hygiene inside the host (docs/ARCHITECTURE.md, section 4.9): the module imports nothing that reads the
        // environment, installs signal handlers, starts threads, or changes umask or cwd.
        let imports = try runCommand(["nm", "-D", "--undefined-only", moduleURL.path])
        XCTAssertEqual(imports.status, 0, imports.stderr)
        let importedNames = Set(imports.stdout.split(separator: "\n").compactMap {
            $0.split(separator: " ").last.map { String($0.split(separator: "@").first ?? "") }
        })
        for forbidden in ["getenv", "secure_getenv", "signal", "sigaction", "pthread_create", "umask", "chdir", "fchdir",
                          "setenv", "putenv", "fork", "system", "popen", "dlmopen"] {
            XCTAssertFalse(importedNames.contains(forbidden), "pam_totp.so imports \(forbidden)")
        }
        // The C library as it is (issue 37): the module calls libc's own functions, as other PAM
        // modules do, and carries no copy of them (the copying and allocating ones every build
        // of it calls; a copy of its own would not be imported).
        for own in ["memcpy", "memset", "posix_memalign", "free"] {
            XCTAssertTrue(importedNames.contains(own), "pam_totp.so does not import \(own): has it a copy of its own?")
        }
        XCTAssertTrue(importedNames.contains("pam_get_user"), "the check reads real import names")
        let ldd = try runCommand(["ldd", moduleURL.path])
        XCTAssertEqual(ldd.status, 0, ldd.stderr)
        XCTAssertFalse(ldd.stdout.lowercased().contains("swift"), ldd.stdout)
        let libraries = ldd.stdout.split(separator: "\n").compactMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).first.map(String.init) }
        for lib in libraries {
            XCTAssertTrue(["linux-vdso.so.1", "libpam.so.0", "libc.so.6", "libaudit.so.1", "libcap-ng.so.0",
                           "/lib64/ld-linux-x86-64.so.2"].contains(lib), "unexpected dependency \(lib)")
        }
    }
}
