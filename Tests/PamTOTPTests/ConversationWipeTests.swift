import Foundation
import TestSupport
import XCTest

/// Security rule 9: the module zeroes a conversation reply before it frees it, all of it. A small
/// C program runs one login through the real libpam (pam_start_confdir, a service file in a
/// temporary directory) and replaces free(3): when the module frees the reply the conversation
/// handed it, the program counts the reply's bytes that are not zero. Review finding: only the
/// first 1,025 bytes were wiped (the length was taken with strnlen(reply, 1025)), so the rest of
/// an overlong reply stayed in the host's freed heap.
final class ConversationWipeTests: XCTestCase {
    var root: URL!

    override func setUpWithError() throws {
        root = try makeTemporaryDirectory("pam_totp_wipe")
    }

    override func tearDown() {
        if let root { removeTemporaryDirectory(root) }
    }

    /// `driver CONFDIR SERVICE USER LENGTH`: answers the prompt with LENGTH digits, and prints
    /// "left N" (the reply's bytes still non-zero when the module freed it; -1 if it never did)
    /// and the PAM result.
    static let driverSource = #"""
        #include <security/pam_appl.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>

        extern void __libc_free(void *);
        static void *watched;
        static size_t watched_length;
        static long left = -1;

        /* Every free in the process comes here (the program is linked with -rdynamic). */
        void free(void *p) {
            if (p && p == watched) {
                left = 0;
                for (size_t i = 0; i < watched_length; i++) if (((unsigned char *)p)[i]) left++;
                watched = NULL;
            }
            __libc_free(p);
        }

        static int converse(int n, const struct pam_message **msg, struct pam_response **resp, void *data) {
            if (n != 1) return PAM_CONV_ERR;
            size_t length = (size_t)atol((const char *)data);
            struct pam_response *r = calloc(1, sizeof *r);
            char *reply = malloc(length + 1);
            if (!r || !reply) return PAM_BUF_ERR;
            for (size_t i = 0; i < length; i++) reply[i] = (char)('0' + i % 10);
            reply[length] = 0;
            r[0].resp = reply;
            watched = reply;
            watched_length = length;
            *resp = r;
            return PAM_SUCCESS;
        }

        static void no_delay(int status, unsigned int usec, void *appdata) {
            (void)status; (void)usec; (void)appdata;
        }

