#!/usr/bin/env python3
"""make bench-fleet PRIVACYIDEA=1: privacyIDEA's side of the bench, after `pi-manage setup create_tables`.
Run by the venv's python with PRIVACYIDEA_CONFIGFILE set. Through privacyIDEA's own library (what
pi-manage and the REST API call; /token/init would also draw three QR codes per token): a passwd-file
resolver over USERS_FILE, the default realm "bench" on it, and for each of its first USERS users one TOTP
token (SHA-1, 6 digits, 30 s step, timeWindow WINDOW seconds) with the secret SECRET_HEX and no PIN (the
pass is the code alone, and no PIN hash is checked: a token given pin="" gets an argon2 hash of the empty
PIN, checked on every /validate/check, about 0.6 s of CPU each on the bench machine against 0.05 s without).

usage: bench-fleet-privacyidea-setup.py PI_CFG USERS_FILE USERS SECRET_HEX WINDOW
"""
import sys

from privacyidea.app import create_app
from privacyidea.lib.realm import set_default_realm, set_realm
from privacyidea.lib.resolver import save_resolver
from privacyidea.lib.token import init_token
from privacyidea.lib.user import User

cfg, users_file, users, secret_hex, window = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
app = create_app(config_name="production", config_file=cfg, silent=True)
with app.app_context():
    save_resolver({"resolver": "benchusers", "type": "passwdresolver", "fileName": users_file})
    set_realm("bench", [{"name": "benchusers"}])
    set_default_realm("bench")
    for i in range(users):
        init_token({"type": "totp", "otpkey": secret_hex, "genkey": 0, "otplen": 6, "hashlib": "sha1",
                    "timeStep": 30, "timeWindow": window, "description": "bench"},
                   user=User("benchuser%04d" % i, realm="bench"))
