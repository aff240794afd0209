#!/usr/bin/env bash
# scripts/bench-fleet.sh: fleet mode's throughput (docs/benchmarks.md, "Fleet mode").
# Usage (as root, Debian 12):  scripts/bench-fleet.sh PAM_TOTPD OUT_MD
# A throwaway PostgreSQL 15 under a temp dir (Unix socket only), init-database, 1,000 users
# enrolled, one pam-totpd with backend = postgresql as a host role; then requests as the module
# sends them (scripts/bench-fleet-client.py) from 1 and 4 concurrent clients: accepted codes
# (every user once, a fresh step per run) and wrong codes. Figures, not assertions.
# With PRIVACYIDEA=1 (make bench-fleet PRIVACYIDEA=1): privacyIDEA from PyPI on the same PostgreSQL
# (scripts/bench-fleet-privacyidea.sh), the same users and client shape, each run alternating with
# pam-totpd's, the CPU each side and PostgreSQL spent per login, and the guarantee run (50 users, each
# user's current code sent 4 times at once, to both); a subsection of the same section.
# Everything it starts is stopped and removed on exit.
set -euo pipefail
daemon=$1 out=$2
privacyidea=${PRIVACYIDEA:-0}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bin=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/pamtotp-fleet-bench.XXXXXX)
chmod 0755 "$dir"; chown postgres "$dir"
pid=""
deliver_pid=""
created_sender=0
[ "$privacyidea" = 1 ] && . "$(dirname "$0")/bench-fleet-privacyidea.sh"
cleanup() {
  [ "$privacyidea" != 1 ] || pi_stop || true
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  [ -n "$deliver_pid" ] && kill "$deliver_pid" 2>/dev/null && wait "$deliver_pid" 2>/dev/null || true
  [ "$created_sender" = 1 ] && userdel pam-totp-sender 2>/dev/null || true
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
[ "$privacyidea" = 1 ] && pi_install
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
piclient="$(dirname "$0")/bench-fleet-privacyidea-client.py"
hz=$(getconf CLK_TCK)
# The pids whose parent is $1 (from /proc: procps may be missing).
children() {
  local f line
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$f" || continue
    line=${line##*) }; line=${line#* }
    [ "${line%% *}" = "$1" ] && { f=${f#/proc/}; echo "${f%/stat}"; }
  done
  return 0
}
# utime+stime of the processes named, in clock ticks; the first one's also with its reaped children's.
ticks() {
  local s=0 first=1 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && s=$((s + $(sed 's/.*) //' "/proc/$p/stat" | awk -v c=$first '{print $12 + $13 + (c ? $14 + $15 : 0)}')))
    first=0
  done
  echo "$s"
}
pg_pids() { local pm; pm=$(head -n 1 "$dir/data/postmaster.pid"); echo "$pm" $(children "$pm"); }
per_login() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN { printf "%.2f", t * 1000 / hz / n }'; }
# timed pam|pi CLIENT_ARGS...: one run's figures | the server's CPU per login (ms) | PostgreSQL's.
timed() {
  local side=$1 s0 p0 r s1 p1 n; shift
  if [ "$side" = pam ]; then s0=$(ticks "$pid"); else s0=$(ticks $(pi_pids)); fi
  p0=$(ticks $(pg_pids))
  if [ "$side" = pam ]; then r=$(python3 "$client" "$dir/socket" 1000 "$secret" "$@") || return
  else r=$(python3 "$piclient" "127.0.0.1:$pi_port" 1000 "$secret" "$@" "$dir/pi/steps") || return; fi
  if [ "$side" = pam ]; then s1=$(ticks "$pid"); else s1=$(ticks $(pi_pids)); fi
  p1=$(ticks $(pg_pids))
  read -r _ n _ <<<"$r"
  echo "$r|$(per_login $((s1 - s0)) "$n")|$(per_login $((p1 - p0)) "$n")"
}
reset_failures() {
  psql -d fleet -c "UPDATE pam_totp.users SET failures = 0" >/dev/null
  [ "$privacyidea" = 1 ] && pi_reset_failures
  return 0
}
# run WHAT CLIENTS PAM_MODE PI_MODE: pam-totpd's run, then (PRIVACYIDEA=1) privacyIDEA's.
rows=() both=()
run() {
  local r
  r=$(timed pam "$2" 1000 "$3")
  rows+=("$1|${r%%|*}") both+=("$1|pam_totp|$r")
  if [ "$privacyidea" = 1 ]; then r=$(timed pi "$2" 1000 "$4"); both+=("$1|privacyIDEA|$r"); fi
}
[ "$privacyidea" = 1 ] && pi_start 1000
# Warm-up (connections into the pool; privacyIDEA's workers through their first requests), then the runs.
python3 "$client" "$dir/socket" 1000 "$secret" 4 200 wrong >/dev/null
[ "$privacyidea" = 1 ] && python3 "$piclient" "127.0.0.1:$pi_port" 1000 "$secret" 4 200 wrong "$dir/pi/steps" >/dev/null
reset_failures
run "accepted code" 1 0 accepted
run "accepted code" 4 1 accepted
# The last step pam-totpd's runs sent a code of is at most this one (the guarantee run waits for a later one).
pam_used=$(( $(date +%s) / 30 + 1 ))
reset_failures
run "wrong code" 1 wrong wrong
run "wrong code" 4 wrong wrong
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
if [ "$privacyidea" = 1 ]; then
  # The guarantee run: 50 users, each user's current code sent 4 times at once, to each side.
  reset_failures
  while [ $(( $(date +%s) / 30 )) -le "$pam_used" ]; do sleep 1; done
  race_pam=$(python3 "$client" "$dir/socket" 50 "$secret" 4 200 race)
  race_pi=$(python3 "$piclient" "127.0.0.1:$pi_port" 50 "$secret" 4 200 race "$dir/pi/steps")
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  pi_versions="privacyIDEA $("$pi_venv/bin/python3" -c 'import importlib.metadata as m; print(m.version("privacyidea"))'),\
 gunicorn $pi_gunicorn, psycopg2-binary $pi_psycopg, $("$pi_venv/bin/python3" --version)"
fi
# The floor under a fleet login (scripts/bench-fleet-floor.sql): two commits alone, then the
# writes an accepted code makes, with none of the checks; psql straight into PostgreSQL (no
# pam-totpd, no Python client), 1,000 calls per run over the same users, from 1 and 4 clients.
psql -d fleet -f "$(dirname "$0")/bench-fleet-floor.sql" >/dev/null
# floor_run PROCEDURE CLIENTS: "calls/s|PostgreSQL CPU per call (ms)"
floor_run() {
  local proc=$1 c=$2 k i p0 p1 t0 t1 pids=()
  for k in $(seq 0 $((c - 1))); do
    for i in $(seq "$k" "$c" 999); do printf "CALL bench_floor.%s('benchuser%04d');\n" "$proc" "$i"; done > "$dir/floor.$k.sql"
  done
  p0=$(ticks $(pg_pids)); t0=$(date +%s%N)
  for k in $(seq 0 $((c - 1))); do psql -d fleet -f "$dir/floor.$k.sql" >/dev/null & pids+=($!); done
  for k in "${pids[@]}"; do wait "$k" || { echo "bench-fleet: a floor run of $proc failed" >&2; return 1; }; done
  t1=$(date +%s%N)
  sleep 0.3   # the backends' exit, reaped by the postmaster: their CPU is then its children's
  p1=$(ticks $(pg_pids))
  echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", 1000 * 1e9 / (b - a) }')|$(per_login $((p1 - p0)) 1000)"
}
floors=()
for proc in two_commits required_writes; do
  for c in 1 4; do r=$(floor_run "$proc" "$c") || exit 1; floors+=("$proc|$c|$r"); done
done
# A run whose requests got no reply or a malformed one (kind -1: e.g. a client speaking an older
# protocol than the daemon) measured nothing: stop rather than report it.
for r in "${rows[@]}"; do
  case "${r#*|}" in *-1:*) echo "bench-fleet: requests failed ($r): is scripts/bench-fleet-client.py's frame pam-totpd's protocol?" >&2; exit 1;; esac
done
# Sends per second through `pam-totpd deliver` (text-message and email codes, docs/FLEET.md):
# 1,000 messages queued by send_code (the owner's session; the fleet's per-minute limit raised for
# the run), one for each user's phone; then one deliverer, logged in as a pam_totp_sender role,
# drains the outbox, running a sender that reads its message and exits 0 (as pam-totp-sender,
# created as make install does if missing and removed after). Timed from its start to the last
# message recorded as sent; its own CPU (not the senders') per message.
if ! getent passwd pam-totp-sender >/dev/null; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group pam-totp-sender
  created_sender=1
fi
printf '#!/bin/sh\ncat >/dev/null\n' > "$dir/sender"
chmod 0755 "$dir/sender"
queued=$(psql -d fleet -c "UPDATE pam_totp.settings SET oob_max_per_minute = 10000;
  CREATE ROLE bench_sender LOGIN; GRANT pam_totp_sender TO bench_sender;
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind, destination)
    SELECT 'benchuser' || lpad(i::text, 4, '0'), 'mobile', 'sha1', 6, 30, 0, 0, NULL, 'sms', '+1510555' || lpad(i::text, 4, '0')
      FROM generate_series(0, 999) i;
  SELECT count(*) FROM generate_series(0, 999) i, pam_totp_api.send_code('benchuser' || lpad(i::text, 4, '0'), 60000 + i, 'mobile', 'bench') s
   WHERE s.outcome = 'sent'" | tail -1)
[ "$queued" = 1000 ] || { echo "send_code queued $queued of 1000 messages" >&2; exit 1; }
printf "backend = postgresql\npostgresql = host=%s user=bench_sender dbname=fleet\nsms_command = %s/sender\n" "$dir" "$dir" > "$dir/deliver.conf"
t0=$(date +%s.%N)
"$daemon" deliver --config "$dir/deliver.conf" >"$dir/deliver.log" 2>&1 &
deliver_pid=$!
sent=0
for _ in $(seq 1200); do
  sent=$(psql -d fleet -c "SELECT count(*) FROM pam_totp.outbox WHERE outcome = 'sent'")
  [ "$sent" = 1000 ] && break
  sleep 0.1
done
t1=$(date +%s.%N)
[ "$sent" = 1000 ] || { echo "deliver sent $sent of 1000 messages in 120 s: $(tail -3 "$dir/deliver.log")" >&2; exit 1; }
read -r -a dstat <"/proc/$deliver_pid/stat"
kill "$deliver_pid"; wait "$deliver_pid" 2>/dev/null || true; deliver_pid=""
deliver_rate=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", 1000 / (b - a) }')
deliver_cpu=$(awk -v u="${dstat[13]}" -v s="${dstat[14]}" -v hz="$hz" 'BEGIN { printf "%.2f", (u + s) * 1000 / hz / 1000 }')
deliver_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
# Last: the same pam-totpd and client with the login's SQL work gone (scripts/bench-fleet-floor-login.sql
# replaces pam_totp_api.login with the required writes alone, answering success to any code).
psql -d fleet -f "$(dirname "$0")/bench-fleet-floor-login.sql" >/dev/null
for c in 1 4; do
  r=$(timed pam "$c" 1000 wrong)
  case "$r" in *" 0:1000|"*) ;; *) echo "bench-fleet: the floor login did not answer success to every request ($r)" >&2; exit 1;; esac
  floors+=("pam-totpd with only the required writes|$c|$(awk '{print $3}' <<<"${r%%|*}")|$(cut -d'|' -f3 <<<"$r")")
done
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
  echo
  echo "Text-message codes through \`pam-totpd deliver\`: 1,000 messages queued by send_code (one per user's phone), then one"
  echo "deliverer (a pam_totp_sender role) claimed, sent and recorded them all in $deliver_wall s: **$deliver_rate sends/s**, each"
  echo "message one claim, one fork and exec of the sender (as pam-totp-sender, reading its message and exiting 0) and one"
  echo "outbox_done; the deliverer's own CPU $deliver_cpu ms a message (the senders' not counted). In use the fleet's"
  echo "oob_max_per_minute (60 by default) bounds sends long before this; several deliverers may run (each message is"
  echo "claimed by one)."
  echo
  echo "### The floor under a fleet login"
  echo
  echo "A fleet login makes its attempt durable before it tells the verdict (docs/ARCHITECTURE.md, section 8, rule (b)):"
  echo "two commits, each a flush of PostgreSQL's write-ahead log. scripts/bench-fleet-floor.sql makes only the writes, with"
  echo "none of the checks (no HMAC, lock-out logic, helper functions or daemon), called by psql (a C client) straight into"
  echo "the same PostgreSQL, the same 1,000 users, 1,000 calls per run: what no implementation of the rules goes below here."
  echo "two_commits: one row updated, a commit, the row updated again. required_writes: an accepted code's writes (the"
  echo "failure counted and the attempt stored; a commit; the attempt removed, the used step, the failures cleared and the"
  echo "proof, one audit row). The last rows: the same pam-totpd, Python client and users as the first table, at the end of"
  echo "the run, with pam_totp_api.login replaced by required_writes answering success (scripts/bench-fleet-floor-login.sql):"
  echo "a login through the daemon with only its SQL checks gone."
  echo
  echo "| floor | concurrent clients | calls/s | PostgreSQL CPU per call (ms) |"
  echo "| --- | ---: | ---: | ---: |"
  for r in "${floors[@]}"; do
    IFS='|' read -r proc c rate cpu <<<"$r"
    echo "| $proc | $c | $rate | $cpu |"
  done
  if [ "$privacyidea" = 1 ]; then
    echo
    echo "### Beside privacyIDEA, on the same PostgreSQL"
    echo
    echo "\`make bench-fleet PRIVACYIDEA=1\`, the same run: $pi_versions, installed from PyPI"
    echo "into a venv. gunicorn with 4 sync workers on 127.0.0.1; privacyIDEA's own database (and role) on the same PostgreSQL 15"
    echo "instance over its Unix socket; otherwise its defaults: the SQL audit log in that database, audit entries and responses"
    echo "signed (RSA 2048); PI_LOGLEVEL WARNING. The same 1,000 users (benchuser0000..0999, a passwd-format file read by a"
    echo "passwdresolver, default realm), each with one TOTP token of the same secret (SHA-1, 6 digits, 30 s) and no PIN, so the"
    echo "pass is the code alone. (A token enrolled with pin=\"\" instead gets an argon2 hash of the empty PIN, verified on every"
    echo "request: about 0.6 s of CPU each, measured by hand on this machine.) The passwdresolver reads its file again in each"
    echo "request that looks a user up (about 5 ms of CPU for these 1,000 lines, measured by hand)."
    echo
    echo "Windows: pam_totp, adjacent_intervals 1: steps T-1, T, T+1 of the clock. privacyIDEA, timeWindow $pi_window s: it checks"
    echo "counters T-2 .. T+1 (range(T - w, T + w), w = timeWindow / 30), where T is the token's clock: the server's plus the"
    echo "timeShift privacyIDEA stores at each accepted code. 30 s would check only T-1 and T, and the shift learned from an"
    echo "accepted code (up to 29 s back) then leaves the current code outside it."
    echo
    echo "Client: scripts/bench-fleet-privacyidea-client.py, the same shape: a new connection per request (POST"
    echo "/validate/check, Connection: close), 1 or 4 threads, 1,000 requests per run, users in turn. Accepted: each request"
    echo "sends its user's code of the step current then; privacyIDEA refuses a step at or below the last one it accepted, so each"
    echo "of its accepted runs starts in a step after the previous one's last. Wrong: 000000. The runs alternate, pam_totp then"
    echo "privacyIDEA, in the order of the table. CPU per login: the server's utime+stime during the run (pam-totpd; gunicorn's"
    echo "master and workers) and PostgreSQL's (the postmaster, its backends and those that exited), divided by the requests;"
    echo "the Python clients' own CPU is not counted, though they share the $(nproc) cores. Load average (1, 5, 15 min) when the"
    echo "script started: $load_before; when the guarantee run ended: $load_after."
    echo
    echo "| answer | system | concurrent clients | requests | logins/s | p50 (ms) | p99 (ms) | server CPU per login (ms) | PostgreSQL CPU per login (ms) | replies |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    for r in "${both[@]}"; do
      IFS='|' read -r what system figures server_ms pg_ms <<<"$r"
      read -r c n rate p50 p99 kinds <<<"$figures"
      echo "| $what | $system | $c | $n | $rate | $p50 | $p99 | $server_ms | $pg_ms | $kinds |"
    done
    echo
    echo "Replies: pam-totpd's kinds (0 success, 2 wrong code); privacyIDEA's result.value (true, false)."
    echo
    echo "The guarantee run: 50 users (benchuser0000..0049), each user's current code sent 4 times at once (4 connections open,"
    echo "then the 4 requests together), user after user, to each side; a code of a step not yet used by that user."
    echo
    echo "| system | requests | accepted | users accepted twice or more | replies |"
    echo "| --- | ---: | ---: | ---: | --- |"
    read -r _ n acc multi kinds <<<"$race_pam"; echo "| pam_totp | $n | $acc | $multi | $kinds |"
    read -r _ n acc multi kinds <<<"$race_pi"; echo "| privacyIDEA | $n | $acc | $multi | $kinds |"
    echo
    echo "What each guarantees. pam_totp: a code is single use fleet-wide. pam_totp_api.login takes the user's row lock"
    echo "(SELECT ... FOR UPDATE) before it judges the code, and a step is accepted only above the one stored, in the same"
    echo "transaction; a concurrent request with the same code waits for that lock and then finds the step used: one accepted"
    echo "request per user, whatever the number of hosts. privacyIDEA 3.14: /validate/check reads the token, compares the code's"
    echo "counter with the stored one and writes the new one, with no lock on the token's row (the only FOR UPDATE in its"
    echo "library is in lost-token and user-settings code), at PostgreSQL's default READ COMMITTED: a reused code is refused"
    echo "once the request that used it has committed, but requests that read the token before that commit all accept it."
  fi
} | tee -a "$out"
