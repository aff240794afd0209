// Starting a sender program for pam-totpd (MFADaemon's Delivery.swift): the fork and everything
// the child does before execve, in C, because pam-totpd is multi-threaded and a forked child may
// make only async-signal-safe calls until it execs (no malloc, no Swift code, no locks another
// thread may have held at the fork). MFADaemon only: never pam_totp.so, never the library targets.
#ifndef CSPAWN_H
#define CSPAWN_H
#include <stdint.h>

/// Where starting failed (`cspawn_child.failed_step`), with errno in `failed_errno`.
enum {
    CSPAWN_STEP_SOCKETPAIR = 1,  // parent: the standard input socket pair
    CSPAWN_STEP_PIPE = 2,        // parent: the output or the report pipe
    CSPAWN_STEP_FORK = 3,        // parent: fork
    CSPAWN_STEP_SIGNALS = 4,     // child: signal dispositions or mask
    CSPAWN_STEP_SETSID = 5,      // child: a new session and process group
    CSPAWN_STEP_DESCRIPTORS = 6, // child: standard input, output and error; closing the rest
    CSPAWN_STEP_CHDIR = 7,       // child: chdir("/")
    CSPAWN_STEP_LIMITS = 8,      // child: RLIMIT_CORE 0
    CSPAWN_STEP_SETGROUPS = 9,   // child: setgroups(0, NULL)
    CSPAWN_STEP_SETGID = 10,     // child: setresgid
    CSPAWN_STEP_SETUID = 11,     // child: setresuid
    CSPAWN_STEP_VERIFY = 12,     // child: the ids read back wrong, or setuid(0)/setgid(0) worked
    CSPAWN_STEP_PARENT_DEATH = 13, // child: PR_SET_PDEATHSIG, or the parent already gone
    CSPAWN_STEP_EXEC = 14,       // child: execve
    CSPAWN_STEP_REPORT = 15,     // parent: reading the child's report
};

/// A started child. The descriptors are the parent's ends, close-on-exec and non-blocking.
struct cspawn_child {
    int pid;
    /// Standard input: a stream socket (send with MSG_NOSIGNAL: a program that closes its input
    /// early is EPIPE, never SIGPIPE), shut for reading.
    int input_fd;
    /// Standard output and standard error, one pipe.
    int output_fd;
    /// A pidfd, readable once the child has exited; -1 when the kernel has none (before 5.3).
    int pid_fd;
    int failed_step;
    int failed_errno;
};

/// Runs `path` (argv exactly that one; absolute, NUL-terminated) as `uid`/`gid` with no
/// supplementary groups, in a new session (its pid is its process group), with the environment
/// exactly PATH=/usr/local/bin:/usr/bin:/bin, LANG=C.UTF-8, `kind_variable` and
/// `destination_variable` (NUL-terminated "PAM_TOTP_KIND=..." and "PAM_TOTP_DESTINATION=...":
/// the destination never on a command line, which every local user can read), the working
/// directory /, umask 022, no core dumps, every signal at its default and none blocked, and no
/// descriptor but 0, 1 and 2. Returns 0 once the program has been executed (the child reports
/// any failure before execve over a close-on-exec pipe, and is then reaped here), or -1 with
/// `failed_step` and `failed_errno` set and nothing left open or running. uid or gid 0 (root)
/// or UINT32_MAX (which the set*id calls read as "unchanged"), a relative path, and variables
/// without their names, are refused (-1, CSPAWN_STEP_VERIFY, EPERM) without forking.
int cspawn_start(const uint8_t *path, const uint8_t *kind_variable, const uint8_t *destination_variable,
                 uint32_t uid, uint32_t gid, struct cspawn_child *child);

/// waitpid(pid) on EINTR again. `block`: 0 WNOHANG. Returns 1 when reaped, with `*signaled` 0
/// and the exit status in `*value`, or `*signaled` 1 and the signal; 0 while it still runs
/// (WNOHANG); -1 with errno.
int cspawn_reap(int pid, int block, int *signaled, int *value);

/// SIGKILL to the process group `pid` leads (which cspawn_start made with setsid), and to `pid`
/// itself. Call it before reaping `pid`: until then its id cannot be reused.
void cspawn_kill_group(int pid);

/// The number of a signal, for tests and log lines (SIGKILL).
int cspawn_sigkill(void);

#endif
