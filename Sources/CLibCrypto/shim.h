// CLibCrypto: OpenSSL's libcrypto (Debian libssl-dev), for AES-CBC and PBKDF2 in
// totp-enroll import-pskc. Only totp-enroll imports it: never the module (pam_totp.so),
// never pam-totpd, never the library targets.
#ifndef PAM_TOTP_CLIBCRYPTO_SHIM_H
#define PAM_TOTP_CLIBCRYPTO_SHIM_H
#include <openssl/evp.h>
#endif
