#!/usr/bin/env bash
# scripts/bench-fleet-scale.sh: a fleet of N hosts on one database, through PgBouncer or direct
# (docs/FLEET.md, "Through a pooler"; docs/benchmarks.md, "Fleet mode").
# Usage (as root, Debian 12):  HOSTS=N [POOL=pgbouncer|direct] scripts/bench-fleet-scale.sh PAM_TOTPD
#   (make bench-fleet HOSTS=N [POOL=pgbouncer|direct])
# A throwaway PostgreSQL 15 under a temp dir (its Unix socket, and 127.0.0.1 on a free port),
# init-database, 1,000 users enrolled (settings that never lock); N pam-totpd daemons, each a host
# with its own configuration and socket, all in one private mount namespace whose /etc has the
# bench users; then scripts/bench-fleet-scale-client.py sends wrong codes (000000, counted) spread
# over the hosts: a warm-up request to every host, then max(10000, 10 N) requests timed.
# POOL=pgbouncer: the hosts go through Debian's PgBouncer (transaction pooling, 20 server
# connections), all as one shared login role, each host named by its own credential (pam-totpd
# add-host); then the same N hosts straight to PostgreSQL, each with a role of its own, side by side.
# POOL=direct: that second run alone.
# Printed (stdout), per run: the server connections PostgreSQL had for the fleet's database at
# the peak, logins/s, p50/p99, how many hosts the audit trail tells apart, and CPU per login.
# Optional: CLIENTS (8: requests in flight, one client process each), REQUESTS (max(10000, 10 N)),
# CREDENTIALS (1 | 0: use pam-totpd add-host or not),
# NET (unix | tcp: how hosts and PgBouncer reach their server; unix by default).
# Everything it starts is stopped and removed on exit; nothing on the system changes.
set -euo pipefail
daemon=$1
hosts=${HOSTS:-}
pool=${POOL:-pgbouncer}
clients=${CLIENTS:-8}
net=${NET:-unix}
usage() { echo "usage: HOSTS=N [POOL=pgbouncer|direct] $0 PAM_TOTPD  (make bench-fleet HOSTS=N POOL=pgbouncer|direct)" >&2; exit 2; }
[[ "$hosts" =~ ^[1-9][0-9]*$ ]] || usage
case "$pool" in pgbouncer) runs=(pgbouncer direct) ;; direct) runs=(direct) ;; *) usage ;; esac
case "$net" in unix|tcp) ;; *) usage ;; esac
requests=${REQUESTS:-$(( hosts * 10 > 10000 ? hosts * 10 : 10000 ))}
bin=/usr/lib/postgresql/15/bin
pgbouncer=/usr/sbin/pgbouncer
[ -x "$bin/postgres" ] || { echo "bench-fleet-scale: PostgreSQL 15 is not installed ($bin)" >&2; exit 1; }
[ "$pool" = direct ] || [ -x "$pgbouncer" ] || { echo "bench-fleet-scale: PgBouncer is not installed ($pgbouncer)" >&2; exit 1; }
client="$(dirname "$0")/bench-fleet-scale-client.py"
hz=$(getconf CLK_TCK)
log() { echo "bench-fleet-scale: $*" >&2; }
dir=$(mktemp -d /tmp/pamtotp-fleet-scale.XXXXXX)
chmod 0755 "$dir"; chown postgres "$dir"
fleet_pid="" poll_pid=""
# The fleet: one shell in a private mount namespace (its pid) and the daemons it started ($dir/fleet.pids).
stop_fleet() {
  [ -n "$fleet_pid" ] || return 0
  local p left
  kill -STOP "$fleet_pid" 2>/dev/null || true      # it starts no more daemons
  [ -f "$dir/fleet.pids" ] && xargs -r kill <"$dir/fleet.pids" 2>/dev/null || true
  kill -KILL "$fleet_pid" 2>/dev/null || true
  wait "$fleet_pid" 2>/dev/null || true
  fleet_pid=""
  # The daemons are not this shell's children (the fleet shell's, now init's): wait for them to go.
  for _ in $(seq 100); do
    left=0
    if [ -f "$dir/fleet.pids" ]; then
      while read -r p; do [ -d "/proc/$p" ] && { left=1; break; }; done <"$dir/fleet.pids"
    fi
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  [ -f "$dir/fleet.pids" ] && xargs -r kill -KILL <"$dir/fleet.pids" 2>/dev/null || true
  rm -f "$dir/fleet.pids"
}
stop_pgbouncer() {
  local p
  [ -f "$dir/pgbouncer.pid" ] || return 0
  p=$(cat "$dir/pgbouncer.pid")
  kill "$p" 2>/dev/null || true
  for _ in $(seq 50); do [ -d "/proc/$p" ] || break; sleep 0.1; done
  rm -f "$dir/pgbouncer.pid"
}
cleanup() {
  [ -z "$poll_pid" ] || { touch "$dir/poll.stop"; wait "$poll_pid" 2>/dev/null; } || true
  stop_fleet || true
  stop_pgbouncer || true
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# File descriptors: PgBouncer holds one per host connection (each host up to its 4 workers'
# connections when busy) and its server connections; this shell's limit goes to PgBouncer
# (checked once it runs) and to the daemons.
need_fds=$(( hosts * 5 + 100 + 200 ))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" || { log "cannot raise the open-files limit to $need_fds"; exit 1; }
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pg_port=$(free_port)
# PostgreSQL: in the direct run a host keeps a connection for each of its requests that ran at
# once (up to its 4 workers, and no more than CLIENTS), and some to spare.
runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
printf "listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nport = %d\nmax_connections = %d\nshared_buffers = 128MB\n" \
  "$dir" "$pg_port" $(( hosts * (clients < 4 ? clients : 4) + 20 )) >> "$dir/data/postgresql.conf"
runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null </dev/null
psql() { command psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$dir" -p "$pg_port" -U postgres "$@"; }
admin="host=$dir port=$pg_port user=postgres dbname=fleet"
psql -c "CREATE DATABASE fleet"
"$daemon" init-database --admin "$admin" >/dev/null
secret=3132333435363738393031323334353637383930
psql -d fleet -c "UPDATE pam_totp.settings SET max_failures = 100, min_lockout = 0;
  SELECT count(pam_totp_api.enroll('benchuser' || lpad(i::text, 4, '0'), 60000 + i, 'phone', 'sha1', 6, 30, 0, 0, '\\x$secret'))
    FROM generate_series(0, 999) i" >/dev/null

# Host identities: each host a credential of its own (pam-totpd add-host: a key in the database,
# FILE written 0600 for root), named by it in the audit trail; through PgBouncer every host logs in
# as one shared role in pam_totp_pooled; direct, each also with a login role of its own.
# CREDENTIALS=0 (a comparison): no credentials, the shared role in pam_totp_host (the audit trail
# then sees one caller through the pool).
credentials=${CREDENTIALS:-1}
pooled_group=pam_totp_pooled; [ "$credentials" = 1 ] || pooled_group=pam_totp_host
direct_group=pam_totp_host
[ "$pool" = direct ] || psql -d fleet -c "CREATE ROLE bench_pool LOGIN; GRANT $pooled_group TO bench_pool" >/dev/null
psql -d fleet -c "DO \$\$ BEGIN
  FOR k IN 0..$((hosts - 1)) LOOP
    EXECUTE format('CREATE ROLE %I LOGIN', 'bench_host' || k);
    EXECUTE format('GRANT $direct_group TO %I', 'bench_host' || k);
  END LOOP; END \$\$" >/dev/null
if [ "$credentials" = 1 ]; then
  # bench-host-K, its credential $dir/cred/hK.cred (about 15 ms each).
  mkdir -m 0700 "$dir/cred"
  t0=$(date +%s%N)
  seq 0 $((hosts - 1)) | xargs -r -P 4 -I{} "$daemon" add-host bench-host-{} --credential "$dir/cred/h{}.cred" --admin "$admin" \
    >>"$dir/add-host.log" 2>&1 || { log "add-host failed: $(tail -3 "$dir/add-host.log")"; exit 1; }
  log "add-host: $hosts hosts in $(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }') s"
fi

# PgBouncer (Debian's, as postgres): transaction pooling, 20 server connections for the fleet's
# database whatever the number of hosts, trust (a local bench; every name it takes is in its
# auth_file), a Unix socket in $dir/pgbouncer and 127.0.0.1 on a free port.
pgb_port=""
start_pgbouncer() {
  local p
  pgb_port=$(free_port)
  mkdir -p "$dir/pgbouncer"; chown postgres "$dir/pgbouncer"
  printf '"bench_pool" ""\n' > "$dir/pgbouncer/userlist.txt"
  local server="host=$dir port=$pg_port"; [ "$net" = unix ] || server="host=127.0.0.1 port=$pg_port"
  cat > "$dir/pgbouncer/pgbouncer.ini" <<EOF
[databases]
fleet = $server dbname=fleet

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pgb_port
unix_socket_dir = $dir/pgbouncer
listen_backlog = 4096
auth_type = trust
auth_file = $dir/pgbouncer/userlist.txt
pool_mode = transaction
max_client_conn = $(( hosts * 5 + 100 ))
default_pool_size = 20
max_db_connections = 20
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer/pgbouncer.log
pidfile = $dir/pgbouncer.pid
log_connections = 0
log_disconnections = 0
EOF
  chown -R postgres "$dir/pgbouncer"
  # runuser's pam_limits gives postgres init's soft open-files limit (1024): raised again to this
  # shell's, within the hard limit it keeps.
  runuser -u postgres -- sh -c 'ulimit -n "$1" && exec "$2" -d -q "$3"' sh "$(ulimit -n)" "$pgbouncer" "$dir/pgbouncer/pgbouncer.ini" </dev/null
  for _ in $(seq 50); do [ -s "$dir/pgbouncer.pid" ] && break; sleep 0.1; done
  [ -s "$dir/pgbouncer.pid" ] || { log "PgBouncer did not start: $(tail -3 "$dir/pgbouncer/pgbouncer.log")"; exit 1; }
  p=$(cat "$dir/pgbouncer.pid")
  local fds; fds=$(awk '/^Max open files/ { print $4 }' "/proc/$p/limits")
  if [ "$fds" != unlimited ] && [ "$fds" -lt $(( hosts * 5 + 100 + 50 )) ]; then
    log "PgBouncer may open only $fds files, fewer than max_client_conn and its server connections"; exit 1
  fi
}

# The 1,000 accounts exist only for the daemons: a copy of /etc with them in its passwd,
# bind-mounted over /etc in a private mount namespace (as scripts/bench-fleet.sh does).
cp -a /etc "$dir/etc"
for i in $(seq 0 999); do printf "benchuser%04d:x:%d:%d::/nonexistent:/usr/sbin/nologin\n" "$i" $((60000 + i)) $((60000 + i)); done >> "$dir/etc/passwd"
mkdir "$dir/conf" "$dir/logs"

# start_fleet pgbouncer|direct: a configuration per host, then ONE unshare -m whose shell bind-mounts
# /etc and starts the N daemons in the background (their pids in $dir/fleet.pids) and waits;
# returns once every host's socket is there.
fleet_start_s=""
start_fleet() {
  local run=$1 k conninfo t0 n=0 limit
  for k in $(seq 0 $((hosts - 1))); do
    if [ "$run" = pgbouncer ]; then
      conninfo="user=bench_pool dbname=fleet"
      if [ "$net" = unix ]; then conninfo="host=$dir/pgbouncer port=$pgb_port $conninfo"; else conninfo="host=127.0.0.1 port=$pgb_port $conninfo"; fi
    else
      conninfo="user=bench_host$k dbname=fleet"
      if [ "$net" = unix ]; then conninfo="host=$dir port=$pg_port $conninfo"; else conninfo="host=127.0.0.1 port=$pg_port $conninfo"; fi
    fi
    { printf "backend = postgresql\npostgresql = %s\nsocket = %s/sock/h%d.sock\n" "$conninfo" "$dir" "$k"
      printf "max_failures = 100\nlockout = 0\ndb_idle_timeout = 60\n"
      [ "$credentials" = 0 ] || printf "host_credential = %s/cred/h%d.cred\n" "$dir" "$k"
    } > "$dir/conf/h$k.conf"
  done
  rm -rf "$dir/sock"; mkdir "$dir/sock"; : > "$dir/fleet.pids"
  t0=$(date +%s%N)
  unshare -m bash -c 'mount --bind "$1/etc" /etc || exit 1
    for k in $(seq 0 $(($3 - 1))); do
      "$2" --config "$1/conf/h$k.conf" >"$1/logs/h$k.log" 2>&1 &
      echo $! >>"$1/fleet.pids"
    done
    wait' sh "$dir" "$daemon" "$hosts" >"$dir/fleet.log" 2>&1 &
  fleet_pid=$!
  limit=$(( 60 + hosts / 10 ))   # seconds
  for _ in $(seq $((limit * 5))); do
    n=$(find "$dir/sock" -maxdepth 1 -type s | wc -l)
    [ "$n" -ge "$hosts" ] && break
    kill -0 "$fleet_pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ "$n" -lt "$hosts" ]; then
    log "$n of $hosts daemons listening after $limit s; $(cat "$dir/fleet.log")"
    for k in $(seq 0 $((hosts - 1))); do
      [ -S "$dir/sock/h$k.sock" ] || { log "host $k: $(tail -3 "$dir/logs/h$k.log")"; break; }
    done
    exit 1
  fi
  fleet_start_s=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  log "$run: $hosts daemons listening after $fleet_start_s s"
}

# CPU from /proc (procps may be missing), in nanoseconds: the run time of each live thread of the
# pids named (/proc/PID/task/TID/schedstat, exact), with one awk over all the files (a fleet is up
# to thousands of processes); a pid gone meanwhile counts 0. (The clock ticks of /proc/PID/stat
# are rounded down per process: 1,000 daemons or backends serving a few requests each would show
# little or none of their CPU.) pam-totpd's threads live as long as it does.
cpu_ns() {
  [ $# -gt 0 ] || { echo 0; return 0; }
  { (cd /proc && cat $(printf '%s/task/*/schedstat ' "$@") 2>/dev/null) || true; } | awk '{ s += $1 } END { printf "%.0f\n", s }'
}
# PostgreSQL's: the postmaster and its children now (backends, background workers), and the
# children it reaped (backends that exited: its cutime+cstime, in ticks).
pg_cpu_ns() {
  local pm kids reaped
  pm=$(head -n 1 "$dir/data/postmaster.pid")
  kids=$({ cat /proc/[0-9]*/stat 2>/dev/null || true; } | sed -n 's/^\([0-9]*\) (.*) [A-Za-z] \([0-9]*\) .*/\1 \2/p' | awk -v pm="$pm" '$2 == pm { print $1 }')
  reaped=$(sed 's/.*) //' "/proc/$pm/stat" | awk '{ print $14 + $15 }')
  awk -v a="$(cpu_ns "$pm" $kids)" -v r="$reaped" -v hz="$hz" 'BEGIN { printf "%.0f\n", a + r * 1e9 / hz }'
}
fleet_cpu_ns() { cpu_ns $(cat "$dir/fleet.pids" 2>/dev/null); }
pgb_cpu_ns() { cpu_ns $(cat "$dir/pgbouncer.pid" 2>/dev/null); }
# The whole machine's busy clock ticks (every CPU: not idle, not waiting for I/O), from /proc/stat.
machine_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# per_login NS_BEFORE NS_AFTER LOGINS: milliseconds per login.
per_login() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.2f", (b - a) / 1e6 / n }'; }
# The fleet's database's server connections now (client backends; not this query's own).
fleet_backends() {
  psql -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = 'fleet' AND pid <> pg_backend_pid()"
}

# measure pgbouncer|direct: the fleet is up; warm-up, then the timed run, measured.
results=()
measure() {
  local run=$1 q0 q1 r start p0 b0 f0 m0 t0 p1 b1 f1 m1 t1 busy conns audit kinds rate p50 p99 client_cpu mem
  psql -d fleet -c "UPDATE pam_totp.users SET failures = 0" >/dev/null
  # Warm-up: every host once, so each has its database connection (and PgBouncer its pool).
  r=$(python3 "$client" "$dir/sock" "$hosts" 1000 "$secret" "$clients" "$hosts" warm 2>/dev/null)
  case "$r" in *-1:*) log "$run warm-up: requests failed ($r)"; exit 1;; esac
  # The audit rows of the timed run only: at >= its first second. The machine's busy CPU in that
  # second, all quiet here, says what else runs on it.
  q0=$(machine_busy); sleep 1; q1=$(machine_busy)
  start=$(date +%s)
  # Server connections: pg_stat_activity every 0.2 s, from one admin session on the postgres database.
  rm -f "$dir/poll.stop"
  ( while [ ! -e "$dir/poll.stop" ]; do
      echo "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = 'fleet' AND pid <> pg_backend_pid();"
      sleep 0.2
    done | psql -d postgres >"$dir/poll.out" ) &
  poll_pid=$!
  p0=$(pg_cpu_ns); b0=$(pgb_cpu_ns); f0=$(fleet_cpu_ns); m0=$(machine_busy); t0=$(date +%s%N)
  r=$(python3 "$client" "$dir/sock" "$hosts" 1000 "$secret" "$clients" "$requests" wrong 2>"$dir/client.err") \
    || { log "$run: the client failed: $(tail -3 "$dir/client.err")"; exit 1; }
  t1=$(date +%s%N); m1=$(machine_busy); p1=$(pg_cpu_ns); b1=$(pgb_cpu_ns); f1=$(fleet_cpu_ns)
  touch "$dir/poll.stop"; wait "$poll_pid" || true; poll_pid=""
  mem=$(awk '/^MemTotal/ { t = $2 } /^MemAvailable/ { a = $2 } END { printf "%d", (t - a) / 1024 }' /proc/meminfo)
  read -r _ _ rate p50 p99 kinds <<<"$r"
  case "$kinds" in *-1:*) log "$run: requests failed ($r): is the client's frame pam-totpd's protocol?"; exit 1;; esac
  [ "$kinds" = "2:$requests" ] || log "$run: replies other than wrong code: $kinds (0 success, 2 wrong code, 4 locked, 6 failed)"
  conns=$(sort -n "$dir/poll.out" | tail -n 1)
  audit=$(psql -d fleet -c "SELECT count(DISTINCT role) FROM pam_totp.audit WHERE at >= $start")
  client_cpu=$(awk '/^client-cpu/ { print $2 }' "$dir/client.err")
  echo "fleet-scale: hosts $hosts, server connections ${conns:-0}, logins/s $rate, p50 $p50 ms, p99 $p99 ms, audit hosts $audit"
  # Cores busy: the machine's during the run, of which the processes measured here, and before it.
  busy=$(awk -v a="$m0" -v b="$m1" -v s="$t0" -v e="$t1" -v hz="$hz" -v q0="$q0" -v q1="$q1" \
             -v ours="$(( p1 - p0 + b1 - b0 + f1 - f0 ))" -v client="$client_cpu" -v cores="$(nproc)" \
         'BEGIN { w = (e - s) / 1e9; printf "%.2f (these processes %.2f) of %d cores during the run, %.2f in the second before it", \
                  (b - a) / hz / w, (ours / 1e9 + client) / w, cores, (q1 - q0) / hz }')
  local pgb="-"; [ "$run" = direct ] || pgb=$(per_login "$b0" "$b1" "$requests")
  echo "  PostgreSQL CPU per login $(per_login "$p0" "$p1" "$requests") ms, PgBouncer CPU per login $pgb ms" \
       "(POOL=$run; pam-totpd CPU per login, all hosts, $(per_login "$f0" "$f1" "$requests") ms;" \
       "client CPU per login $(awk -v c="$client_cpu" -v n="$requests" 'BEGIN { printf "%.2f", c * 1000 / n }') ms;" \
       "$requests requests, $clients in flight, replies $kinds; credentials $([ "$credentials" = 1 ] && echo "per host" || echo none);" \
       "machine busy $busy;" \
       "memory in use $mem MiB; $hosts daemons listening after $fleet_start_s s)"
  results+=("$run $rate")
}

for run in "${runs[@]}"; do
  [ "$run" = direct ] || start_pgbouncer
  start_fleet "$run"
  measure "$run"
  stop_fleet
  stop_pgbouncer
  # The next run starts with no connection left to the fleet's database.
  for _ in $(seq 100); do [ "$(fleet_backends)" = 0 ] && break; sleep 0.1; done
done
if [ "${#results[@]}" = 2 ]; then
  awk -v a="${results[0]#* }" -v b="${results[1]#* }" 'BEGIN { printf "pgbouncer/direct logins/s %.2f\n", a / b }'
fi
