#!/usr/bin/env python3
"""scripts/run-tests.py: runs the XCTest bundle's classes side by side (make check, make test-quick).

Usage: scripts/run-tests.py --binary XCTEST [--plan Tests/test-plan.txt] [--tier quick|full]
                            [--jobs N] [--log FILE] [--timeout SECONDS (420: a class that takes
                            longer is stopped and fails)]

Each test class runs in its own process (`XCTEST Module.Class`), up to N at once (default 4:
most of the suite waits on peers, sshd, PostgreSQL, the fail delay of pamtester, not on the
CPU). Tests/test-plan.txt names every class with its usual seconds (the longest start first),
its tier (quick: pure and in-process; full: everything else) and what it shares with other
classes: two classes naming the same resource never run at once, and a class naming `*` runs
alone. A line may also name one test (CLASS/TEST): it then runs on its own, with its own
resources, and its class's line covers the class's other tests. A class the bundle has and the
plan lacks (or the other way round) is an error, so a new class is placed on purpose.

What several classes share is made once for the run (as root), and removed after only if the
run made it, so that no class makes or removes it under another: the delivery account
pam-totp-sender (as make install does), the default store /var/lib/pam-totp, and, on a machine
with no system logger, a /dev/log that drops what it gets (each class then captures syslog in a
mount namespace of its own, over it, never by binding /dev/log itself).

Prints a line per class as it ends, the failing classes' output at the end, and XCTest's closing
line ("Executed N tests, with [S tests skipped and] F failures") for the whole run; --log gets
every class's output. Exits 1 if any test failed or a class did not finish.
"""
import argparse
import os
import pwd
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

SUMMARY = re.compile(r"Executed (\d+) tests?, with (?:(\d+) tests? skipped and )?(\d+) failures?")


def read_plan(path):
    plan = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 3 or line[2] not in ("quick", "full"):
                sys.exit(f"{path}:{number}: expected CLASS SECONDS quick|full [RESOURCE...]")
            try:
                weight = float(line[1])
            except ValueError:
                sys.exit(f"{path}:{number}: {line[1]!r} is not a number of seconds")
            plan[line[0]] = (weight, line[2], set(line[3:]))
    return plan


def list_tests(binary):
    """{class: (Module.Class, [test...])} from the bundle's own list."""
    r = subprocess.run([binary, "--list-tests"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"run-tests: {binary} --list-tests failed: {r.stderr}")
    classes = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"(\w+)\.(\w+)/(\w+)", line.strip())
        if m:
            classes.setdefault(m.group(2), (m.group(1) + "." + m.group(2), []))[1].append(m.group(3))
    return classes


def units(plan, classes, tier):
    """What to run: (name, XCTest filter, resources, seconds), one per class and one per test
    the plan names alone; exits on a class or test the plan and the bundle disagree about."""
    problems = []
    alone = {}
    for key in plan:
        if "/" in key:
            cls, test = key.split("/", 1)
            if cls not in classes or test not in classes[cls][1]:
                problems.append(f"{key} is in the plan but not in the test bundle: remove it")
            alone.setdefault(cls, []).append(test)
    for cls in sorted(set(classes) - set(plan)):
        problems.append(f"{cls} is not in the plan: add it (seconds, tier, shared resources)")
    for cls in sorted(set(k for k in plan if "/" not in k) - set(classes)):
        problems.append(f"{cls} is in the plan but not in the test bundle: remove it")
    if problems:
        sys.exit("\n".join("run-tests: " + p for p in problems))
    chosen = []
    for cls, (full, tests) in classes.items():
        weight, cls_tier, resources = plan[cls]
        if tier == "quick" and cls_tier != "quick":
            continue
        rest = [t for t in tests if t not in alone.get(cls, [])]
        if rest and len(rest) < len(tests):
            chosen.append((cls, ",".join(full + "/" + t for t in rest), resources, weight))
        elif rest:
            chosen.append((cls, full, resources, weight))
        for test in alone.get(cls, []):
            t_weight, t_tier, t_resources = plan[cls + "/" + test]
            if tier == "quick" and t_tier != "quick":
                continue
            chosen.append((cls + "/" + test, full + "/" + test, t_resources, t_weight))
    return chosen


