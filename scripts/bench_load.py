"""The load both bench-fleet clients drive (scripts/bench-fleet-client.py: pam-totpd's socket;
scripts/bench-fleet-privacyidea-client.py: privacyIDEA over HTTP; scripts/bench-fleet-scale-client.py:
many pam-totpd): the TOTP code, pam-totpd's request, N threads taking requests in turn, the printed
line, and the guarantee run's race."""
import hashlib, hmac, struct, threading, time

def totp(secret, step):
    """RFC 6238, SHA-1, 6 digits."""
    mac = hmac.new(secret, struct.pack(">Q", step), hashlib.sha1).digest()
    o = mac[-1] & 15
    return "%06d" % ((struct.unpack(">I", mac[o:o + 4])[0] & 0x7fffffff) % 1000000)

def frame(user, answer):
    """pam-totpd's authenticate request as the module sends it (docs/ARCHITECTURE.md, section 5.2)."""
    # authenticate, no flags, adjacent_intervals 1, hotp_window 10, hotp_resync_window 100,
    # max_failures 100, lockout 0; factor_kinds all (0x0F), oob_digits 6, oob_max_attempts 3,
    # oob_lifetime 300, oob_resend_interval 30, oob_max_per_hour 5, oob_max_per_day 20 (the
    # defaults); then service, user, store, answer and no previous answer.
    body = bytes([2, 0, 1, 10]) + struct.pack(">H", 100) + bytes([100]) + struct.pack(">I", 0)
    body += bytes([0x0F, 6, 3]) + struct.pack(">HH", 300, 30) + bytes([5, 20])
    for field, wide in ((b"bench", False), (user.encode(), False), (b"/var/lib/pam-totp", True), (answer.encode(), True),
                        (b"", True)):
        body += (struct.pack(">H", len(field)) if wide else bytes([len(field)])) + field
    return b"PTQ4" + struct.pack(">H", len(body)) + body

def drive(clients, requests, one):
    """`clients` threads run one(i) for i in 0..<requests, each i once; returns (elapsed seconds,
    sorted latencies, {reply kind: count})."""
    latencies, kinds, lock = [], {}, threading.Lock()
    counter = iter(range(requests))
    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t = time.perf_counter()
            k = one(i)
            dt = time.perf_counter() - t
            with lock:
                latencies.append(dt)
                kinds[k] = kinds.get(k, 0) + 1
    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads: t.start()
    for t in threads: t.join()
    latencies.sort()
    return time.perf_counter() - started, latencies, kinds

def report(clients, requests, result):
    """CLIENTS REQUESTS LOGINS/S P50_MS P99_MS KIND:COUNT,..."""
    elapsed, latencies, kinds = result
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    print("%d %d %.1f %.2f %.2f %s" % (clients, requests, requests / elapsed, p(0.50), p(0.99),
                                         ",".join("%s:%d" % (k, v) for k, v in sorted(kinds.items()))))

def race(users, clients, connect, prepare, send, accepted):
    """For each of `users` users in turn: its request made once (prepare(user): the same code for
    all), `clients` connections opened (connect()), then send(request, connection) on all of them at
    once; prints CLIENTS REQUESTS ACCEPTED USERS_ACCEPTED_TWICE_OR_MORE KINDS."""
    total, multi, kinds = 0, 0, {}
    for u in range(users):
        request = prepare(u)
        conns = [connect() for _ in range(clients)]
        barrier, got = threading.Barrier(clients), []
        def run(c):
            barrier.wait()
            got.append(send(request, c))
        threads = [threading.Thread(target=run, args=(c,)) for c in conns]
        for t in threads: t.start()
        for t in threads: t.join()
        for k in got:
            kinds[k] = kinds.get(k, 0) + 1
        total += got.count(accepted)
        multi += got.count(accepted) > 1
    print("%d %d %d %d %s" % (clients, users * clients, total, multi, ",".join("%s:%d" % kv for kv in sorted(kinds.items()))))
