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

// One login, one verdict (PamTOTP/OneVerdict.swift; docs/ARCHITECTURE.md, section 4, rule 20): what the
// first pam_totp line that decides leaves in the handle with pam_set_data, one malloc'd block
// freed (zeroed first) by the cleanup below, which libpam calls on replacement or at pam_end. It
// holds no code and no secret: the PAM code that line returned and what it was for (the key:
// backend, store, socket, service, user).
//
// Which pam_authenticate a verdict belongs to is marked in PAM_OLDAUTHTOK: libpam clears that item
// before and after every pam_authenticate (and pam_chauthtok), only modules can read or set it,
// and authentication modules do not use it (it is the old password of a password change). The
// first pam_totp line of a pass finds it unset, drops any verdict left and sets the mark; a later
// line of the same pass finds the mark. A value another module put there is left alone, and then
// no verdict is kept (every line decides alone, as if it were the only one).
#define CPAM_VERDICT_NAME "pam_totp_verdict"
#define CPAM_PASS_MARK "pam_totp: one verdict per pam_authenticate"
//
// A code_after_password line (a one-field stack's line before the password module) decides
// nothing: it leaves PAM_IGNORE and the code it split off the answer (`deferred`, at most 8
// digits, possibly none: an empty answer) for the after_password line after the password
// module, which checks it. The block is zeroed before it is freed, and replaced (so the code is
// gone) when that line decides.
#define CPAM_DEFERRED_MAX 8
struct cpam_verdict {
    int code;                                 // the PAM code the deciding line returned
    int deferred_set;                         // 1: a code (of deferred_length bytes) waits for the after_password line
    size_t deferred_length;
    unsigned char deferred[CPAM_DEFERRED_MAX];
    size_t key_length;
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
static inline struct cpam_verdict *cpam_verdict_get(pam_handle_t *pamh) {
    const void *data = NULL;
    if (pam_get_data(pamh, CPAM_VERDICT_NAME, &data) != PAM_SUCCESS) return NULL;
    return (struct cpam_verdict *)data;
}
static inline void cpam_verdict_forget(pam_handle_t *pamh) {
    if (cpam_verdict_get(pamh)) (void)pam_set_data(pamh, CPAM_VERDICT_NAME, NULL, NULL);
}
// Whether PAM_OLDAUTHTOK holds this module's mark (this pam_authenticate was marked by a line).
static inline int cpam_pass_marked(pam_handle_t *pamh) {
    const void *item = NULL;
    if (pam_get_item(pamh, PAM_OLDAUTHTOK, &item) != PAM_SUCCESS || !item) return 0;
    const size_t n = sizeof CPAM_PASS_MARK;  // with its NUL
    return strnlen((const char *)item, n) == n - 1 && memcmp(item, CPAM_PASS_MARK, n) == 0;
}
// First thing in every pam_sm_authenticate. Returns 1 when a line before this one marked this
// pam_authenticate (its verdict, if any, stands); otherwise drops what an earlier
// pam_authenticate left, marks this one if PAM_OLDAUTHTOK is free, and returns 0.
static inline int cpam_pass_begin(pam_handle_t *pamh) {
    if (cpam_pass_marked(pamh)) return 1;
    cpam_verdict_forget(pamh);
    const void *item = NULL;
    if (pam_get_item(pamh, PAM_OLDAUTHTOK, &item) == PAM_SUCCESS && !item)
        (void)pam_set_item(pamh, PAM_OLDAUTHTOK, CPAM_PASS_MARK);
    return 0;
}
// The PAM code a line of this pam_authenticate left for this key, which is the base (backend,
// store, socket, service, user: `base_length` bytes), a NUL, then the line's strength (the
// settings that make a code harder to pass: kinds, window, failures, lockout); -1 for none.
// `any`: whatever was left for the base (the after_password line reads its forward_pass line's
// word). Otherwise a failure binds whatever the strength (it can only deny); a success only a
// line of the same strength (a stricter line asks for its own code); PAM_IGNORE never (a
// later line decides by its own nullok and exempt).
static inline int cpam_verdict_code(pam_handle_t *pamh, const unsigned char *key, size_t key_length, size_t base_length, int any) {
    if (!cpam_pass_marked(pamh) || !key || base_length >= key_length || key[base_length] != 0) return -1;
    const struct cpam_verdict *v = cpam_verdict_get(pamh);
    if (!v || v->key_length <= base_length || v->key[base_length] != 0 || memcmp(v->key, key, base_length) != 0) return -1;
    if (any) return v->code;
    // A code waits for the after_password line: any other pam_totp line for the same user before
    // that line has run denies (it cannot tell whether the password was checked: fail closed).
    if (v->deferred_set) return PAM_AUTH_ERR;
    if (v->code == PAM_IGNORE) return -1;
    if (v->code != PAM_SUCCESS) return v->code;
    return v->key_length == key_length && memcmp(v->key, key, key_length) == 0 ? v->code : -1;
}
// The verdict of the line that decided: kept only in a marked pam_authenticate (otherwise no
// later line could tell it from an earlier pass's). Replaces any verdict left for another key.
// `deferred_set`: the code a code_after_password line leaves for the after_password line,
// `deferred_length` bytes at `deferred` (0: an empty answer; it is still checked there).
static inline int cpam_verdict_keep(pam_handle_t *pamh, const unsigned char *key, size_t key_length, int code,
                                    const unsigned char *deferred, size_t deferred_length, int deferred_set) {
    if (!key_length || !key || key_length > 65536 || !cpam_pass_marked(pamh) || deferred_length > CPAM_DEFERRED_MAX
        || (deferred_length && !deferred)) return PAM_BUF_ERR;
    struct cpam_verdict *v = (struct cpam_verdict *)calloc(1, sizeof *v + key_length);
    if (!v) { cpam_verdict_forget(pamh); return PAM_BUF_ERR; }
    v->code = code;
    if (deferred_length) memcpy(v->deferred, deferred, deferred_length);
    v->deferred_length = deferred_length;
    v->deferred_set = deferred_set ? 1 : 0;
    v->key_length = key_length;
    memcpy(v->key, key, key_length);
    int rc = pam_set_data(pamh, CPAM_VERDICT_NAME, v, cpam_verdict_free);  // frees the old block
    if (rc != PAM_SUCCESS) { cpam_verdict_free(pamh, v, 0); cpam_verdict_forget(pamh); }
    return rc;
}
// The code a code_after_password line of this pam_authenticate left for this base (copied to
// `out`, which holds CPAM_DEFERRED_MAX bytes; NULL: only whether there is one is asked): its
// length (0 for an empty answer), -1 for none.
static inline int cpam_verdict_deferred(pam_handle_t *pamh, const unsigned char *key, size_t key_length, size_t base_length,
                                        unsigned char *out) {
    if (!cpam_pass_marked(pamh) || !key || base_length >= key_length || key[base_length] != 0) return -1;
    const struct cpam_verdict *v = cpam_verdict_get(pamh);
    if (!v || !v->deferred_set || v->deferred_length > CPAM_DEFERRED_MAX || v->key_length <= base_length
        || v->key[base_length] != 0 || memcmp(v->key, key, base_length) != 0) return -1;
    if (out && v->deferred_length) memcpy(out, v->deferred, v->deferred_length);
    return (int)v->deferred_length;
}

#endif
