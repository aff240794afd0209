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

// pam_set_data/pam_get_data with a C string: the verdict one pam_totp line leaves for a later
// one in the same transaction (PamTOTP/OneVerdict.swift). libpam calls the cleanup at pam_end
// or on replacement; it zeroes the string before freeing it.
static inline void cpam_wipe_free(pam_handle_t *pamh, void *data, int status) {
    (void)pamh; (void)status;
    if (!data) return;
    volatile char *p = (volatile char *)data;
    while (*p) *p++ = 0;
    free(data);
}
static inline int cpam_set_string_data(pam_handle_t *pamh, const char *name, const char *value) {
    char *copy = strdup(value);
    if (!copy) return PAM_BUF_ERR;
    int rc = pam_set_data(pamh, name, copy, cpam_wipe_free);
    if (rc != PAM_SUCCESS) free(copy);
    return rc;
}
static inline const char *cpam_get_string_data(pam_handle_t *pamh, const char *name) {
    const void *value = NULL;
    if (pam_get_data(pamh, name, &value) != PAM_SUCCESS) return NULL;
    return (const char *)value;
}
static inline int cpam_clear_data(pam_handle_t *pamh, const char *name) {
    return pam_set_data(pamh, name, NULL, NULL);
}

#endif
