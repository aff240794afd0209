#!/usr/bin/env python3
"""bench-fleet's load: N threads send pam-totpd authenticate requests (the module's frame,
docs/ARCHITECTURE.md, section 5.2) over its Unix socket, one connection per request like the module;
prints logins/s and p50/p99 latency. Codes are computed here (RFC 6238, SHA-1, 6 digits).
race (make bench-fleet PRIVACYIDEA=1, the guarantee run): each of the first USERS users in turn gets its
current code sent CLIENTS times at once (every connection open before any is sent); prints the requests,
the accepted ones and the users accepted more than once (REQUESTS is ignored).

usage: bench-fleet-client.py SOCKET USERS SECRET_HEX CLIENTS REQUESTS STEP_OFFSET|wrong|race
"""
import socket, struct, sys, time
from bench_load import drive, race, report, totp

sock_path, users, secret_hex, clients, requests, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
secret = bytes.fromhex(secret_hex)

def frame(user, answer):
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
