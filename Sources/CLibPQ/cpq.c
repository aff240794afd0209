// See include/cpq.h: libpq, loaded at run time by the first fleet-mode operation.
#define _GNU_SOURCE
#include "cpq.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CPQ_FUNCTIONS(X) \
    X(PGconn *, PQconnectStartParams, (const char *const *k, const char *const *v, int e), (k, v, e)) \
    X(PostgresPollingStatusType, PQconnectPoll, (PGconn *c), (c)) \
    X(ConnStatusType, PQstatus, (const PGconn *c), (c)) \
    X(int, PQsocket, (const PGconn *c), (c)) \
    X(char *, PQerrorMessage, (const PGconn *c), (c)) \
    X(int, PQsendQuery, (PGconn *c, const char *q), (c, q)) \
    X(int, PQsendQueryParams, (PGconn *c, const char *q, int n, const Oid *t, const char *const *v, const int *l, \
                               const int *f, int r), (c, q, n, t, v, l, f, r)) \
    X(int, PQflush, (PGconn *c), (c)) \
    X(int, PQisBusy, (PGconn *c), (c)) \
    X(int, PQconsumeInput, (PGconn *c), (c)) \
    X(PGresult *, PQgetResult, (PGconn *c), (c)) \
    X(ExecStatusType, PQresultStatus, (const PGresult *r), (r)) \
    X(int, PQntuples, (const PGresult *r), (r)) \
    X(int, PQnfields, (const PGresult *r), (r)) \
    X(int, PQgetisnull, (const PGresult *r, int t, int f), (r, t, f)) \
    X(char *, PQgetvalue, (const PGresult *r, int t, int f), (r, t, f)) \
    X(char *, PQresultErrorField, (const PGresult *r, int f), (r, f)) \
    X(PQconninfoOption *, PQconninfoParse, (const char *s, char **e), (s, e)) \
    X(PGnotify *, PQnotifies, (PGconn *c), (c)) \
    X(int, PQenterPipelineMode, (PGconn *c), (c)) \
    X(int, PQexitPipelineMode, (PGconn *c), (c)) \
    X(int, PQpipelineSync, (PGconn *c), (c))

#define CPQ_VOID_FUNCTIONS(X) \
    X(PQfinish, (PGconn *c), (c)) \
    X(PQclear, (PGresult *r), (r)) \
    X(PQconninfoFree, (PQconninfoOption *o), (o)) \
    X(PQfreemem, (void *p), (p))

static struct {
#define FIELD(ret, name, params, args) ret (*name) params;
#define VOID_FIELD(name, params, args) void (*name) params;
    CPQ_FUNCTIONS(FIELD)
    CPQ_VOID_FUNCTIONS(VOID_FIELD)
#undef FIELD
#undef VOID_FIELD
} pq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int loaded;

// TLS to PostgreSQL 15 without a HelloRetryRequest (issue 38, item 5). Its server takes one
// curve, prime256v1 (ssl_ecdh_curve; X25519 cannot be set there), while OpenSSL 3's client
// sends its key share for X25519 first: the server asks again, one more round trip per
// connect (200 ms across an ocean). libpq 15 has no setting for it, so OpenSSL's own
// configuration does it: P-256 first, then the usual groups (ciphers and protocol versions
// stay OpenSSL's built-in defaults, as Debian's file leaves them). Loaded from memory (a
// memfd), before libpq's first TLS connection, and only where the admin has neither named a
// configuration of their own (OPENSSL_CONF) nor set TLS, providers or includes in the
// system's file (system_config_is_customised). Best effort: if any step
// is missing, libpq initialises OpenSSL as before.
static const char tls_config[] =
    "openssl_conf = pam_totp_openssl\n"
    "[pam_totp_openssl]\nssl_conf = pam_totp_ssl\n"
    "[pam_totp_ssl]\nsystem_default = pam_totp_tls\n"
    "[pam_totp_tls]\nGroups = P-256:X25519:P-384:P-521\n";

