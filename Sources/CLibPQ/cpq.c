// See include/cpq.h: libpq, loaded at run time by the first fleet-mode operation.
#include "cpq.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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
