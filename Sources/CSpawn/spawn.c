// The sender's start (cspawn.h says what it guarantees). Between fork and execve the child runs
// only async-signal-safe code: system calls, no allocation, no locks, nothing the Swift runtime
// or another thread of pam-totpd could have left half-done at the fork.
#define _GNU_SOURCE
#include "cspawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/// What the child writes to the report pipe when a step fails: the step and errno.
struct report {
    int32_t step;
    int32_t error;
};

static void child_fail(int report_fd, int step) __attribute__((noreturn));
static void child_fail(int report_fd, int step) {
    struct report r = {step, errno};
    ssize_t n;
    do {
        n = write(report_fd, &r, sizeof r);
    } while (n < 0 && errno == EINTR);
    _exit(127);
}

/// A directory entry as getdents64 returns it (opendir would allocate).
struct raw_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/// Closes every descriptor from `lowest` up: close_range(2) (Linux 5.9), else each one listed
/// in /proc/self/fd, else every number below RLIMIT_NOFILE (at most 2^20).
static void close_from(int lowest) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0) return;
#endif
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        char buffer[4096] __attribute__((aligned(8)));
        for (;;) {
            long n = syscall(SYS_getdents64, dir, buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) break;  // fall back to the loop below
            if (n == 0) {
                close(dir);
                return;
            }
            for (long offset = 0; offset < n;) {
                const struct raw_dirent64 *e = (const struct raw_dirent64 *)(buffer + offset);
                long fd = 0;
                const char *c = e->d_name;
                int digits = 0;
                while (*c >= '0' && *c <= '9' && fd < 1L << 30) {
                    fd = fd * 10 + (*c - '0');
                    c++;
                    digits++;
                }
                if (digits > 0 && *c == 0 && fd >= lowest && fd != dir) close((int)fd);
                offset += e->d_reclen;
            }
        }
        close(dir);
    }
    struct rlimit limit;
    long highest = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) highest = (long)limit.rlim_cur;
    if (highest > 1L << 20) highest = 1L << 20;
    for (long fd = lowest; fd < highest; fd++) close((int)fd);
}

static void child_main(const uint8_t *path, char *const argv[], char *const envp[], uint32_t uid, uint32_t gid,
                       pid_t parent, int input, int output, int report_fd) __attribute__((noreturn));
