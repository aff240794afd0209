#!/usr/bin/env bash
# scripts/bench-fleet.sh: fleet mode's throughput (docs/benchmarks.md, "Fleet mode").
# Usage (as root, Debian 12):  scripts/bench-fleet.sh PAM_TOTPD OUT_MD
# A throwaway PostgreSQL 15 under a temp dir (Unix socket only), init-database, 1,000 users
# enrolled, one pam-totpd with backend = postgresql as a host role; then requests as the module
# sends them (scripts/bench-fleet-client.py) from 1 and 4 concurrent clients: accepted codes
# (every user once, a fresh step per run) and wrong codes. Figures, not assertions.
# Everything it starts is stopped and removed on exit.
set -euo pipefail
daemon=$1 out=$2
bin=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/pamtotp-fleet-bench.XXXXXX)
chmod 0755 "$dir"; chown postgres "$dir"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
printf "listen_addresses = ''\nunix_socket_directories = '%s'\nport = 5432\n" "$dir" >> "$dir/data/postgresql.conf"
runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null </dev/null
psql() { command psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$dir" -U postgres "$@"; }
psql -c "CREATE DATABASE fleet"
"$daemon" init-database --admin "host=$dir user=postgres dbname=fleet" >/dev/null
secret=3132333435363738393031323334353637383930
psql -d fleet -c "UPDATE pam_totp.settings SET max_failures = 100, min_lockout = 0;
  CREATE ROLE bench_host LOGIN; GRANT pam_totp_host TO bench_host;
  SELECT count(pam_totp_api.enroll('benchuser' || lpad(i::text, 4, '0'), 60000 + i, 'phone', 'sha1', 6, 30, 0, 0, '\\x$secret'))
    FROM generate_series(0, 999) i" >/dev/null
# The 1,000 accounts exist only for the daemon: a copy of /etc with them in its passwd,
# bind-mounted over /etc in a private mount namespace (nothing on the system changes; the
# whole directory, because a useradd elsewhere renames /etc/passwd, which would drop a mount
# on that one file).
cp -a /etc "$dir/etc"
for i in $(seq 0 999); do printf "benchuser%04d:x:%d:%d::/nonexistent:/usr/sbin/nologin\n" "$i" $((60000 + i)) $((60000 + i)); done >> "$dir/etc/passwd"
printf "backend = postgresql\npostgresql = host=%s user=bench_host dbname=fleet\nsocket = %s/socket\nmax_failures = 100\nlockout = 0\n" "$dir" "$dir" > "$dir/pam_totp.conf"
unshare -m sh -c 'mount --bind "$1/etc" /etc && exec "$2" --config "$1/pam_totp.conf"' sh "$dir" "$daemon" >"$dir/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$dir/socket" ] && break; sleep 0.1; done
[ -S "$dir/socket" ] || { echo "pam-totpd did not start: $(cat "$dir/daemon.log")" >&2; exit 1; }
client="$(dirname "$0")/bench-fleet-client.py"
# Warm-up (connections into the pool), then the runs.
python3 "$client" "$dir/socket" 1000 "$secret" 4 200 wrong >/dev/null
psql -d fleet -c "UPDATE pam_totp.users SET failures = 0" >/dev/null
rows=()
rows+=("accepted code|$(python3 "$client" "$dir/socket" 1000 "$secret" 1 1000 0)")
rows+=("accepted code|$(python3 "$client" "$dir/socket" 1000 "$secret" 4 1000 1)")
psql -d fleet -c "UPDATE pam_totp.users SET failures = 0" >/dev/null
rows+=("wrong code|$(python3 "$client" "$dir/socket" 1000 "$secret" 1 1000 wrong)")
rows+=("wrong code|$(python3 "$client" "$dir/socket" 1000 "$secret" 4 1000 wrong)")
daemon_cpu=$(awk '{print $14 + $15}' /proc/$pid/stat)
# Scale: 99,000 more accounts in the daemon's passwd, before the 1,000 users (each look-up is
# then of an account near the end of a 100,000-line file). Renamed into place under the
# running daemon, as useradd does: its account cache sees the new file at the next request.
{ cat /etc/passwd
  for i in $(seq 0 98999); do printf "filler%05d:x:%d:%d::/nonexistent:/usr/sbin/nologin\n" "$i" $((100000 + i)) $((100000 + i)); done
  for i in $(seq 0 999); do printf "benchuser%04d:x:%d:%d::/nonexistent:/usr/sbin/nologin\n" "$i" $((60000 + i)) $((60000 + i)); done
} > "$dir/etc/passwd.new"
mv "$dir/etc/passwd.new" "$dir/etc/passwd"
accounts=$(wc -l < "$dir/etc/passwd")
psql -d fleet -c "UPDATE pam_totp.users SET failures = 0" >/dev/null
rows+=("wrong code, $accounts accounts in passwd|$(python3 "$client" "$dir/socket" 1000 "$secret" 1 1000 wrong)")
rows+=("wrong code, $accounts accounts in passwd|$(python3 "$client" "$dir/socket" 1000 "$secret" 4 1000 wrong)")
pg_statements=$(psql -d fleet -c "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname = 'fleet'")
# Replaces the section an earlier run wrote (make bench keeps it when it rewrites the file).
if [ -f "$out" ]; then
  sed -i '/^## Fleet mode/,$d' "$out"
  sed -i -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$out"  # no trailing blank lines
fi
{
  echo
  echo "## Fleet mode (backend = postgresql)"
  echo
  echo "\`make bench-fleet\` ($(date -u +%Y-%m-%d), $(nproc) cores): one pam-totpd with backend = postgresql, as a host role"
  echo "(pam_totp_host), against a local PostgreSQL 15 on a Unix socket, 1,000 enrolled users (SHA-1, 6 digits, window 1)."
  echo "Each request is the module's frame on a new connection (scripts/bench-fleet-client.py), as root, 1,000 per run,"
  echo "users in turn. Accepted: every user's code of a fresh step. Wrong: 000000 (counted, no lockout)."
  echo "The daemon makes one database call per request (CALL pam_totp_api.login: the account check, the attempt committed, then the verdict)."
  echo
  echo "| answer | concurrent clients | requests | logins/s | p50 (ms) | p99 (ms) | replies (kind:count; 0 success, 2 wrong code) |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  for r in "${rows[@]}"; do
    what=${r%%|*}; read -r c n rate p50 p99 kinds <<<"${r#*|}"
    echo "| $what | $c | $n | $rate | $p50 | $p99 | $kinds |"
  done
  echo
  echo "The last two rows: the same 1,000 users after 99,000 other accounts in the daemon's /etc/passwd. pam-totpd reads the"
  echo "file once per version (its account cache, pam-totpd(8)), so a request costs what it does with a short file; before the"
  echo "cache, every request's getpwnam scanned the file (about 100 logins/s at 100,000 lines)."
  echo
  echo "Module side: pam_totp.so in fleet mode takes the same path as a caller without root (one request to pam-totpd,"
  echo "no database client in the module): see \"The daemon path\" above for its instructions above the floor."
} | tee -a "$out"
