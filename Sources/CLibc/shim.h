// CLibc: the libc surface the library, PamTOTP and the two programs use. Embedded Swift has no `import Glibc`, and
// Swift cannot call C variadic functions, so each variadic call gets a fixed-signature
// `static inline` wrapper here, prefixed `clibc_`.
#ifndef PAM_TOTP_CLIBC_SHIM_H
#define PAM_TOTP_CLIBC_SHIM_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <pwd.h>
#include <grp.h>
#include <dirent.h>
#include <dlfcn.h>
#include <syslog.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <termios.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>

#include <sys/syscall.h>

// Kernel calls are libc's own functions, as in any other PAM module (the module's imports are
// bound once at each load; a copy of libc inside sshd's address space would be risk for no gain
// a user can feel, docs/benchmarks.md). The clock (time, clock_gettime) and NSS (getpwnam_r)
// being libc calls is also what lets faketime and NSS modules interpose them.

// open(2)/openat(2) are variadic (mode is optional).
static inline int clibc_openat(int dirfd, const char *path, int flags, unsigned int mode) {
    return openat(dirfd, path, flags, (mode_t)mode);
}
static inline int clibc_open(const char *path, int flags, unsigned int mode) {
    return open(path, flags, (mode_t)mode);
}
// SIG_IGN and SIG_DFL are casts in a macro, which Swift cannot import (totp-enroll).
static inline __sighandler_t clibc_sig_ign(void) { return SIG_IGN; }
static inline __sighandler_t clibc_sig_dfl(void) { return SIG_DFL; }
// fcntl with an int argument (F_GETFL, F_SETFL, F_SETFD).
static inline int clibc_fcntl_int(int fd, int cmd, int arg) { return fcntl(fd, cmd, arg); }
// pam-totpd's server (never the module): accept4(2) and eventfd(2), whose wrappers need
// _GNU_SOURCE; each descriptor non-blocking and close-on-exec from the start.
static inline int clibc_accept_nonblocking(int fd) {
    return (int)syscall(SYS_accept4, fd, (void *)0, (void *)0, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
static inline int clibc_eventfd_nonblocking(void) { return (int)syscall(SYS_eventfd2, 0, O_NONBLOCK | O_CLOEXEC); }
// errno is a macro over a thread-local; read it in one place.
static inline int clibc_errno(void) { return errno; }
// explicit_bzero is not always visible through the module importer with this feature set; a
// memset the compiler cannot drop (the barrier says the memory is read afterwards) does the same.
static inline void clibc_wipe(void *p, size_t n) {
    if (p && n) { memset(p, 0, n); __asm__ __volatile__("" : : "r"(p) : "memory"); }
}

// Fixed names for the calls MFASystem's LiveSystemCalls forwards to: inside that type an
// unqualified `read` would name its own static method.
static inline long clibc_read(int fd, void *buf, size_t n) { return read(fd, buf, n); }
static inline long clibc_write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }
static inline long clibc_pwrite(int fd, const void *buf, size_t n, long long off) {
    return pwrite(fd, buf, n, (off_t)off);
}
static inline int clibc_fsync(int fd) { return fsync(fd); }
static inline int clibc_fdatasync(int fd) { return fdatasync(fd); }
static inline int clibc_renameat(int a, const char *f, int b, const char *t) {
    return renameat(a, f, b, t);
}
static inline int clibc_unlinkat(int d, const char *p, int flags) { return unlinkat(d, p, flags); }
static inline int clibc_flock(int fd, int op) { return flock(fd, op); }
static inline int clibc_close(int fd) { return close(fd); }
static inline int clibc_fstat(int fd, struct stat *st) { return fstat(fd, st); }
static inline int clibc_fstatat(int d, const char *p, struct stat *st, int flags) {
    return fstatat(d, p, st, flags);
}
static inline int clibc_fchmod(int fd, unsigned int mode) { return fchmod(fd, (mode_t)mode); }
static inline unsigned int clibc_geteuid(void) { return geteuid(); }
static inline int clibc_getpid(void) { return getpid(); }
static inline int clibc_socket(int domain, int type, int protocol) {
    return socket(domain, type, protocol);
}
static inline int clibc_poll(struct pollfd *fds, unsigned long n, int timeout_ms) {
    return poll(fds, (nfds_t)n, timeout_ms);
}
static inline int clibc_nanosleep(const struct timespec *req, struct timespec *rem) {
    return nanosleep(req, rem);
}
// syslog(3) is variadic: totp-enroll logs one preformatted line.
static inline void clibc_syslog(int priority, const char *line) { syslog(priority, "%s", line); }
// Tests' fault-injecting system calls report their errors through errno, like libc.
static inline void clibc_set_errno(int e) { errno = e; }

// sockaddr_un's sun_path is a fixed char array that Swift imports as a tuple: the address is
// built here. The path (without its NUL) must be shorter than sun_path, else ENAMETOOLONG.
static inline int clibc_connect_unix(int fd, const char *path) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof a.sun_path) { errno = ENAMETOOLONG; return -1; }
    memcpy(a.sun_path, path, n);
    return connect(fd, (const struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1));
}
// This host's name (uname(2)'s nodename, what gethostname returns), NUL-terminated in `buf`.
static inline int clibc_hostname(char *buf, size_t n) {
    if (n == 0 || gethostname(buf, n) != 0) return -1;
    buf[n - 1] = 0;
    return 0;
}
// The uid of the process that created the listening socket a connected Unix socket reached
// (SO_PEERCRED; struct ucred spelled out, it is declared only with _GNU_SOURCE); -1 if unknown.
static inline long long clibc_peer_uid(int fd) {
    struct { int pid; unsigned int uid; unsigned int gid; } cred = { 0, 0, 0 };
    socklen_t n = sizeof cred;
    int rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &n);
    if (rc != 0 || n < sizeof cred) return -1;
    return (long long)cred.uid;
}
// send(2) with MSG_NOSIGNAL: a daemon that went away must not raise SIGPIPE in the PAM host.
static inline long clibc_send(int fd, const void *buf, size_t n) {
    return send(fd, buf, n, MSG_NOSIGNAL);
}
// A monotonic clock in milliseconds, for the module's deadline (immune to clock changes).
static inline long long clibc_monotonic_ms(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return 0;
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// Listing the store: a DIR stream over a duplicate of the checked directory descriptor (so
// closedir never closes the store's own), and d_name, which Swift imports as a tuple.
static inline DIR *clibc_opendir_at(int dirfd) {
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return NULL;
    DIR *d = fdopendir(fd);
    if (!d) { int e = errno; close(fd); errno = e; return NULL; }
    rewinddir(d);
    return d;
}
static inline const char *clibc_dirent_name(const struct dirent *e) { return e->d_name; }

// Enrolment at first login: libqrencode is loaded only on that path, at that moment (every
// other login keeps its cost), and unloaded again. The struct is QRcode's public layout
// (qrencode.h); 1 is QR_ECLEVEL_M, 2 is QR_MODE_8. Copies width*width module bytes (bit 0:
// dark) into `out` and returns the width, or -1 (library missing, encoding failed, too big).
typedef struct { int version; int width; unsigned char *data; } clibc_qrcode;
static inline int clibc_qr_encode(const char *text, unsigned char *out, int capacity) {
    void *lib = dlopen("libqrencode.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return -1;
    clibc_qrcode *(*encode)(const char *, int, int, int, int) =
        (clibc_qrcode *(*)(const char *, int, int, int, int))dlsym(lib, "QRcode_encodeString");
    void (*release)(clibc_qrcode *) = (void (*)(clibc_qrcode *))dlsym(lib, "QRcode_free");
    int width = -1;
    if (encode && release) {
        clibc_qrcode *q = encode(text, 0, 1, 2, 1);
        if (q) {
            if (q->data && q->width > 0 && q->width <= 177 && q->width * q->width <= capacity) {
                memcpy(out, q->data, (size_t)q->width * (size_t)q->width);
                width = q->width;
            }
            release(q);
        }
    }
    dlclose(lib);
    return width;
}

// setresuid/setresgid are declared only with _GNU_SOURCE; totp-enroll needs them to drop
// privileges for good (real, effective and saved ids at once).
extern int setresuid(uid_t ruid, uid_t euid, uid_t suid);
extern int setresgid(gid_t rgid, gid_t egid, gid_t sgid);

#endif
