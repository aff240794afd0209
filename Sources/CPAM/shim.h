// CPAM: libpam's module and application headers. pam_prompt/pam_syslog/pam_info are variadic,
// which Swift cannot call, so each gets a fixed "%s" wrapper here, prefixed `cpam_`.
#ifndef PAM_TOTP_CPAM_SHIM_H
#define PAM_TOTP_CPAM_SHIM_H

#define PAM_SM_AUTH
#include <security/pam_appl.h>
#include <security/pam_modules.h>
#include <security/pam_ext.h>
#include <security/pam_modutil.h>
#include <pwd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

// Ask one question through the application's conversation; *answer is malloc'd by libpam.
static inline int cpam_prompt(pam_handle_t *pamh, int style, char **answer, const char *text) {
    return pam_prompt(pamh, style, answer, "%s", text);
}
// Log one line through pam_syslog (facility authpriv unless the caller set another).
static inline void cpam_syslog(pam_handle_t *pamh, int priority, const char *text) {
    pam_syslog(pamh, priority, "%s", text);
}
static inline int cpam_info(pam_handle_t *pamh, const char *text) {
    return pam_info(pamh, "%s", text);
}
// pam_get_item returns const void**; keep the cast in C.
static inline const char *cpam_get_string_item(pam_handle_t *pamh, int item) {
    const void *value = NULL;
    if (pam_get_item(pamh, item, &value) != PAM_SUCCESS) return NULL;
    return (const char *)value;
}

// One code per PAM transaction (PamTOTP/OneVerdict.swift): what pam_totp lines leave in the
// handle with pam_set_data, one malloc'd block freed (zeroed first) by the cleanup below, which
// libpam calls on replacement or at pam_end. It holds no code and no secret: which lines ran
// (their argv, which libpam keeps for the handle's life, one array per line) and, once a line
// accepted a code, when and for what key (backend, store, socket, service, user). A one-prompt
// stack's forward_pass line also leaves what the `after_password` line after the password
// module must do (kind): send a code, or let the user through because the line was ignored.
#define CPAM_VERDICT_NAME "pam_totp_verified"
#define CPAM_VERDICT_LINES 32
#define CPAM_VERDICT_CODE 1     // a code was accepted
#define CPAM_VERDICT_SEND 2     // forward_pass, a user with sent codes only: send one after the password
#define CPAM_VERDICT_IGNORED 3  // forward_pass returned PAM_IGNORE (nullok, exempt)
struct cpam_verdict {
    long long at_ms;                          // when the verdict was left (monotonic clock)
    int kind;                                 // CPAM_VERDICT_*; 0 with key_length 0
    unsigned lines;                           // entries used in line[]
    const void *line[CPAM_VERDICT_LINES];     // the lines that ran since pam_authenticate began
    size_t key_length;                        // 0: no code accepted
    unsigned char key[];
};
static inline void cpam_verdict_free(pam_handle_t *pamh, void *data, int status) {
    (void)pamh; (void)status;
    if (!data) return;
    size_t n = sizeof(struct cpam_verdict) + ((struct cpam_verdict *)data)->key_length;
    memset(data, 0, n);
    __asm__ __volatile__("" : : "r"(data) : "memory");  // the memset stays: the block is read after it
    free(data);
}
static inline long long cpam_verdict_now_ms(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return -1;
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}
static inline struct cpam_verdict *cpam_verdict_get(pam_handle_t *pamh) {
    const void *data = NULL;
    if (pam_get_data(pamh, CPAM_VERDICT_NAME, &data) != PAM_SUCCESS) return NULL;
    return (struct cpam_verdict *)data;
}
static inline void cpam_verdict_forget(pam_handle_t *pamh) {
    if (cpam_verdict_get(pamh)) (void)pam_set_data(pamh, CPAM_VERDICT_NAME, NULL, NULL);
}
// A new block: the lines of `from` (if any) and `line`, and the key (key_length 0: none). If
// `line` cannot be noted, nothing is kept: a verdict must always name the line that left it.
static inline int cpam_verdict_set(pam_handle_t *pamh, const struct cpam_verdict *from, const void *line,
                                   const unsigned char *key, size_t key_length, long long at_ms, int kind) {
    if (key_length > 65536 || (key_length && !key)) { cpam_verdict_forget(pamh); return PAM_BUF_ERR; }
    struct cpam_verdict *v = (struct cpam_verdict *)calloc(1, sizeof *v + key_length);
    if (!v) { cpam_verdict_forget(pamh); return PAM_BUF_ERR; }
    unsigned n = 0;
    int noted = 0;
    for (unsigned i = 0; from && i < from->lines && i < CPAM_VERDICT_LINES; i++) {
        v->line[n++] = from->line[i];
        if (from->line[i] == line) noted = 1;
    }
    if (!noted) {
        if (n >= CPAM_VERDICT_LINES) { free(v); cpam_verdict_forget(pamh); return PAM_BUF_ERR; }
        v->line[n++] = line;
    }
    v->lines = n;
    v->at_ms = at_ms;
    v->kind = key_length ? kind : 0;
    v->key_length = key_length;
    if (key_length) memcpy(v->key, key, key_length);
    int rc = pam_set_data(pamh, CPAM_VERDICT_NAME, v, cpam_verdict_free);  // frees `from`
    if (rc != PAM_SUCCESS) { cpam_verdict_free(pamh, v, 0); cpam_verdict_forget(pamh); }
    return rc;
}
// First thing in every pam_sm_authenticate: a line that already ran on this handle means a new
// pam_authenticate began (libpam runs a line once per pass), so everything left is dropped;
// then this line is noted. (Lines without arguments all have argv NULL: one such line after
// another looks like a new pass, which only means asking again.)
static inline void cpam_verdict_line(pam_handle_t *pamh, const void *line) {
    struct cpam_verdict *v = cpam_verdict_get(pamh);
    if (v) {
        for (unsigned i = 0; i < v->lines && i < CPAM_VERDICT_LINES; i++) {
            if (v->line[i] == line) { v = NULL; break; }
        }
        if (v && v->lines < CPAM_VERDICT_LINES) { v->line[v->lines++] = line; return; }
        cpam_verdict_forget(pamh);
    }
    (void)cpam_verdict_set(pamh, NULL, line, NULL, 0, 0, 0);
}
// The kind of verdict a line of this pass left for exactly this key, at most window_ms ago (by
// the monotonic clock; without a clock, none): CPAM_VERDICT_*, 0 for none.
static inline int cpam_verdict_kind(pam_handle_t *pamh, const unsigned char *key, size_t key_length, long long window_ms) {
    const struct cpam_verdict *v = cpam_verdict_get(pamh);
    long long now_ms = cpam_verdict_now_ms();
    int same = v && key && v->key_length && v->key_length == key_length && now_ms >= 0 && v->at_ms >= 0
        && now_ms >= v->at_ms && now_ms - v->at_ms <= window_ms && memcmp(v->key, key, key_length) == 0;
    return same ? v->kind : 0;
}
// After an accepted code (or a forward_pass line's word to its after_password line): the
// verdict for this key, keeping the lines noted so far.
static inline int cpam_verdict_keep(pam_handle_t *pamh, const void *line, const unsigned char *key, size_t key_length,
                                    int kind) {
    if (!key_length) return PAM_BUF_ERR;
    return cpam_verdict_set(pamh, cpam_verdict_get(pamh), line, key, key_length, cpam_verdict_now_ms(), kind);
}

#endif
