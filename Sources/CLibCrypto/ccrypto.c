// See include/ccrypto.h: libcrypto, loaded at run time by the first encrypted PSKC file.
#include "ccrypto.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>

typedef void EVP_CIPHER_CTX;
typedef void EVP_CIPHER;
typedef void EVP_MD;
typedef void ENGINE;

static struct {
    EVP_CIPHER_CTX *(*EVP_CIPHER_CTX_new)(void);
    void (*EVP_CIPHER_CTX_free)(EVP_CIPHER_CTX *c);
    int (*EVP_DecryptInit_ex)(EVP_CIPHER_CTX *c, const EVP_CIPHER *t, ENGINE *e, const unsigned char *k, const unsigned char *iv);
    int (*EVP_DecryptUpdate)(EVP_CIPHER_CTX *c, unsigned char *out, int *outl, const unsigned char *in, int inl);
    int (*EVP_DecryptFinal_ex)(EVP_CIPHER_CTX *c, unsigned char *out, int *outl);
    const EVP_CIPHER *(*EVP_aes_128_cbc)(void);
    const EVP_CIPHER *(*EVP_aes_192_cbc)(void);
    const EVP_CIPHER *(*EVP_aes_256_cbc)(void);
    const EVP_MD *(*EVP_sha1)(void);
    const EVP_MD *(*EVP_sha256)(void);
    const EVP_MD *(*EVP_sha512)(void);
    int (*PKCS5_PBKDF2_HMAC)(const char *pass, int passlen, const unsigned char *salt, int saltlen, int iter,
                             const EVP_MD *digest, int keylen, unsigned char *out);
} c;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int loaded;

static void load(void) {
    // The soname Debian's libssl3 installs; RTLD_LOCAL keeps its symbols out of the global scope.
    void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "%s", e ? e : "libcrypto.so.3: cannot be loaded");
        return;
    }
#define LOOKUP(name) \
    *(void **)(&c.name) = dlsym(h, #name); \
    if (c.name == NULL) { snprintf(load_error, sizeof load_error, "libcrypto.so.3 has no %s", #name); return; }
    LOOKUP(EVP_CIPHER_CTX_new) LOOKUP(EVP_CIPHER_CTX_free) LOOKUP(EVP_DecryptInit_ex) LOOKUP(EVP_DecryptUpdate)
    LOOKUP(EVP_DecryptFinal_ex) LOOKUP(EVP_aes_128_cbc) LOOKUP(EVP_aes_192_cbc) LOOKUP(EVP_aes_256_cbc)
    LOOKUP(EVP_sha1) LOOKUP(EVP_sha256) LOOKUP(EVP_sha512) LOOKUP(PKCS5_PBKDF2_HMAC)
#undef LOOKUP
    loaded = 1;
}

int ccrypto_load(char *why, size_t why_size) {
    pthread_once(&once, load);
    if (loaded) return 0;
    if (why != NULL && why_size > 0) snprintf(why, why_size, "%s", load_error);
    return -1;
}

int ccrypto_aes_cbc_decrypt(const uint8_t *key, size_t key_length, const uint8_t *iv,
                            const uint8_t *in, size_t in_length, uint8_t *out, size_t *out_length) {
    if (ccrypto_load(NULL, 0) != 0 || key == NULL || iv == NULL || in == NULL || out == NULL || out_length == NULL) return -1;
    if (in_length == 0 || in_length % 16 != 0 || in_length > (size_t)INT_MAX - 32) return -1;
    const EVP_CIPHER *cipher = key_length == 16 ? c.EVP_aes_128_cbc() : key_length == 24 ? c.EVP_aes_192_cbc()
                             : key_length == 32 ? c.EVP_aes_256_cbc() : NULL;
    if (cipher == NULL) return -1;
    EVP_CIPHER_CTX *ctx = c.EVP_CIPHER_CTX_new();
    if (ctx == NULL) return -1;
    int n = 0, m = 0, rc = -1;
    // With padding on, DecryptUpdate holds the last block back, so it writes at most
    // in_length - 16 bytes and DecryptFinal at most 15 more: `out` of in_length bytes suffices.
    if (c.EVP_DecryptInit_ex(ctx, cipher, NULL, key, iv) == 1 &&
        c.EVP_DecryptUpdate(ctx, out, &n, in, (int)in_length) == 1 && n >= 0 && (size_t)n <= in_length &&
        c.EVP_DecryptFinal_ex(ctx, out + n, &m) == 1 && m >= 0 && (size_t)n + (size_t)m <= in_length) {
        *out_length = (size_t)n + (size_t)m;
        rc = 0;
    }
    c.EVP_CIPHER_CTX_free(ctx);  // cleanses the key schedule
    return rc;
}

int ccrypto_pbkdf2(const uint8_t *password, size_t password_length, const uint8_t *salt, size_t salt_length,
                   unsigned iterations, int prf, uint8_t *out, size_t out_length) {
    if (ccrypto_load(NULL, 0) != 0 || out == NULL || password_length > INT_MAX || salt_length > INT_MAX
        || out_length == 0 || out_length > INT_MAX || iterations == 0 || iterations > INT_MAX) return -1;
    const EVP_MD *md = prf == 1 ? c.EVP_sha1() : prf == 256 ? c.EVP_sha256() : prf == 512 ? c.EVP_sha512() : NULL;
    if (md == NULL) return -1;
    static const uint8_t empty[1] = {0};
    return c.PKCS5_PBKDF2_HMAC((const char *)(password ? password : empty), (int)password_length, salt ? salt : empty,
                               (int)salt_length, (int)iterations, md, (int)out_length, out) == 1 ? 0 : -1;
}