static void child_main(const uint8_t *path, char *const argv[], char *const envp[], uint32_t uid, uint32_t gid,
                       pid_t parent, int input, int output, int report_fd) {
    // Signals first, while all are still blocked (the parent blocked them around fork): every
    // disposition back to the default, so no handler of pam-totpd's can run here and nothing the
    // daemon ignored (SIGPIPE) stays ignored in the program; then nothing blocked.
    // rt_sigaction itself: glibc's sigaction refuses its two internal signals (32, 33), which
    // the daemon may have inherited ignored, and an ignored signal stays ignored across execve.
    // All zeros is SIG_DFL, no flags, an empty mask, whatever the architecture's layout.
    static const unsigned long default_action[4] = {0, 0, 0, 0};
    for (int s = 1; s < NSIG; s++) {
        if (s == SIGKILL || s == SIGSTOP) continue;
        (void)syscall(SYS_rt_sigaction, s, default_action, NULL, sizeof(uint64_t));  // the kernel's sigset_t
    }
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) child_fail(report_fd, CSPAWN_STEP_SIGNALS);

    // Its own session and process group: a time-out kills the program and everything it started.
    if (setsid() < 0) child_fail(report_fd, CSPAWN_STEP_SETSID);

    // 0 the input socket, 1 and 2 the output pipe, 3 the report pipe (close-on-exec), nothing
    // else. Everything is first moved to 5 and above, so that no dup2 below overwrites a
    // descriptor still needed (the daemon may run with 0, 1 or 2 closed).
    int moved_input = fcntl(input, F_DUPFD_CLOEXEC, 5);
    if (moved_input < 0) child_fail(report_fd, CSPAWN_STEP_DESCRIPTORS);
    int moved_output = fcntl(output, F_DUPFD_CLOEXEC, 5);
    if (moved_output < 0) child_fail(report_fd, CSPAWN_STEP_DESCRIPTORS);
    int moved_report = fcntl(report_fd, F_DUPFD_CLOEXEC, 5);
    if (moved_report < 0) child_fail(report_fd, CSPAWN_STEP_DESCRIPTORS);
    report_fd = moved_report;
    if (dup2(moved_input, 0) < 0 || dup2(moved_output, 1) < 0 || dup2(moved_output, 2) < 0)
        child_fail(report_fd, CSPAWN_STEP_DESCRIPTORS);
    if (dup3(report_fd, 3, O_CLOEXEC) < 0) child_fail(report_fd, CSPAWN_STEP_DESCRIPTORS);
    report_fd = 3;
    close_from(4);

    if (chdir("/") != 0) child_fail(report_fd, CSPAWN_STEP_CHDIR);
    umask(022);
    // Its memory holds the code: no core file of it, anywhere.
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) != 0) child_fail(report_fd, CSPAWN_STEP_LIMITS);

    // The identity: raw system calls (this thread is the process's only one now; glibc's
    // wrappers would signal the parent's other threads, which the child does not have). Real,
    // effective and saved ids all set, so none can be taken back.
    if (syscall(SYS_setgroups, 0, NULL) != 0) child_fail(report_fd, CSPAWN_STEP_SETGROUPS);
    if (syscall(SYS_setresgid, gid, gid, gid) != 0) child_fail(report_fd, CSPAWN_STEP_SETGID);
    if (syscall(SYS_setresuid, uid, uid, uid) != 0) child_fail(report_fd, CSPAWN_STEP_SETUID);
    uid_t ru = 0, eu = 0, su = 0;
    gid_t rg = 0, eg = 0, sg = 0;
    if (syscall(SYS_getresuid, &ru, &eu, &su) != 0 || ru != uid || eu != uid || su != uid ||
        syscall(SYS_getresgid, &rg, &eg, &sg) != 0 || rg != gid || eg != gid || sg != gid ||
        syscall(SYS_getgroups, 0, NULL) != 0 || getuid() != uid || geteuid() != uid || getgid() != gid ||
        getegid() != gid) {
        errno = EPERM;
        child_fail(report_fd, CSPAWN_STEP_VERIFY);
    }
    // Root must be gone for good: taking uid 0 or gid 0 back has to fail.
    if (syscall(SYS_setuid, 0) == 0 || syscall(SYS_setgid, 0) == 0) {
        errno = EPERM;
        child_fail(report_fd, CSPAWN_STEP_VERIFY);
    }

    // Killed if the thread that started it dies (pam-totpd crashing mid-send). Set after the
    // id change, which clears it; a parent already gone is checked after.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) child_fail(report_fd, CSPAWN_STEP_PARENT_DEATH);
    if (getppid() != parent) {
        errno = ESRCH;
        child_fail(report_fd, CSPAWN_STEP_PARENT_DEATH);
    }

    execve((const char *)path, argv, envp);
    child_fail(report_fd, CSPAWN_STEP_EXEC);
}

