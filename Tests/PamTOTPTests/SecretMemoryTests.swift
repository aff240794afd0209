import Foundation
import MFACrypto
import MFAFileStore
import MFAPolicy
import MFASystem
import MFAWire
import TestSupport
import XCTest

/// No freed block holds a decoded secret (ARCHITECTURE rule 9: secrets are zeroed before their
/// memory is freed). A review found one freed block per login, right code or wrong, still
/// holding the user's decoded secret (the Base32 text was wiped), and the same for totp-enroll's
/// list, status and recovery-codes. An LD_PRELOAD library (tests only) looks for the secret's
/// bytes in every block handed to free() or realloc() and reports each one found.
final class SecretMemoryTests: XCTestCase {
    var root: URL!
    var store: URL!
    var scanner = ""
    var service = ""
    let secret = Array("12345678901234567890".utf8)
    let secretB32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"

    /// free() and realloc() that look for SCAN_SECRET_HEX's bytes in the block first and
    /// append a line to SCAN_REPORT for each block that holds them.
    static let scannerSource = #"""
        #define _GNU_SOURCE
        #include <fcntl.h>
        #include <malloc.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>
        extern void __libc_free(void *);
        extern void *__libc_realloc(void *, size_t);
        static unsigned char pattern[256];
        static size_t length;
        static int ready, out = -1;
        static void setup(void) {
            ready = 1;
            const char *hex = getenv("SCAN_SECRET_HEX"), *file = getenv("SCAN_REPORT");
            if (!hex || !file) return;
            size_t n = strlen(hex) / 2;
            if (n > sizeof pattern) n = sizeof pattern;
            for (size_t i = 0; i < n; i++) { unsigned v = 0; sscanf(hex + 2 * i, "%2x", &v); pattern[i] = (unsigned char)v; }
            length = n;
            out = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        }
        static void check(void *p, const char *what) {
            if (!ready) setup();
            if (!p || length == 0 || out < 0) return;
            size_t size = malloc_usable_size(p);
            if (size >= length && memmem(p, size, pattern, length)) {
                char line[80];
                int k = snprintf(line, sizeof line, "%s of a %zu-byte block holding the secret\n", what, size);
                if (k > 0) (void)!write(out, line, (size_t)k);
            }
        }
        void free(void *p) { check(p, "free"); __libc_free(p); }
        void *realloc(void *p, size_t n) { check(p, "realloc"); return __libc_realloc(p, n); }
        """#

    override func setUpWithError() throws {
        try XCTSkipUnless(isRoot, "pamtester needs a service file in /etc/pam.d, totp-enroll --user needs root")
        root = try makeTemporaryDirectory("pam_totp_secretmemory")
        XCTAssertEqual(chmod(root.path, 0o755), 0)
        store = root.appendingPathComponent("store")
        XCTAssertEqual(mkdir(store.path, 0o700), 0)
        let source = root.appendingPathComponent("scan.c").path
        scanner = root.appendingPathComponent("scan.so").path
        try Self.scannerSource.write(toFile: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["gcc", "-shared", "-fPIC", "-O1", "-o", scanner, source])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        XCTAssertEqual(chmod(scanner, 0o755), 0)
        service = "pam_totp_secretmem_\(getpid())"
        try "auth required \(moduleURL.path) store=\(store.path)\n".write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
    }

    override func tearDown() {
        if !service.isEmpty { unlink("/etc/pam.d/" + service) }
        if let root { removeTemporaryDirectory(root) }
    }

    /// Runs `command` under the scanner; the blocks it reported.
    func scanned(_ command: [String], input: String = "") throws -> [String] {
        let report = root.appendingPathComponent("report-\(UUID().uuidString)").path
        let r = try runCommand(["env", "LD_PRELOAD=" + scanner, "SCAN_SECRET_HEX=" + TestSupport.hex(secret), "SCAN_REPORT=" + report]
                               + command, input: input)
        XCTAssertTrue(r.status == 0 || command.first == "pamtester", "\(command): \(r.stderr)")
        return ((try? String(contentsOfFile: report, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func enrol(_ user: String) throws -> [String] {
        var rng = SplitMix64(seed: 11)
        let (codes, set) = RecoverySet.generate(count: 4, iterations: 1_000, using: &rng)
        try Store(path: Array(store.path.utf8)).write(user: Array(user.utf8), record: UserRecord(uid: getpwnam(user).map { $0.pointee.pw_uid }, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret)], recovery: set))
        return codes.map { String(decoding: $0, as: UTF8.self) }
    }

    func testTheModuleFreesNoSecret() throws {
        let codes = try enrol("nobody")
        awayFromStepBoundary()
        let right = String(decoding: try currentCode(secret), as: UTF8.self)
        for answer in ["000000", "12345678", codes[0], right, "x"] {
            XCTAssertEqual(try scanned(["pamtester", service, "nobody", "authenticate"], input: answer + "\n"), [], "answer \(answer)")
        }
        // A user the record was not enrolled for (another uid): read, then not used.
        try Store(path: Array(store.path.utf8)).write(user: Array("daemon".utf8), record: UserRecord(uid: 4242, factors: [
            try Factor(label: Array("phone".utf8), parameters: .default, created: 1, secret: secret)]))
        XCTAssertEqual(try scanned(["pamtester", service, "daemon", "authenticate"], input: "000000\n"), [], "another account's record")
    }

    func testTotpEnrollFreesNoSecret() throws {
        _ = try enrol("nobody")
        let s = ["--user", "nobody", "--store", store.path]
        for args in [["list"] + s, ["status"] + s, ["recovery-codes"] + s, ["unlock"] + s, ["remove", "phone"] + s] {
            XCTAssertEqual(try scanned([enrollURL.path] + args), [], "\(args)")
            _ = try enrol("nobody")
        }
        let code = String(decoding: try currentCode(secret), as: UTF8.self)
        XCTAssertEqual(try scanned([enrollURL.path, "enroll", "--user", "daemon", "--store", store.path, "--secret", secretB32,
                                    "--code", code, "--quiet", "--qr", "none"]), [], "enroll")
        // import-google-authenticator, from a file the user owns.
        _ = try runCommand([enrollURL.path, "purge", "--user", "daemon", "--store", store.path])
        let home = root.appendingPathComponent("home-daemon")
        XCTAssertEqual(mkdir(home.path, 0o700), 0)
        let file = home.appendingPathComponent(".google_authenticator").path
        try "\(secretB32)\n\" RATE_LIMIT 3 30\n\" WINDOW_SIZE 3\n\" DISALLOW_REUSE\n\" TOTP_AUTH\n12345678\n87654321\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        let daemonUID = try XCTUnwrap(getpwnam("daemon")).pointee.pw_uid
        XCTAssertEqual(chown(home.path, daemonUID, 0), 0)
        XCTAssertEqual(chown(file, daemonUID, 0), 0)
        XCTAssertEqual(chmod(file, 0o400), 0)
        XCTAssertEqual(try scanned([enrollURL.path, "import-google-authenticator", file, "--user", "daemon", "--store", store.path]), [],
                       "import-google-authenticator")
    }

    func testPamTotpdFreesNoSecret() throws {
        let daemon = try DaemonFixture()
        defer { daemon.cleanup() }
        let report = daemon.root.appendingPathComponent("report").path
        try daemon.start(launcher: ["/usr/bin/env", "LD_PRELOAD=" + scanner, "SCAN_SECRET_HEX=" + TestSupport.hex(secret), "SCAN_REPORT=" + report])
        try daemon.enroll("root", uid: 0, secret: secret)
        awayFromStepBoundary()
        var o = ModuleOptions()
        o.store = Array(daemon.store.utf8)
        for (op, answer) in [(DaemonOperation.lookup, ""), (.authenticate, "000000"), (.authenticate, "87654321"),
                             (.authenticate, String(decoding: try currentCode(secret), as: UTF8.self))] {
            let frame = try XCTUnwrap(DaemonRequest(operation: op, service: Array("memory".utf8), user: Array("root".utf8),
                                                    options: o, answer: Array(answer.utf8)).encoded())
            let fd = DaemonTests.connectTo(daemon.socketPath)
            XCTAssertGreaterThanOrEqual(fd, 0)
            XCTAssertTrue(DaemonTests.send(fd, frame))
            XCTAssertNotNil(DaemonTests.readAll(fd))
            close(fd)
        }
        usleep(200_000)
        let found = ((try? String(contentsOfFile: report, encoding: .utf8)) ?? "").split(separator: "\n")
        XCTAssertEqual(found, [], "pam-totpd freed the secret")
    }
}
