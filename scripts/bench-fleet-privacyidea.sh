# scripts/bench-fleet-privacyidea.sh: privacyIDEA beside pam-totpd in make bench-fleet PRIVACYIDEA=1.
# Sourced by scripts/bench-fleet.sh (uses its $dir, $secret and psql). privacyIDEA from PyPI, pinned, in a
# venv kept in $PAM_TOTP_BENCH_CACHE (default /var/cache/pam-totp-bench; made again when the pins change);
# its own database and role on the bench's PostgreSQL, its files under $dir/pi, gunicorn with 4 sync
# workers on 127.0.0.1 (a free port). Needs Debian's python3-venv (the Makefile installs it).
pi_version=3.14 pi_gunicorn=27.0.1 pi_psycopg=2.9.13
# Everything else they bring, as it was when these were measured (pip's constraints: a later release of
# a dependency changes neither the install nor the figures).
pi_constraints="
  alembic==1.20.1 argon2-cffi==25.1.0 argon2-cffi-bindings==26.2.0 async-timeout==5.0.1 babel==2.18.0
  bcrypt==5.0.0 beautifulsoup4==4.15.0 blinker==1.9.0 cbor2==6.3.0 certifi==2026.10.19.post1
  cffi==2.1.1 charset-normalizer==3.5.3 click==8.5.1 configobj==5.0.9 croniter==7.0.0
  cryptography==50.0.2 defusedxml==0.7.1 feedparser==6.0.14 feedparser-sgmllib==2.1.0 Flask==3.1.3
  flask-babel==4.0.0 Flask-Migrate==4.1.0 Flask-SQLAlchemy==3.1.1 flask-talisman==1.1.0
  google-auth==2.63.0 grpcio==1.85.3 huey==3.5.4 idna==3.20 itsdangerous==2.2.0 Jinja2==3.1.6
  ldap3==2.8.1 lxml==6.1.3 Mako==1.4.3 MarkupSafe==3.0.4 msal==1.39.0 netaddr==1.3.0 passlib==1.7.4
  protobuf==7.36.2 pyasn1==0.6.5 pyasn1_modules==0.4.2 pycparser==3.12 pydash==8.1.0 PyJWT==2.15.1
  PyMySQL==1.2.4 pyOpenSSL==26.4.0 pyrad==2.6.0 python-dateutil==4.0.0 python-gnupg==0.5.7
  pytz==2026.6 PyYAML==6.0.4 redis==8.1.0 requests==2.34.2 rfc8785==0.1.4 segno==1.6.6 six==1.17.0
  smpplib==2.2.4 soupsieve==2.10 SQLAlchemy==2.1.9 typing_extensions==4.16.0 tzdata==2026.6
  urllib3==2.8.0 webauthn==3.0.1 Werkzeug==3.1.9"
pi_window=60  # seconds: counters T-2 .. T+1 (see the notes the bench writes)
pi_venv=${PAM_TOTP_BENCH_CACHE:-/var/cache/pam-totp-bench}/privacyidea-venv
pi_pid="" pi_port=""

pi_install() {
  local pins="privacyidea==$pi_version gunicorn==$pi_gunicorn psycopg2-binary==$pi_psycopg"
  [ "$(cat "$pi_venv/pins" 2>/dev/null)" = "$pins $pi_constraints" ] && return
  echo "privacyIDEA: installing $pins into $pi_venv" >&2
  rm -rf "$pi_venv"
  mkdir -p "$(dirname "$pi_venv")"
  /usr/bin/python3 -m venv "$pi_venv"
  # shellcheck disable=SC2086
  printf "%s\n" $pi_constraints > "$pi_venv/constraints.txt"
  # shellcheck disable=SC2086
  "$pi_venv/bin/pip" install -q --disable-pip-version-check -c "$pi_venv/constraints.txt" $pins >&2
  echo "$pins $pi_constraints" > "$pi_venv/pins"
}

pi_start() {
  local users=$1 cfg="$dir/pi/pi.cfg" i
  mkdir -p "$dir/pi"
  psql -c "CREATE ROLE privacyidea LOGIN" -c "CREATE DATABASE privacyidea OWNER privacyidea"
  for i in $(seq 0 $((users - 1))); do printf "benchuser%04d:x:%d:%d::/nonexistent:/usr/sbin/nologin\n" "$i" $((60000 + i)) $((60000 + i)); done > "$dir/pi/users"
  pi_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # pi.cfg is Python. PI_LOGCONFIG names no file, so a host's /etc/privacyidea/logging.cfg is not read;
  # PI_NODE_UUID set, so nothing is written to /etc/privacyidea/uuid.txt.
  cat > "$cfg" <<EOF
SQLALCHEMY_DATABASE_URI = "postgresql+psycopg2://privacyidea@/privacyidea?host=$dir"
SECRET_KEY = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
PI_PEPPER = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
PI_ENCFILE = "$dir/pi/enckey"
PI_AUDIT_KEY_PRIVATE = "$dir/pi/private.pem"
PI_AUDIT_KEY_PUBLIC = "$dir/pi/public.pem"
PI_LOGFILE = "$dir/pi/privacyidea.log"
PI_LOGCONFIG = "$dir/pi/no-logging.cfg"
PI_LOGLEVEL = 30
PI_NODE_UUID = "$(cat /proc/sys/kernel/random/uuid)"
PI_BASE_URL = "http://127.0.0.1:$pi_port"
EOF
  export PRIVACYIDEA_CONFIGFILE=$cfg
  (cd "$dir/pi" && for step in create_enckey create_audit_keys create_tables; do
     "$pi_venv/bin/pi-manage" setup "$step" >"$dir/pi/setup.log" 2>&1 || { cat "$dir/pi/setup.log" >&2; exit 1; }
   done)
  "$pi_venv/bin/python3" "$(dirname "$0")/bench-fleet-privacyidea-setup.py" "$cfg" "$dir/pi/users" "$users" "$secret" "$pi_window"
  "$pi_venv/bin/gunicorn" --workers 4 --bind "127.0.0.1:$pi_port" --chdir "$dir/pi" --no-control-socket \
    "privacyidea.app:create_app(config_name='production', config_file='$cfg', silent=True)" >"$dir/pi/gunicorn.log" 2>&1 </dev/null &
  pi_pid=$!
  for _ in $(seq 150); do
    [ "$(children "$pi_pid" | wc -l)" = 4 ] && python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$pi_port" 2>/dev/null && return
    kill -0 "$pi_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "privacyIDEA (gunicorn) did not start: $(cat "$dir/pi/gunicorn.log")" >&2
  exit 1
}

pi_pids() { echo "$pi_pid" $(children "$pi_pid"); }

pi_reset_failures() { psql -d privacyidea -c "UPDATE token SET failcount = 0" >/dev/null; }

# From cleanup (bench-fleet.sh's EXIT trap): gunicorn's quick shutdown, then whatever is left killed.
pi_stop() {
  [ -n "$pi_pid" ] || return 0
  local workers w; workers=$(children "$pi_pid")
  kill -INT "$pi_pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pi_pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pi_pid" 2>/dev/null || true
  wait "$pi_pid" 2>/dev/null || true
  for w in $workers; do grep -qs gunicorn "/proc/$w/cmdline" && kill -KILL "$w" 2>/dev/null; done
  pi_pid=""
  return 0
}
