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

    // MARK: - Sent codes (issue 36)

    /// free() and realloc() that report every run of 6 to 10 ASCII digits in a block they are
    /// handed (a sent code is 6 to 8 digits; the salt a code is hashed with may put a digit
    /// either side), one line "what size: digits" each, to DIGITS_REPORT. A code is random and
    /// made inside pam-totpd, so the scanner cannot be told it beforehand: the test reads the
    /// code the sender was given and looks for it in these lines afterwards.
    static let digitScannerSource = #"""
        #define _GNU_SOURCE
        #include <fcntl.h>
        #include <malloc.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>
        extern void __libc_free(void *);
        extern void *__libc_realloc(void *, size_t);
        static int ready, out = -1;
        static void setup(void) {
            ready = 1;
            const char *file = getenv("DIGITS_REPORT");
            if (file) out = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
        }
        static void check(void *p, const char *what) {
            if (!ready) setup();
            if (!p || out < 0) return;
            size_t size = malloc_usable_size(p), run = 0;
            const unsigned char *b = p;
            for (size_t i = 0; i <= size; i++) {
                if (i < size && b[i] >= '0' && b[i] <= '9') { run++; continue; }
                if (run >= 6 && run <= 10) {
                    char line[64];
                    int k = snprintf(line, sizeof line, "%s %zu: %.*s\n", what, size, (int)run, (const char *)b + i - run);
                    if (k > 0) (void)!write(out, line, (size_t)k);
                }
                run = 0;
            }
        }
        void free(void *p) { check(p, "free"); __libc_free(p); }
        void *realloc(void *p, size_t n) { check(p, "realloc"); return __libc_realloc(p, n); }
        """#

    /// The digit scanner, built once per test.
    func digitScanner() throws -> String {
        let source = root.appendingPathComponent("digits.c").path
        let library = root.appendingPathComponent("digits.so").path
        if FileManager.default.fileExists(atPath: library) { return library }
        try Self.digitScannerSource.write(toFile: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["gcc", "-shared", "-fPIC", "-O1", "-o", library, source])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        XCTAssertEqual(chmod(library, 0o755), 0)
        return library
    }

    /// An empty report file anyone may append to (a caller without root writes its own);
    /// emptied in place when it exists (a running scanner keeps it open).
    func emptyReport(_ name: String) -> String {
        let path = root.appendingPathComponent(name).path
        if truncate(path, 0) != 0 { FileManager.default.createFile(atPath: path, contents: Data()) }
        chmod(path, 0o666)
        return path
    }

    /// A wrong answer: 6 random digits that are not `code` (and no run a log line or a
    /// time stamp is likely to hold).
    func wrongCode(_ code: String) -> String {
        while true {
            let candidate = String(format: "%06u", UInt32.random(in: 100_000..<1_000_000))
            if candidate != code && Set(candidate).count >= 4 { return candidate }
        }
    }

    /// The lines of `report` that hold one of `codes` (a freed block with a sent or typed code).
    func blocks(in report: String, holding codes: Set<String>) -> [String] {
        let lines = ((try? String(contentsOfFile: report, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        return lines.filter { line in
            guard let digits = line.split(separator: " ").last else { return false }
            return codes.contains { digits.contains($0) }
        }
    }

    /// pam-totpd (sending through a real program as pam-totp-sender), with the digit scanner
    /// in it and in each pamtester (the module): a login whose code is typed back right, one
    /// typed wrong, the same for a caller without root (pam-totpd checks the answer then), a
    /// login within oob_resend_interval asked for the code already sent, and a code typed
    /// after it expired. No freed block of either process may hold a code sent or typed.
    func testSentCodesAreInNoFreedBlockOfPamTotpdOrTheModule() throws {
        let scanner = try digitScanner()
        let daemon = try DaemonFixture()
        defer { daemon.cleanup() }
        let senders = try SenderSpool(in: daemon.root)
        defer { senders.cleanup() }
        // pam-totpd's file sets the limits a caller without root gets: a new code each login
        // (and one number may get them all: the per-destination limits raised too).
        let email = try senders.writeSender("email", try String(contentsOfFile: senders.senders + "/sms", encoding: .utf8))
        try ("store = \(daemon.store)\nsms_command = \(senders.senders)/sms\nemail_command = \(email)\noob_resend_interval = 0\noob_max_per_hour = 32\noob_max_per_day = 32\n"
            + "oob_destination_max_per_hour = 100\noob_destination_max_per_day = 100\n")
            .write(toFile: daemon.config, atomically: true, encoding: .utf8)
        let previousPipe = signal(SIGPIPE, SIG_IGN)  // a pamtester that ended before its answer
        defer { signal(SIGPIPE, previousPipe) }
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
        let daemonReport = emptyReport("daemon-digits")
        try daemon.start(launcher: ["/usr/bin/env", "LD_PRELOAD=" + scanner, "DIGITS_REPORT=" + daemonReport])
        let caller = try ThrowawayAccount(prefix: "tmemoob")
        defer { caller.delete() }
        let number = "+15105551234"
        let s = try Store(path: Array(daemon.store.utf8))
        for (user, uid) in [("nobody", UInt32(65534)), (caller.name, UInt32(caller.uid))] {
            try s.write(user: Array(user.utf8), record: UserRecord(uid: uid, factors: [
                try Factor(outOfBand: .sms, label: Array("mobile".utf8), destination: Array(number.utf8), created: 1_700_000_000)]))
        }
        // An address: the email message is a subject, a blank line and the text, in one buffer.
        try s.write(user: Array("daemon".utf8), record: UserRecord(uid: 1, factors: [
            try Factor(outOfBand: .email, label: Array("mail".utf8), destination: Array("daemon@example.com".utf8), created: 1_700_000_000)]))
        func serviceFile(_ extra: String) throws {
            try "auth required \(moduleURL.path) config=\(daemon.config) store=\(daemon.store) socket=\(daemon.socketPath) max_failures=100 lockout=0 \(extra)\n"
                .write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
            XCTAssertEqual(chmod("/etc/pam.d/" + service, 0o644), 0)
        }

        var sent = Set<String>()
        var found: [String: [String]] = [:]
        /// One pamtester login under the scanner: `answer` the code prompt once a code is there
        /// (nil: end the conversation); `between` runs after the code arrived, before the answer.
        func login(_ name: String, as account: ThrowawayAccount?, user: String = "nobody", answer: (String) -> String?,
                   between: () throws -> Void = {}) throws {
            let report = emptyReport("pamtester-\(name)")
            let before = senders.count
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = (account?.setpriv ?? []) + ["env", "LD_PRELOAD=" + scanner, "DIGITS_REPORT=" + report,
                                                      "pamtester", service, account?.name ?? user, "authenticate"]
            let input = Pipe(), output = Pipe()
            (p.standardInput, p.standardOutput, p.standardError) = (input, output, output)
            let collected = OutputCollector()
            collected.collect(output)
            try p.run()
            // A new code, or the prompt for the one already sent.
            XCTAssertTrue(waitUntil(timeout: 15) { senders.count > before || collected.text.contains("Code sent to") },
                          "\(name): \(collected.text) \(daemon.output)")
            let code = try XCTUnwrap(senders.lastCode, name)
            sent.insert(code)
            XCTAssertTrue(waitUntil(timeout: 15) { collected.text.contains("Code sent to") }, "\(name): \(collected.text)")
            try between()
            if let typed = answer(code) {
                sent.insert(typed)
                try? input.fileHandleForWriting.write(contentsOf: Data((typed + "\n").utf8))
            }
            try input.fileHandleForWriting.close()
            p.waitUntilExit()
            usleep(300_000)  // pam-totpd's worker is done with the request
            found[name] = blocks(in: report, holding: sent)
            found[name + " (pam-totpd)"] = blocks(in: daemonReport, holding: sent)
            _ = emptyReport("daemon-digits")
        }

        // Within oob_resend_interval (root's pam.d line sets it; first, while nothing was sent
        // to nobody yet): the first login ends unanswered, the second is asked for the same
        // code and types it.
        try serviceFile("oob_resend_interval=600")
        try login("root, sent, unanswered", as: nil) { _ in nil }
        let count = senders.count
        try login("root, within oob_resend_interval", as: nil) { $0 }
        XCTAssertEqual(senders.count, count, "nothing new was sent within oob_resend_interval")
        try serviceFile("")
        func wrong(_ code: String) -> String { wrongCode(code) }
        try login("root, right code", as: nil) { $0 }
        try login("root, email, right code", as: nil, user: "daemon") { $0 }
        try login("root, email, wrong code", as: nil, user: "daemon", answer: wrong)
        try login("root, wrong code", as: nil, answer: wrong)
        try login("caller, right code", as: caller) { $0 }
        try login("caller, wrong code", as: caller, answer: wrong)
        // Expired while the prompt waited: the state says so before the answer comes.
        try serviceFile("")
        for account in [nil, caller] as [ThrowawayAccount?] {
            let user = Array((account?.name ?? "nobody").utf8)
            try login("\(account == nil ? "root" : "caller"), expired code", as: account, answer: { $0 }) {
                var state = try s.readState(user: user)
                let p = try XCTUnwrap(state.pending)
                state.pending = PendingCode(binding: p.binding, sentAt: p.sentAt - 1000, expiresAt: p.sentAt - 1, digits: p.digits,
                                            attemptsLeft: p.attemptsLeft, salt: p.salt, hash: p.hash)
                try s.writeStateLocked(user: user, state: state)
            }
        }
        // A sender that prints the message back (a gateway echoing what it got): on success, and
        // on a failure, whose output pam-totpd logs with the code masked out.
        for (name, status) in [("echoing sender", 0), ("echoing sender that fails", 3)] {
            try senders.writeSender("sms", """
                #!/bin/sh
                message=$(cat)
                { printf 'to %s uid %s\\n' "$PAM_TOTP_DESTINATION" "$(id -u)"; printf '%s' "$message"; printf '\\n--\\n'; } >> \(senders.path)
                printf 'gateway got: %s\\n' "$message"
                exit \(status)
                """)
            let before = senders.count
            let report = emptyReport("pamtester-echo")
            _ = try runCommand(["env", "LD_PRELOAD=" + scanner, "DIGITS_REPORT=" + report, "pamtester", service, "nobody", "authenticate"],
                               input: "\n")
            XCTAssertEqual(senders.count, before + 1, "\(name): \(daemon.output)")
            usleep(300_000)
            let code = try XCTUnwrap(senders.lastCode)
            sent.insert(code)
            found[name] = blocks(in: report, holding: sent)
            found[name + " (pam-totpd)"] = blocks(in: daemonReport, holding: sent)
            _ = emptyReport("daemon-digits")
        }
        let freed = found.filter { !$0.value.isEmpty }
        let total = freed.values.reduce(0) { $0 + $1.count }
        XCTAssertEqual(total, 0, "freed blocks holding a sent or typed code: \(freed.sorted { $0.key < $1.key })")
        print("sent-code scanner: \(total) freed blocks held a code; " + found.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.count)" }.joined(separator: ", "))
    }

    /// A one-field login (code_after_password: the code kept in the PAM handle between the two
    /// lines) under the digit scanner: in process as root, and through pam-totpd for a caller
    /// without root asking about its own account. Right, wrong and replayed codes; a wrong
    /// password (the code kept, never checked). No freed block may hold a typed code.
    func testAOneFieldLoginLeavesNoCodeInFreedMemory() throws {
        let scanner = try digitScanner()
        let daemon = try DaemonFixture()
        defer { daemon.cleanup() }
        try "store = \(daemon.store)\nmax_failures = 100\nlockout = 0\n".write(toFile: daemon.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
        try daemon.start()
        let caller = try ThrowawayAccount(prefix: "tmemone")
        defer { caller.delete() }
        let secret = randomTOTPSecret()
        try daemon.enroll("nobody", uid: 65534, secret: secret)
        try daemon.enroll(caller.name, uid: caller.uid, secret: secret)
        // pam_exec stands in for the password module: "pass word" is right.
        let checker = root.appendingPathComponent("password-check").path
        try "#!/bin/sh\n[ \"$(tr -d '\\000')\" = \"pass word\" ]\n".write(toFile: checker, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(checker, 0o755), 0)
        let args = "store=\(daemon.store) socket=\(daemon.socketPath) max_failures=100 lockout=0"
        try """
            auth [success=ok ignore=ignore cred_insufficient=bad default=die] \(moduleURL.path) forward_pass code_after_password \(args)
            auth requisite pam_exec.so expose_authtok quiet \(checker)
            auth required \(moduleURL.path) forward_pass after_password \(args)

            """.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod("/etc/pam.d/" + service, 0o644), 0)
        awayFromStepBoundary(margin: 8)
        let right = try codeNow(secret)
        var typed: Set<String> = [right]
        var found: [String: [String]] = [:]
        for (who, account) in [("root", nil), ("caller", caller)] as [(String, ThrowawayAccount?)] {
            let wrong = wrongCode(right)
            typed.insert(wrong)
            for (name, answer, ok) in [("wrong password", "bad" + right, false), ("wrong code", "pass word" + wrong, false),
                                       ("right code", "pass word" + right, true), ("replayed code", "pass word" + right, false)] {
                let report = emptyReport("one-field")
                let r = try runCommand((account?.setpriv ?? []) + ["env", "LD_PRELOAD=" + scanner, "DIGITS_REPORT=" + report,
                                                                   "pamtester", service, account?.name ?? "nobody", "authenticate"],
                                       input: answer + "\n")
                XCTAssertEqual(r.status == 0, ok, "\(who), \(name): " + r.stdout + r.stderr + daemon.output)
                usleep(200_000)
                found["\(who), \(name)"] = blocks(in: report, holding: typed)
            }
        }
        let freed = found.filter { !$0.value.isEmpty }
        XCTAssertTrue(freed.isEmpty, "freed blocks holding a typed code: \(freed.sorted { $0.key < $1.key })")
    }

    /// totp-enroll add-phone (root for nobody) and pam-totpd, both under the digit scanner: a
    /// wrong code typed, then the right one; no freed block of either holds a code.
    func testTotpEnrollAddPhoneLeavesNoCodeInFreedMemory() throws {
        let scanner = try digitScanner()
        let daemon = try DaemonFixture()
        defer { daemon.cleanup() }
        let senders = try SenderSpool(in: daemon.root)
        defer { senders.cleanup() }
        try "store = \(daemon.store)\nsms_command = \(senders.senders)/sms\nsocket = \(daemon.socketPath)\n"
            .write(toFile: daemon.config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(daemon.config, 0o644), 0)
        let daemonReport = emptyReport("daemon-digits")
        try daemon.start(launcher: ["/usr/bin/env", "LD_PRELOAD=" + scanner, "DIGITS_REPORT=" + daemonReport])
        let report = emptyReport("enroll-digits")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["LD_PRELOAD=" + scanner, "DIGITS_REPORT=" + report, enrollURL.path, "--config", daemon.config,
                       "--user", "nobody", "add-phone", "+15105551234", "--name", "mobile"]
        let input = Pipe(), output = Pipe()
        (p.standardInput, p.standardOutput, p.standardError) = (input, output, output)
        let collected = OutputCollector()
        collected.collect(output)
        try p.run()
        XCTAssertTrue(waitUntil(timeout: 15) { senders.lastCode != nil }, daemon.output + collected.text)
        let code = try XCTUnwrap(senders.lastCode)
        let wrong = wrongCode(code)
        input.fileHandleForWriting.write(Data((wrong + "\n" + code + "\n").utf8))
        try input.fileHandleForWriting.close()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, collected.text)
        XCTAssertEqual(try Store(path: Array(daemon.store.utf8)).read(user: Array("nobody".utf8))?.factors.map(\.kind), [.sms])
        usleep(300_000)
        let inEnroll = blocks(in: report, holding: [code, wrong])
        let inDaemon = blocks(in: daemonReport, holding: [code, wrong])
        print("sent-code scanner, add-phone: totp-enroll \(inEnroll.count), pam-totpd \(inDaemon.count) freed blocks held the code")
        XCTAssertEqual(inEnroll, [], "totp-enroll freed the code")
        XCTAssertEqual(inDaemon, [], "pam-totpd freed the code")
    }
}