// Whether the system's OpenSSL configuration sets anything this process would lose by
// loading ours instead: TLS settings, providers (FIPS), includes. Debian's, as shipped,
// sets none of them (its [openssl_init] is empty).
static int system_config_is_customised(void) {
    FILE *f = fopen("/usr/lib/ssl/openssl.cnf", "r");
    if (f == NULL) return 0;
    char line[512];
    int customised = 0;
    while (!customised && fgets(line, sizeof line, f) != NULL) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        static const char *const keys[] = {"ssl_conf", "providers", ".include", "alg_section", "system_default", "Groups",
                                           "CipherString", "MinProtocol"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            if (strncmp(p, keys[i], strlen(keys[i])) == 0) customised = 1;
        }
    }
    fclose(f);
    return customised;
}

static void configure_tls(void) {
    if (getenv("OPENSSL_CONF") != NULL || system_config_is_customised()) return;
    void *ssl = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (ssl == NULL) return;
    void *(*init_new)(void);
    int (*set_filename)(void *, const char *);
    int (*init_ssl)(uint64_t, const void *);
    void (*init_free)(void *);
    *(void **)(&init_new) = dlsym(ssl, "OPENSSL_INIT_new");
    *(void **)(&set_filename) = dlsym(ssl, "OPENSSL_INIT_set_config_filename");
    *(void **)(&init_ssl) = dlsym(ssl, "OPENSSL_init_ssl");
    *(void **)(&init_free) = dlsym(ssl, "OPENSSL_INIT_free");
    if (init_new == NULL || set_filename == NULL || init_ssl == NULL || init_free == NULL) { dlclose(ssl); return; }
    int fd = memfd_create("pam-totpd-openssl.cnf", MFD_CLOEXEC);
    if (fd >= 0) {
        size_t n = sizeof tls_config - 1;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        void *settings = init_new();
        if (write(fd, tls_config, n) == (ssize_t)n && settings != NULL && set_filename(settings, path) == 1) {
            // OPENSSL_INIT_LOAD_CONFIG (0x40): read once per process; libpq's later call loads nothing more.
            (void)init_ssl(0x00000040L, settings);
        }
        if (settings != NULL) init_free(settings);
        close(fd);
    }
    dlclose(ssl);  // libpq keeps it loaded
}

static void load(void) {
    // The soname Debian's libpq5 installs; RTLD_LOCAL keeps its symbols out of the global scope.
    void *h = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "%s", e ? e : "libpq.so.5: cannot be loaded");
        return;
    }
#define LOOKUP(name) \
    *(void **)(&pq.name) = dlsym(h, #name); \
    if (pq.name == NULL) { snprintf(load_error, sizeof load_error, "libpq.so.5 has no %s", #name); return; }
#define LOOKUP_RET(ret, name, params, args) LOOKUP(name)
#define LOOKUP_VOID(name, params, args) LOOKUP(name)
    CPQ_FUNCTIONS(LOOKUP_RET)
    CPQ_VOID_FUNCTIONS(LOOKUP_VOID)
#undef LOOKUP
#undef LOOKUP_RET
#undef LOOKUP_VOID
    configure_tls();
    loaded = 1;
}

int cpq_load(char *why, size_t why_size) {
    pthread_once(&once, load);
    if (loaded) return 0;
    if (why != NULL && why_size > 0) snprintf(why, why_size, "%s", load_error);
    return -1;
}

// Callers load first (PQLibrary.load); should one not, a wrapper answers as libpq does when
// out of memory (NULL, 0) rather than calling through a null pointer.
#define WRAP(ret, name, params, args) ret cpq_##name params { if (!loaded) return (ret)0; return pq.name args; }
#define WRAP_VOID(name, params, args) void cpq_##name params { if (loaded) pq.name args; }
CPQ_FUNCTIONS(WRAP)
CPQ_VOID_FUNCTIONS(WRAP_VOID)
