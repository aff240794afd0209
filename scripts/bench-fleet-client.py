#!/usr/bin/env python3
"""bench-fleet's load: N threads send pam-totpd authenticate requests (the module's frame,
docs/ARCHITECTURE.md, section 5.2) over its Unix socket, one connection per request like the module;
prints logins/s and p50/p99 latency. Codes are computed here (RFC 6238, SHA-1, 6 digits).
race (make bench-fleet PRIVACYIDEA=1, the guarantee run): each of the first USERS users in turn gets its
current code sent CLIENTS times at once (every connection open before any is sent); prints the requests,
the accepted ones and the users accepted more than once (REQUESTS is ignored).

usage: bench-fleet-client.py SOCKET USERS SECRET_HEX CLIENTS REQUESTS STEP_OFFSET|wrong|race
"""
import hashlib, hmac, socket, struct, sys, threading, time

sock_path, users, secret_hex, clients, requests, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
secret = bytes.fromhex(secret_hex)

def code(step):
    mac = hmac.new(secret, struct.pack(">Q", step), hashlib.sha1).digest()
    o = mac[-1] & 15
    return "%06d" % ((struct.unpack(">I", mac[o:o + 4])[0] & 0x7fffffff) % 1000000)

def frame(user, answer):
    # authenticate, no flags, adjacent_intervals 1, hotp_window 10, hotp_resync_window 100,
    # max_failures 100, lockout 0; then service, user, store, answer and no previous answer.
    body = bytes([2, 0, 1, 10]) + struct.pack(">H", 100) + bytes([100]) + struct.pack(">I", 0)
    for field, wide in ((b"bench", False), (user.encode(), False), (b"/var/lib/pam-totp", True), (answer.encode(), True),
                        (b"", True)):
        body += (struct.pack(">H", len(field)) if wide else bytes([len(field)])) + field
    return b"PTQ2" + struct.pack(">H", len(body)) + body

def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock_path)
    return s

def ask(data, s=None):
    s = s or connect()
    s.sendall(data)
    out = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        out += chunk
    s.close()
    return out[6] if len(out) > 6 else -1  # reply kind: 0 success, 2 wrong code, 4 locked, 6 failed

def race():
    accepted, multi, kinds = 0, 0, {}
    for u in range(users):
        data = frame("benchuser%04d" % u, code(int(time.time()) // 30))
        conns = [connect() for _ in range(clients)]
        barrier, got = threading.Barrier(clients), []
        def one(s):
            barrier.wait()
            got.append(ask(data, s))
        threads = [threading.Thread(target=one, args=(s,)) for s in conns]
        for t in threads: t.start()
        for t in threads: t.join()
        for k in got:
            kinds[k] = kinds.get(k, 0) + 1
        accepted += got.count(0)
        multi += got.count(0) > 1
    print("%d %d %d %d %s" % (clients, users * clients, accepted, multi, ",".join("%s:%d" % kv for kv in sorted(kinds.items()))))

if mode == "race":
    race()
    sys.exit(0)

step = int(time.time()) // 30
answer = "000000" if mode == "wrong" else code(step + int(mode))
latencies, kinds, lock = [], {}, threading.Lock()
counter = iter(range(requests))

def worker():
    while True:
        with lock:
            i = next(counter, None)
        if i is None:
            return
        data = frame("benchuser%04d" % (i % users), answer)
        t = time.perf_counter()
        k = ask(data)
        dt = time.perf_counter() - t
        with lock:
            latencies.append(dt)
            kinds[k] = kinds.get(k, 0) + 1

started = time.perf_counter()
threads = [threading.Thread(target=worker) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.perf_counter() - started
latencies.sort()
p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
print("%d %d %.1f %.2f %.2f %s" % (clients, requests, requests / elapsed, p(0.50), p(0.99),
                                     ",".join("%s:%d" % (k, v) for k, v in sorted(kinds.items()))))
