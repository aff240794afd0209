// The module's own copies of a few libc functions, so that pam_totp.so imports fewer symbols.
//
// Why: libpam loads a module with dlopen(RTLD_NOW), so the dynamic linker binds every symbol the
// module imports at every load, by searching the host's whole scope (pamtester: ~1,300
// instructions an import; sshd, with more libraries, more). docs/benchmarks.md has the figures.
// The module's version script (Sources/PamTOTP/exports.map) makes every symbol here local, so
// the module's own calls bind to these at link time and nothing outside the module sees them.
//
// Three kinds:
// - small byte functions (memcpy, memmove, memset, bcmp, memcmp, strlen, strnlen), written out;
// - calls that are the same as a libc one: time (clock_gettime, which faketime and other
//   interposers also take), calloc (posix_memalign), arc4random_buf (the getrandom system call,
//   as glibc's), __stack_chk_fail (a line on standard error and SIGABRT, as glibc's);
// - calls off the common path, looked up in the host's scope at their first use (dlsym with
//   RTLD_DEFAULT: the same function an import would bind, interposers first, at the symbol's
//   default version, which is what linking the module against this libc would bind): strerror,
//   getgrnam_r, getgrouplist (group policy only), dlopen, dlclose (the QR code at enrol-at-login).
//
// Nothing here may call a function it defines by another path: built with -fno-builtin, and
// every loop has a compiler barrier, so the compiler cannot turn a loop back into a call.

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BARRIER() __asm__ __volatile__("" ::: "memory")

void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n >= 8) {
        uint64_t w;
        __builtin_memcpy(&w, s, 8);  // a fixed 8 bytes: one load, never a call
        __builtin_memcpy(d, &w, 8);
        d += 8; s += 8; n -= 8;
        BARRIER();
    }
    while (n) { *d++ = *s++; n--; BARRIER(); }
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d == s || n == 0) return dst;
    if ((uintptr_t)d - (uintptr_t)s >= n) {  // d before s, or no overlap: from the start
        for (size_t i = 0; i < n; i++) { d[i] = s[i]; BARRIER(); }
    } else {  // d inside (s, s+n): from the end
        while (n) { n--; d[n] = s[n]; BARRIER(); }
    }
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    uint64_t w = (unsigned char)c * 0x0101010101010101ULL;
    while (n >= 8) { __builtin_memcpy(d, &w, 8); d += 8; n -= 8; BARRIER(); }
    while (n) { *d++ = (unsigned char)c; n--; BARRIER(); }
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
        BARRIER();
    }
    return 0;
}

int bcmp(const void *a, const void *b, size_t n) { return memcmp(a, b, n); }

size_t strnlen(const char *s, size_t max) {
    size_t n = 0;
    while (n < max && s[n]) { n++; BARRIER(); }
    return n;
}

size_t strlen(const char *s) { return strnlen(s, SIZE_MAX); }

time_t time(time_t *t) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return (time_t)-1;
    if (t) *t = now.tv_sec;
    return now.tv_sec;
}

void *calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) { errno = ENOMEM; return NULL; }
    size_t n = count * size;
    void *p = NULL;
    int rc = posix_memalign(&p, 16, n ? n : 1);
    if (rc != 0) { errno = rc; return NULL; }
    return memset(p, 0, n);
}

// Ends the process at once, as glibc's fatal errors do: a line on standard error, then SIGABRT
// (through the kernel: nothing here may rely on libc's state). Each caller passes its own
// message, so the linker never folds two of them into one function.
__attribute__((noreturn, noinline, cold)) static void fatal(const char *line, size_t length) {
    syscall(SYS_write, 2, line, length);
    syscall(SYS_kill, syscall(SYS_getpid), 6 /* SIGABRT */);
    __builtin_trap();
}
#define FATAL(text) fatal("pam_totp: " text "\n", sizeof("pam_totp: " text "\n") - 1)

// As glibc 2.36's arc4random_buf: getrandom(2) until the buffer is full (it blocks only before
// the kernel's pool is first ready); on a kernel without getrandom (ENOSYS), /dev/urandom once
// /dev/random says the pool is ready; any other failure ends the process (glibc: "cannot get
// entropy"), rather than return bytes that are not random. Only enrolment uses it (a new
// secret, recovery codes' salts, a temporary file's name), never an ordinary login.
static int urandom_fill(unsigned char *p, size_t n) {
    int ready = (int)syscall(SYS_openat, AT_FDCWD, "/dev/random", O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (ready < 0) return -1;
    struct pollfd wait = { ready, POLLIN, 0 };
    while (syscall(SYS_ppoll, &wait, 1, NULL, NULL, 0) < 0 && errno == EINTR) {}
    syscall(SYS_close, ready);
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/dev/urandom", O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return -1;
    while (n) {
        long got = syscall(SYS_read, fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) { syscall(SYS_close, fd); return -1; }
        p += got;
        n -= (size_t)got;
    }
    syscall(SYS_close, fd);
    return 0;
}

void arc4random_buf(void *buffer, size_t n) {
    unsigned char *p = buffer;
    while (n) {
        long got = syscall(SYS_getrandom, p, n > 33554431 ? 33554431 : n, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == ENOSYS && urandom_fill(p, n) == 0) return;
            FATAL("cannot get random bytes from the kernel");
        }
        p += got;
        n -= (size_t)got;
    }
}

// Called by the stack protector's check when a function's canary was overwritten: nothing on
// the stack can be trusted, so stop at once.
__attribute__((noreturn)) void __stack_chk_fail(void) { FATAL("stack smashing detected: terminated"); }

// Looked up at first use. Two threads may both look it up; they store the same pointer.
static void *resolve(void *volatile *slot, const char *name) {
    void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_DEFAULT, name);
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    }
    return f;
}

char *strerror(int e) {
    static void *volatile slot;
    char *(*f)(int) = (char *(*)(int))resolve(&slot, "strerror");
    return f ? f(e) : NULL;  // NULL: the caller writes "errno N"
}

int getgrnam_r(const char *name, struct group *g, char *buf, size_t size, struct group **result) {
    static void *volatile slot;
    int (*f)(const char *, struct group *, char *, size_t, struct group **) =
        (int (*)(const char *, struct group *, char *, size_t, struct group **))resolve(&slot, "getgrnam_r");
    if (!f) { *result = NULL; return ENOSYS; }
    return f(name, g, buf, size, result);
}

int getgrouplist(const char *user, gid_t group, gid_t *groups, int *count) {
    static void *volatile slot;
    int (*f)(const char *, gid_t, gid_t *, int *) = (int (*)(const char *, gid_t, gid_t *, int *))resolve(&slot, "getgrouplist");
    if (!f) { errno = ENOSYS; return -1; }
    return f(user, group, groups, count);
}

void *dlopen(const char *file, int flags) {
    static void *volatile slot;
    void *(*f)(const char *, int) = (void *(*)(const char *, int))resolve(&slot, "dlopen");
    return f ? f(file, flags) : NULL;
}

int dlclose(void *handle) {
    static void *volatile slot;
    int (*f)(void *) = (int (*)(void *))resolve(&slot, "dlclose");
    return f ? f(handle) : -1;
}