class Run:
    def __init__(self, binary, jobs, timeout, workdir):
        self.binary, self.jobs, self.timeout, self.workdir = binary, jobs, timeout, workdir
        self.lock = threading.Condition()
        self.running = {}  # class -> resources
        self.results = []  # (class, executed, skipped, failures, seconds, log path, finished)

    def can_start(self, resources):
        if not self.running:
            return True
        if "*" in resources or any("*" in r for r in self.running.values()):
            return False
        return not any(resources & r for r in self.running.values())

    def take(self, pending):
        with self.lock:
            while True:
                if not pending:
                    return None
                if len(self.running) < self.jobs:
                    for i, (name, full, resources) in enumerate(pending):
                        if self.can_start(resources):
                            del pending[i]
                            self.running[name] = resources
                            return name, full, resources
                self.lock.wait()

    def finish(self, name, result):
        with self.lock:
            del self.running[name]
            self.results.append(result)
            done = len(self.results)
            executed, skipped, failures, seconds, finished = result[1], result[2], result[3], result[4], result[6]
            verdict = "PASS" if finished and failures == 0 else "FAIL"
            extra = "" if finished else " (did not finish: crashed or timed out)"
            print(f"[{done}/{self.total}] {verdict} {name}: {executed} tests, {failures} failed, "
                  f"{skipped} skipped, {seconds:.1f} s{extra}", flush=True)
            self.lock.notify_all()

    def worker(self, pending):
        while True:
            item = self.take(pending)
            if item is None:
                return
            name = item[0]
            result = (name, 0, 0, 1, 0.0, os.devnull, False)
            try:
                result = self.run_unit(*item)
            except Exception as e:  # a unit that could not run is a failure, and frees its lane
                print(f"run-tests: {name}: {e}", file=sys.stderr, flush=True)
            finally:
                self.finish(name, result)

    def run_unit(self, name, filt, _resources):
        log = os.path.join(self.workdir, name.replace("/", ".") + ".log")
        started = time.monotonic()
        finished = True
        with open(log, "wb") as out:
            # A session of its own: a class that runs past the timeout is stopped with everything
            # it started (daemons, PostgreSQL, sshd), not just the test process.
            p = subprocess.Popen([self.binary, filt], stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            try:
                finished = p.wait(timeout=self.timeout) in (0, 1)
            except subprocess.TimeoutExpired:
                finished = False
                stop_group(p)
                out.write(f"\nrun-tests: {name} stopped after {self.timeout:.0f} s\n".encode())
        seconds = time.monotonic() - started
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        found = SUMMARY.findall(text)
        if found:
            executed, skipped, failures = int(found[-1][0]), int(found[-1][1] or 0), int(found[-1][2])
        else:
            executed, skipped, failures, finished = 0, 0, 0, False
        if not finished:
            failures = max(failures, 1)
        return (name, executed, skipped, failures, seconds, log, finished)

    def run(self, classes):
        # Units that run alone first (later they would wait for every other lane to empty), then
        # the longest first.
        pending = sorted(classes, key=lambda c: ("*" not in c[2], -c[3]))
        pending = [(name, filt, resources) for name, filt, resources, _ in pending]
        self.total = len(pending)
        threads = [threading.Thread(target=self.worker, args=(pending,)) for _ in range(self.jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def stop_group(p):
    """SIGTERM to the unit's whole process group, 5 s, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class SharedFixtures:
    """What the classes share, made for the run if missing; undone after, if made here."""

    def __init__(self):
        self.made_sender = False
        self.made_store = False
        self.log_sink = None

    def __enter__(self):
        if os.geteuid() != 0:
            return self
        self.made_sender = ensure_sender_account()
        store = "/var/lib/pam-totp"
        if not os.path.lexists(store):
            os.mkdir(store, 0o700)
            self.made_store = True
        if not os.path.lexists("/dev/log"):
            sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sink.bind("/dev/log")
            os.chmod("/dev/log", 0o666)
            self.log_sink = (sink, os.stat("/dev/log").st_ino)
            threading.Thread(target=drain, args=(sink,), daemon=True).start()
        return self

    def __exit__(self, *_):
        if self.made_sender:
            subprocess.run(["userdel", "pam-totp-sender"], capture_output=True)
        if self.made_store:
            try:
                os.rmdir("/var/lib/pam-totp")
            except OSError as e:
                print(f"run-tests: /var/lib/pam-totp left as it is: {e}", file=sys.stderr)
        if self.log_sink:
            sink, inode = self.log_sink
            try:
                st = os.lstat("/dev/log")
                if stat.S_ISSOCK(st.st_mode) and st.st_ino == inode:
                    os.unlink("/dev/log")
            except OSError:
                pass
            sink.close()


def drain(sink):
    while True:
        try:
            sink.recv(65536)
        except OSError:
            return


def ensure_sender_account():
    try:
        pwd.getpwnam("pam-totp-sender")
        return False
    except KeyError:
        pass
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "pam-totp-sender"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("run-tests: useradd pam-totp-sender: " + r.stderr)
    return True


def main():
    parser = argparse.ArgumentParser(description="Runs the test classes side by side.")
    parser.add_argument("--binary", required=True)
    parser.add_argument("--plan", default=os.path.join(os.path.dirname(__file__), "..", "Tests", "test-plan.txt"))
    parser.add_argument("--tier", choices=("quick", "full"), default="full")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--log")
    parser.add_argument("--timeout", type=float, default=420)
    args = parser.parse_args()

    chosen = units(read_plan(args.plan), list_tests(args.binary), args.tier)

    if not chosen:
        sys.exit("run-tests: no test class to run")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pam_totp_run_tests.") as workdir, SharedFixtures():
        run = Run(args.binary, max(1, args.jobs), args.timeout, workdir)
        run.run(chosen)
        took = time.monotonic() - started
        results = sorted(run.results)
        if args.log:
            with open(args.log, "w", encoding="utf-8") as out:
                for r in results:
                    with open(r[5], encoding="utf-8", errors="replace") as f:
                        out.write(f.read())
        failed = [r for r in results if r[3] > 0 or not r[6]]
        for r in failed:
            print(f"\n===== {r[0]} =====")
            with open(r[5], encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
            interesting = [l for l in lines if "error:" in l or " failed (" in l or "Fatal error" in l or "Crash" in l]
            print("\n".join(interesting or lines[-40:]))
    executed = sum(r[1] for r in results)
    skipped = sum(r[2] for r in results)
    failures = sum(r[3] for r in results)
    slowest = sorted(results, key=lambda r: -r[4])[:5]
    print("\nslowest classes: " + ", ".join(f"{r[0]} {r[4]:.0f} s" for r in slowest))
    skipped_text = f"{skipped} tests skipped and " if skipped else ""
    print(f"Executed {executed} tests, with {skipped_text}{failures} failures in {took:.1f} seconds "
          f"({len(results)} classes, {run.jobs} at a time)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