        int main(int argc, char **argv) {
            if (argc != 5) return 2;
            struct pam_conv conv = { converse, argv[4] };
            pam_handle_t *h = NULL;
            if (pam_start_confdir(argv[2], argv[3], &conv, argv[1], &h) != PAM_SUCCESS) return 3;
            pam_set_item(h, PAM_FAIL_DELAY, (const void *)no_delay);
            int rc = pam_authenticate(h, 0);
            pam_end(h, rc);
            printf("left %ld rc %d\n", left, rc);
            return 0;
        }
        """#

    func testEveryByteOfAnOverlongReplyIsWipedBeforeItIsFreed() throws {
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        let source = root.appendingPathComponent("wipe_driver.c")
        let driver = root.appendingPathComponent("wipe_driver").path
        try Self.driverSource.write(to: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["cc", "-O1", "-Wall", "-rdynamic", "-o", driver, source.path, "-lpam"])
        XCTAssertEqual(cc.status, 0, cc.stderr)

        let store = root.appendingPathComponent("store").path
        let confdir = root.appendingPathComponent("pam.d").path
        let config = root.appendingPathComponent("pam_totp.conf").path
        XCTAssertEqual(mkdir(store, 0o700), 0)
        XCTAssertEqual(mkdir(confdir, 0o755), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: config, contents: Data(), attributes: [.posixPermissions: 0o644]))
        // An unenrolled user without nullok is asked and denied like a wrong code.
        try "auth required \(moduleURL.path) store=\(store) config=\(config)\n"
            .write(toFile: confdir + "/wipe", atomically: true, encoding: .utf8)

        // A code-sized reply, one at the longest answer (1,024), and overlong ones.
        for length in [6, 1_024, 1_100, 4_000] {
            let r = try runCommand([driver, confdir, "wipe", "nobody", String(length)])
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stdout, "left 0 rc 7\n", "a reply of \(length) bytes: every byte zero when freed, and denied")
        }
    }

    /// `driver CONFDIR SERVICE USER ANSWER` for a first-login enrolment: copies every block
    /// the process frees, takes the key shown in the conversation ("Key: ..."), answers ANSWER
    /// ("right": the code oathtool computes from that key), then prints how many freed blocks
    /// still held the raw secret.
    static let enrolDriverSource = #"""
#define _GNU_SOURCE
#include <security/pam_appl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>

extern void __libc_free(void *);
static unsigned char *trail;
static size_t trail_len;
static const size_t trail_cap = (size_t)256 << 20;
static unsigned char secret[64];
static size_t secret_len;

/* Every block freed in the process is copied to `trail` first (the program is linked with -rdynamic). */
void free(void *p) {
    if (p) {
        if (!trail) {
            void *m = mmap(NULL, trail_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            trail = m == MAP_FAILED ? NULL : m;
        }
        size_t n = malloc_usable_size(p);
        if (trail && trail_len + n + 1 <= trail_cap) {
            memcpy(trail + trail_len, p, n);
            trail_len += n;
            trail[trail_len++] = 0;
        }
    }
    __libc_free(p);
}

static int b32(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= '2' && c <= '7') return c - '2' + 26;
    return -1;
}

static int converse(int n, const struct pam_message **msg, struct pam_response **resp, void *data) {
    struct pam_response *r = calloc((size_t)n, sizeof *r);
    if (!r) return PAM_BUF_ERR;
    for (int i = 0; i < n; i++) {
        const char *text = msg[i]->msg;
        const char *key = text ? strstr(text, "Key: ") : NULL;
        if (key && secret_len == 0) {
            unsigned long buffer = 0; int bits = 0;
            for (const char *c = key + 5; *c && *c != '\n'; c++) {
                int v = b32(*c);
                if (v < 0) continue;
                buffer = (buffer << 5) | (unsigned long)v; bits += 5;
                if (bits >= 8) { secret[secret_len++] = (unsigned char)(buffer >> (bits - 8)); bits -= 8; }
                if (secret_len == sizeof secret) break;
            }
        }
        if (msg[i]->msg_style == PAM_PROMPT_ECHO_OFF || msg[i]->msg_style == PAM_PROMPT_ECHO_ON) {
            const char *answer = (const char *)data;
            char code[16];
            if (strcmp(answer, "right") == 0 && secret_len > 0) {
                /* The code the scanned key shows now, from oathtool (RFC 6238, SHA-1, 6 digits, 30 s). */
                char command[256] = "oathtool --totp ";
                for (size_t b = 0; b < secret_len; b++) snprintf(command + strlen(command), 3, "%02x", secret[b]);
                FILE *o = popen(command, "r");
                if (!o || !fgets(code, sizeof code, o)) code[0] = 0;
                if (o) pclose(o);
                code[strcspn(code, "\n")] = 0;
                answer = code;
            }
            r[i].resp = strdup(answer);
        }
    }
    *resp = r;
    return PAM_SUCCESS;
}

static void no_delay(int status, unsigned int usec, void *appdata) { (void)status; (void)usec; (void)appdata; }

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    struct pam_conv conv = { converse, argv[4] };
    pam_handle_t *h = NULL;
    if (pam_start_confdir(argv[2], argv[3], &conv, argv[1], &h) != PAM_SUCCESS) return 3;
    pam_set_item(h, PAM_FAIL_DELAY, (const void *)no_delay);
    int rc = pam_authenticate(h, 0);
    pam_end(h, rc);
    long hits = 0;
    if (secret_len >= 10 && trail) {
        for (const unsigned char *p = trail; (p = memmem(p, trail_len - (size_t)(p - trail), secret, secret_len)) != NULL; p++) hits++;
    }
    printf("secret %zu freed-unwiped %ld rc %d\n", secret_len, hits, rc);
    return 0;
}
"""#

    /// The secret and the URI's copy of it shared one buffer, so wiping the secret wiped a
    /// fresh copy and the key itself was freed as it was. After a wrong code, and after an
    /// enrolment that saved the factor, no freed block holds the secret.
    func testAFirstLoginEnrolmentFreesNoUnwipedSecret() throws {
        XCTAssertTrue(FileManager.default.fileExists(atPath: moduleURL.path), "build the module first: \(moduleURL.path)")
        let source = root.appendingPathComponent("enrol_driver.c")
        let driver = root.appendingPathComponent("enrol_driver").path
        try Self.enrolDriverSource.write(to: source, atomically: true, encoding: .utf8)
        let cc = try runCommand(["cc", "-O1", "-Wall", "-rdynamic", "-o", driver, source.path, "-lpam"])
        XCTAssertEqual(cc.status, 0, cc.stderr)
        let store = root.appendingPathComponent("store").path
        let confdir = root.appendingPathComponent("pam.d").path
        let config = root.appendingPathComponent("pam_totp.conf").path
        XCTAssertEqual(mkdir(store, 0o700), 0)
        XCTAssertEqual(mkdir(confdir, 0o755), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: config, contents: Data(), attributes: [.posixPermissions: 0o644]))
        try "auth required \(moduleURL.path) store=\(store) config=\(config) enroll_at_login=2999-12-31\n"
            .write(toFile: confdir + "/enrol", atomically: true, encoding: .utf8)
        let wrong = try runCommand([driver, confdir, "enrol", "nobody", "000000"])
        XCTAssertEqual(wrong.stdout, "secret 20 freed-unwiped 0 rc 7\n", "a wrong code: " + wrong.stderr)
        awayFromStepBoundary()
        let right = try runCommand([driver, confdir, "enrol", "nobody", "right"])
        XCTAssertEqual(right.stdout, "secret 20 freed-unwiped 0 rc 0\n", "an enrolment: " + right.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: store + "/nobody"), "the factor was saved")
    }
}
