#!/usr/bin/env python3
"""make bench-fleet PRIVACYIDEA=1: the load of scripts/bench-fleet-client.py, sent to privacyIDEA instead.
N threads POST /validate/check (user, pass; the token has no PIN, so pass is the code alone) to
privacyIDEA's gunicorn on 127.0.0.1, a new HTTP connection per request (Connection: close), users
benchuser0000.. in turn; prints logins/s and p50/p99 latency in the same shape. Codes are computed here
(RFC 6238, SHA-1, 6 digits).

accepted: each request sends its user's code of the step current when it is sent. privacyIDEA refuses a
  code whose step is not above the last one it accepted for that token, so the run first waits for a step
  after the last one STATE records (the previous accepted or race run), and writes its own last one there.
wrong: 000000.
race (the guarantee run): each of the first USERS users in turn gets its current code sent CLIENTS times at
  once (every connection open before any is sent); prints the requests, the accepted ones and the users
  accepted more than once (REQUESTS is ignored). Waits on STATE as accepted does.
Reply kinds: true / false (result.value of a 200 reply), or the HTTP status of any other reply.

usage: bench-fleet-privacyidea-client.py HOST:PORT USERS SECRET_HEX CLIENTS REQUESTS accepted|wrong|race STATE
"""
import hashlib, hmac, http.client, json, os, struct, sys, threading, time, urllib.parse

hostport, users, secret_hex, clients, requests, mode, state = sys.argv[1], int(sys.argv[2]), sys.argv[3], \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
host, port = hostport.rsplit(":", 1)
secret = bytes.fromhex(secret_hex)

def code(step):
    mac = hmac.new(secret, struct.pack(">Q", step), hashlib.sha1).digest()
    o = mac[-1] & 15
    return "%06d" % ((struct.unpack(">I", mac[o:o + 4])[0] & 0x7fffffff) % 1000000)

def connect():
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.connect()
    return c

def ask(user, answer, c=None):
    c = c or connect()
    body = urllib.parse.urlencode({"user": user, "pass": answer})
    c.request("POST", "/validate/check", body, {"Content-Type": "application/x-www-form-urlencoded",
                                                "Connection": "close"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        return str(r.status)
    return "true" if json.loads(data)["result"].get("value") is True else "false"

def fresh_steps():
    # Wait for a step above the last one an earlier run sent an accepted code of.
    last = int(open(state).read()) if os.path.exists(state) else -1
    while int(time.time()) // 30 <= last:
        time.sleep(0.2)

def done_steps():
    with open(state, "w") as f:
        f.write("%d\n" % (int(time.time()) // 30))

def race():
    fresh_steps()
    accepted, multi, kinds = 0, 0, {}
    for u in range(users):
        user = "benchuser%04d" % u
        answer = code(int(time.time()) // 30)
        conns = [connect() for _ in range(clients)]
        barrier, got = threading.Barrier(clients), []
        def one(c):
            barrier.wait()
            got.append(ask(user, answer, c))
        threads = [threading.Thread(target=one, args=(c,)) for c in conns]
        for t in threads: t.start()
        for t in threads: t.join()
        for k in got:
            kinds[k] = kinds.get(k, 0) + 1
        accepted += got.count("true")
        multi += got.count("true") > 1
    done_steps()
    print("%d %d %d %d %s" % (clients, users * clients, accepted, multi, ",".join("%s:%d" % kv for kv in sorted(kinds.items()))))

if mode == "race":
    race()
    sys.exit(0)
if mode == "accepted":
    fresh_steps()
latencies, kinds, lock = [], {}, threading.Lock()
counter = iter(range(requests))

def worker():
    while True:
        with lock:
            i = next(counter, None)
        if i is None:
            return
        answer = "000000" if mode == "wrong" else code(int(time.time()) // 30)
        t = time.perf_counter()
        k = ask("benchuser%04d" % (i % users), answer)
        dt = time.perf_counter() - t
        with lock:
            latencies.append(dt)
            kinds[k] = kinds.get(k, 0) + 1

started = time.perf_counter()
threads = [threading.Thread(target=worker) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.perf_counter() - started
if mode == "accepted":
    done_steps()
latencies.sort()
p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
print("%d %d %.1f %.2f %.2f %s" % (clients, requests, requests / elapsed, p(0.50), p(0.99),
                                     ",".join("%s:%d" % (k, v) for k, v in sorted(kinds.items()))))