static void close_if_open(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static int parent_fail(struct cspawn_child *child, int step, int error) {
    child->failed_step = step;
    child->failed_errno = error;
    return -1;
}

int cspawn_start(const uint8_t *path, const uint8_t *kind_variable, const uint8_t *destination_variable,
                 uint32_t uid, uint32_t gid, struct cspawn_child *child) {
    child->pid = -1;
    child->input_fd = -1;
    child->output_fd = -1;
    child->pid_fd = -1;
    child->failed_step = 0;
    child->failed_errno = 0;
    if (uid == 0 || gid == 0 || uid == UINT32_MAX || gid == UINT32_MAX || path == NULL || path[0] != '/' ||
        kind_variable == NULL || strncmp((const char *)kind_variable, "PAM_TOTP_KIND=", 14) != 0 ||
        destination_variable == NULL || strncmp((const char *)destination_variable, "PAM_TOTP_DESTINATION=", 21) != 0)
        return parent_fail(child, CSPAWN_STEP_VERIFY, EPERM);

    // Everything the child needs, made before the fork (the child may not allocate). The
    // destination is in the environment, never in argv: /proc/PID/cmdline is readable by every
    // local user, /proc/PID/environ only by the process's own uid and root.
    static char path_variable[] = "PATH=/usr/local/bin:/usr/bin:/bin";
    static char lang_variable[] = "LANG=C.UTF-8";
    char *const envp[] = {path_variable, lang_variable, (char *)kind_variable, (char *)destination_variable, NULL};
    char *const argv[] = {(char *)path, NULL};

    int input[2] = {-1, -1}, output[2] = {-1, -1}, report[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, input) != 0)
        return parent_fail(child, CSPAWN_STEP_SOCKETPAIR, errno);
    if (pipe2(output, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
        int error = errno;
        close_if_open(&input[0]);
        close_if_open(&input[1]);
        close_if_open(&output[0]);
        close_if_open(&output[1]);
        return parent_fail(child, CSPAWN_STEP_PIPE, error);
    }
    // One direction only: the daemon writes, the program reads.
    (void)shutdown(input[0], SHUT_RD);
    (void)shutdown(input[1], SHUT_WR);

    pid_t parent = getpid();
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pid_t pid = fork();
    if (pid == 0) child_main(path, argv, envp, uid, gid, parent, input[1], output[1], report[1]);
    int fork_error = errno;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    close_if_open(&input[1]);
    close_if_open(&output[1]);
    close_if_open(&report[1]);
    if (pid < 0) {
        close_if_open(&input[0]);
        close_if_open(&output[0]);
        close_if_open(&report[0]);
        return parent_fail(child, CSPAWN_STEP_FORK, fork_error);
    }

    // The report: end of file once execve closed the pipe (the program runs), else the step
    // that failed and its errno.
    struct report r = {0, 0};
    size_t got = 0;
    int read_error = 0;
    while (got < sizeof r) {
        ssize_t n = read(report[0], (char *)&r + got, sizeof r - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) read_error = errno;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close_if_open(&report[0]);
    if (got != 0 || read_error != 0) {
        if (got != sizeof r) cspawn_kill_group(pid);  // no report to trust: make sure it is gone
        int signaled = 0, value = 0;
        (void)cspawn_reap(pid, 1, &signaled, &value);
        close_if_open(&input[0]);
        close_if_open(&output[0]);
        if (got == sizeof r) return parent_fail(child, r.step, r.error);
        return parent_fail(child, CSPAWN_STEP_REPORT, read_error != 0 ? read_error : EIO);
    }

    (void)fcntl(input[0], F_SETFL, fcntl(input[0], F_GETFL) | O_NONBLOCK);
    (void)fcntl(output[0], F_SETFL, fcntl(output[0], F_GETFL) | O_NONBLOCK);
    child->pid = pid;
    child->input_fd = input[0];
    child->output_fd = output[0];
#ifdef SYS_pidfd_open
    child->pid_fd = (int)syscall(SYS_pidfd_open, pid, 0);  // close-on-exec; -1 before Linux 5.3
    if (child->pid_fd < 0) child->pid_fd = -1;
#endif
    return 0;
}

int cspawn_reap(int pid, int block, int *signaled, int *value) {
    int status = 0;
    pid_t r;
    do {
        r = waitpid(pid, &status, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) return r;
    if (WIFSIGNALED(status)) {
        *signaled = 1;
        *value = WTERMSIG(status);
    } else {
        *signaled = 0;
        *value = WEXITSTATUS(status);
    }
    return 1;
}

void cspawn_kill_group(int pid) {
    if (pid <= 0) return;
    (void)kill(-pid, SIGKILL);
    (void)kill(pid, SIGKILL);
}

int cspawn_sigkill(void) { return SIGKILL; }
