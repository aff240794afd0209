// CModuleSupport: nothing to call. pam_totp.so links this target so that a few libc functions
// are its own (see module_support.c): no header declarations are needed; the compiler and the
// C shims already call these functions by their standard names.
#ifndef PAM_TOTP_MODULE_SUPPORT_H
#define PAM_TOTP_MODULE_SUPPORT_H
#endif
