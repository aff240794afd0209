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
import http.client, json, os, sys, time, urllib.parse
from bench_load import drive, race, report, totp

hostport, users, secret_hex, clients, requests, mode, state = sys.argv[1], int(sys.argv[2]), sys.argv[3], \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
host, port = hostport.rsplit(":", 1)
secret = bytes.fromhex(secret_hex)

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

if mode == "race":
    fresh_steps()
    race(users, clients, connect, lambda u: ("benchuser%04d" % u, totp(secret, int(time.time()) // 30)),
         lambda request, c: ask(request[0], request[1], c), "true")
    done_steps()
    sys.exit(0)
if mode == "accepted":
    fresh_steps()

def one(i):
    answer = "000000" if mode == "wrong" else totp(secret, int(time.time()) // 30)
    return ask("benchuser%04d" % (i % users), answer)

result = drive(clients, requests, one)
if mode == "accepted":
    done_steps()
report(clients, requests, result)
