#!/usr/bin/env python3
"""bench-fleet-scale's load (scripts/bench-fleet-scale.sh): authenticate requests (the module's frame,
docs/ARCHITECTURE.md, section 5.2, the same as scripts/bench-fleet-client.py's) to a fleet of HOSTS
pam-totpd daemons, SOCKET_DIR/h0.sock .. h<HOSTS-1>.sock, one connection per request like the module.
Request i goes to host i mod HOSTS, for user i mod USERS (benchuser0000 ..). WORKERS processes (not
threads: one Python process would be the bottleneck) take the requests in turn, each one at a time,
so WORKERS requests are in flight.

Modes:
  wrong     code 000000 (counted as a failure; the bench's settings never lock)
  accepted  each user's code of the step current when the run starts (a user's second request
            in that step is refused: the step is used)
  warm      one request (wrong code) to every host in turn, REQUESTS ignored: each daemon has
            made its database connection before a timed run
Prints bench_load.report's line (WORKERS REQUESTS LOGINS/S P50_MS P99_MS KIND:COUNT,...; kind 0
success, 2 wrong code, 4 locked, 6 failed, -1 no or a malformed reply) on stdout, and the client's
own CPU seconds (all processes) on stderr as "client-cpu SECONDS".

usage: bench-fleet-scale-client.py SOCKET_DIR HOSTS USERS SECRET_HEX WORKERS REQUESTS wrong|accepted|warm
"""
import multiprocessing, os, resource, socket, sys, time
from bench_load import frame, report, totp

sock_dir, hosts, users, secret_hex = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
workers, requests, mode = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
secret = bytes.fromhex(secret_hex)
if mode == "warm":
    requests = hosts

def ask(path, data):
    """One request on a new connection; the reply's kind, -1 for none or a malformed one."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(path)
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    except OSError:
        return -1
    finally:
        s.close()
    return out[6] if len(out) > 6 else -1

# The answer is fixed for the run (accepted: the step current now), so every frame is made before
# the clock starts; the sockets' paths too.
answer = totp(secret, int(time.time()) // 30) if mode == "accepted" else "000000"
paths = [os.path.join(sock_dir, "h%d.sock" % k) for k in range(hosts)]
frames = [frame("benchuser%04d" % u, answer) for u in range(users)]

def worker(w, start, results):
    """Requests w, w + WORKERS, ...: (latencies, {kind: count}) onto the queue."""
    latencies, kinds = [], {}
    start.wait()
    for i in range(w, requests, workers):
        t = time.perf_counter()
        k = ask(paths[i % hosts], frames[i % users])
        latencies.append(time.perf_counter() - t)
        kinds[k] = kinds.get(k, 0) + 1
    results.put((latencies, kinds))

if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(w, start, results)) for w in range(workers)]
    for p in procs: p.start()
    start.wait()  # every worker is up: the clock starts with their first requests
    started = time.perf_counter()
    latencies, kinds = [], {}
    for _ in procs:
        l, k = results.get()
        latencies += l
        for kind, n in k.items():
            kinds[kind] = kinds.get(kind, 0) + n
    elapsed = time.perf_counter() - started
    for p in procs: p.join()
    latencies.sort()
    report(workers, requests, (elapsed, latencies, kinds))
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("client-cpu %.2f" % (me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime), file=sys.stderr)
