#!/usr/bin/env python3
"""bench-fleet's load: N threads send pam-totpd authenticate requests (the module's frame,
docs/ARCHITECTURE.md, section 5.2) over its Unix socket, one connection per request like the module;
prints logins/s and p50/p99 latency. Codes are computed here (RFC 6238, SHA-1, 6 digits).
race (make bench-fleet PRIVACYIDEA=1, the guarantee run): each of the first USERS users in turn gets its
current code sent CLIENTS times at once (every connection open before any is sent); prints the requests,
the accepted ones and the users accepted more than once (REQUESTS is ignored).

usage: bench-fleet-client.py SOCKET USERS SECRET_HEX CLIENTS REQUESTS STEP_OFFSET|wrong|race
"""
import socket, sys, time
from bench_load import drive, frame, race, report, totp

sock_path, users, secret_hex, clients, requests, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
secret = bytes.fromhex(secret_hex)

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

if mode == "race":
    race(users, clients, connect, lambda u: frame("benchuser%04d" % u, totp(secret, int(time.time()) // 30)), ask, 0)
    sys.exit(0)

answer = "000000" if mode == "wrong" else totp(secret, int(time.time()) // 30 + int(mode))
report(clients, requests, drive(clients, requests, lambda i: ask(frame("benchuser%04d" % (i % users), answer))))
