// CLibc: the libc surface MFACore and PamTOTP use. Embedded Swift has no `import Glibc`, and
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

// open(2)/openat(2) are variadic (mode is optional).
static inline int clibc_openat(int dirfd, const char *path, int flags, unsigned int mode) {
    return openat(dirfd, path, flags, (mode_t)mode);
}
static inline int clibc_open(const char *path, int flags, unsigned int mode) {
    return open(path, flags, (mode_t)mode);
}
// errno is a macro over a thread-local; read it in one place.
static inline int clibc_errno(void) { return errno; }
// explicit_bzero is not always visible through the module importer with this feature set.
static inline void clibc_wipe(void *p, size_t n) { if (p && n) explicit_bzero(p, n); }

// setresuid/setresgid are declared only with _GNU_SOURCE; totp-enroll needs them to drop
// privileges for good (real, effective and saved ids at once).
extern int setresuid(uid_t ruid, uid_t euid, uid_t suid);
extern int setresgid(gid_t rgid, gid_t egid, gid_t sgid);

#endif
