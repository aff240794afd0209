/* scripts/bench-module-floor.c: for scripts/bench.sh only (never installed). The floor under the
 * module side of the daemon path: a PAM module in C that does what any module taking this path
 * must do and nothing else. It is linked against libpam like a real module, gets the user, asks
 * one question through the conversation, sends one request frame of the same shape as
 * pam_totp.so's to pam-totpd's socket (argument socket=PATH) and reads the reply, clears the
 * answer, and logs one line with pam_syslog. It checks nothing and answers PAM_SUCCESS: its
 * instruction count is what the module's work costs at the least, in C. */
#include <security/pam_modules.h>
#include <security/pam_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

static size_t put_short(unsigned char *b, size_t at, const char *s, size_t width) {
    size_t n = strlen(s);
    if (n > 64) n = 64;
    if (width == 2) b[at++] = 0;
    b[at++] = (unsigned char)n;
    memcpy(b + at, s, n);
    return at + n;
}

int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    const char *user = NULL, *path = NULL;
    char *answer = NULL;
    unsigned char frame[512], reply[512];
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    size_t n = 6;
    (void)flags;
    for (int i = 0; i < argc; i++)
        if (strncmp(argv[i], "socket=", 7) == 0) path = argv[i] + 7;
    if (path == NULL || strlen(path) >= sizeof addr.sun_path) return PAM_SERVICE_ERR;
    if (pam_get_user(pamh, &user, NULL) != PAM_SUCCESS || user == NULL) return PAM_AUTH_ERR;
    if (pam_prompt(pamh, PAM_PROMPT_ECHO_OFF, &answer, "Verification code: ") != PAM_SUCCESS || answer == NULL)
        return PAM_AUTH_ERR;
    /* "PTQ4", a length, then op 2 (authenticate), 20 bytes of options, service, user, store, answer, previous. */
    memcpy(frame, "PTQ4", 4);
    memset(frame + n, 0, 22);
    frame[n] = 2;
    frame[n + 2] = 5;
    n += 22;
    n = put_short(frame, n, "pam_totp_bench", 1);
    n = put_short(frame, n, user, 1);
    n = put_short(frame, n, "", 2);
    n = put_short(frame, n, answer, 2);
    n = put_short(frame, n, "", 2);
    frame[4] = (unsigned char)((n - 6) >> 8);
    frame[5] = (unsigned char)(n - 6);
    strcpy(addr.sun_path, path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
        if (connect(s, (struct sockaddr *)&addr, sizeof addr) == 0 && write(s, frame, n) == (ssize_t)n)
            (void)read(s, reply, sizeof reply);
        close(s);
    }
    explicit_bzero(answer, strlen(answer));
    explicit_bzero(frame, sizeof frame);
    free(answer);
    pam_syslog(pamh, LOG_INFO, "accepted code for user %s (factor %s)", user, "phone");
    return PAM_SUCCESS;
}

int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags; (void)argc; (void)argv;
    return PAM_SUCCESS;
}
