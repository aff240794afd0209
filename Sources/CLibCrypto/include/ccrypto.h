// libcrypto (OpenSSL 3, Debian libssl3) for totp-enroll import-pskc: AES-CBC and PBKDF2, loaded
// at run time (dlopen) by the first encrypted PSKC file, so that the package depends on no TLS
// library (a new admin's trial: the base package pulls no libssl, libpq or Kerberos). Only
// totp-enroll uses it: never pam_totp.so, never pam-totpd, never the library targets. No
// OpenSSL header is needed: the few functions are declared here by their stable ABI.
#ifndef CCRYPTO_H
#define CCRYPTO_H
#include <stddef.h>
#include <stdint.h>

/// Loads libcrypto.so.3 once (thread-safe). 0: loaded; -1: not, with the reason in `why`.
int ccrypto_load(char *why, size_t why_size);

/// AES-CBC decryption with PKCS#7 padding removed: `key_length` 16, 24 or 32 bytes, a 16-byte
/// `iv`, `in_length` a multiple of 16; `out` has room for `in_length` bytes. 0 with the
/// plaintext's length in `*out_length`; -1 on any failure (bad padding included).
int ccrypto_aes_cbc_decrypt(const uint8_t *key, size_t key_length, const uint8_t *iv,
                            const uint8_t *in, size_t in_length, uint8_t *out, size_t *out_length);

/// PBKDF2 (RFC 8018) with HMAC-`prf`: 1 SHA-1, 256 SHA-256, 512 SHA-512. 0: `out_length`
/// bytes written; -1: failure.
int ccrypto_pbkdf2(const uint8_t *password, size_t password_length, const uint8_t *salt, size_t salt_length,
                   unsigned iterations, int prf, uint8_t *out, size_t out_length);

#endif
