// make bench (scripts/bench.sh, "The daemon path"): the CPU floor under pam-totpd's cost per
// request. One loop iteration makes the file system calls pam-totpd makes for one accepted code
// (strace of the daemon: the store directory, the record read, the lock file taken, the state
// file read, one 2 KiB slot written and fdatasync'ed, everything closed) and nothing else: no
// socket, no threads, no parsing, no HMAC. Prints the process's CPU time (user + system) per
// iteration.
//
// usage: bench-syscall-floor DIR ITERATIONS PAUSE_US
// DIR: an empty directory on the store's file system. PAUSE_US: a pause after each iteration
// (not counted), to space them like the measured logins; 0 runs them back to back.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static double cpu_us(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

static void make_file(const char *dir, const char *name, size_t size) {
    char path[4096], bytes[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) { perror(path); exit(1); }
    memset(bytes, 'x', sizeof bytes);
    if (write(fd, bytes, size) != (ssize_t)size || fsync(fd) != 0) { perror(path); exit(1); }
    close(fd);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s DIR ITERATIONS PAUSE_US\n", argv[0]); return 64; }
    const char *dir = argv[1];
    int n = atoi(argv[2]), pause_us = atoi(argv[3]);
    if (n <= 0 || pause_us < 0) { fprintf(stderr, "bad ITERATIONS or PAUSE_US\n"); return 64; }
    make_file(dir, "user", 112);
    make_file(dir, ".state.user", 4096);
    char buffer[4097], slot[2048];
    memset(slot, 7, sizeof slot);
    struct stat st;
    double spent = 0;
    for (int i = 0; i < n; i++) {
        double start = cpu_us();
        int d = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        fstat(d, &st);
        int record = openat(d, "user", O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        fstat(record, &st);
        if (read(record, buffer, 113) < 0 || read(record, buffer, 1) < 0) { perror("read"); return 1; }
        int lock = openat(d, ".lock.user", O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0600);
        fstat(lock, &st);
        flock(lock, LOCK_EX | LOCK_NB);
        fstatat(d, ".lock.user", &st, AT_SYMLINK_NOFOLLOW);
        fstatat(d, "user", &st, AT_SYMLINK_NOFOLLOW);
        int state = openat(d, ".state.user", O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        fstat(state, &st);
        if (read(state, buffer, 4097) < 0 || read(state, buffer, 1) < 0) { perror("read"); return 1; }
        slot[0] = (char)i;
        if (pwrite(state, slot, sizeof slot, (i & 1) * 2048) != (ssize_t)sizeof slot || fdatasync(state) != 0) {
            perror("write");
            return 1;
        }
        close(state);
        close(lock);
        close(record);
        close(d);
        spent += cpu_us() - start;
        if (pause_us) usleep(pause_us);
    }
    printf("%.1f\n", spent / n);
    return 0;
}
