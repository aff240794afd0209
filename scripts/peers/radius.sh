#!/usr/bin/env bash
# radius.sh — run the REAL FreeRADIUS 3.2 (Debian 12 `freeradius`, rlm_pam) as a
# test peer for pam_totp, and send it single Access-Requests.
#
# Needs (as root): apt-get install -y --no-install-recommends freeradius freeradius-utils
#   (the postinst makes user `freerad`, puts it in group `shadow`, and tries to
#   start the distro daemon on 1812/1813; we never use or depend on that one).
#
# Usage:
#   radius.sh start DIR PAM_SERVICE PORT  # config in DIR/raddb, log DIR/radius.log,
#                                         # pid DIR/radiusd.pid; auth only, on 127.0.0.1:PORT
#                                         # (no acct listener); client 127.0.0.1 secret testing123
#   radius.sh stop DIR
#   radius.sh auth PORT USER PASSWORD     # prints Access-Accept (exit 0),
#                                         # Access-Reject (exit 1) or no-reply (exit 2)
#
# Every user gets `Auth-Type := PAM` (users file), so rlm_pam runs
# pam_start(PAM_SERVICE, USER) / pam_authenticate / pam_acct_mgmt and answers
# every PAM_PROMPT_ECHO_OFF with User-Password, every PAM_PROMPT_ECHO_ON with
# User-Name; it never sends Access-Challenge.
#
# The daemon runs as Debian's freeradius.service runs it: uid/gid freerad with
# freerad's supplementary groups (Debian's postinst puts freerad in `shadow`,
# which pam_unix needs to check *other* users' passwords) and no-new-privs.
# PAM modules therefore run as uid freerad: whatever they read must be readable
# by freerad, and a set-uid helper cannot help them. DIR must be traversable by
# freerad (we chmod it o+x). Not emulated: the unit's PrivateTmp=true.
#
# Env: RADIUS_TIMEOUT (default 20 s) bounds start-up and each auth.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

TIMEOUT=${RADIUS_TIMEOUT:-20}
SECRET=testing123
die() { echo "radius.sh: $*" >&2; exit 2; }


cmd=${1:-}; shift || true
case "$cmd" in
start)
    [ $# -eq 3 ] || die "usage: start DIR PAM_SERVICE PORT"
    mkdir -p "$1"
    dir=$(cd "$1" && pwd); svc=$2; port=$3
    [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
    getent passwd freerad >/dev/null || die "user freerad missing: install the freeradius package"
    [ -f "$dir/radiusd.pid" ] && alive "$(cat "$dir/radiusd.pid")" \
        && die "already running in $dir"
    # Let uid freerad reach DIR (e.g. a mktemp -d 0700 dir); fail early if a parent blocks it.
    chmod o+x "$dir"
    runuser -u freerad -- test -x "$dir" || die "freerad cannot traverse $dir (check parent dirs)"

    raddb=$dir/raddb
    rm -rf "$raddb"; mkdir -p "$raddb"
    # Every user: authenticate through rlm_pam (the documented users-file way).
    echo 'DEFAULT Auth-Type := PAM' > "$raddb/users"
    cat > "$raddb/radiusd.conf" <<EOF
# Minimal FreeRADIUS 3.2 config written by scripts/peers/radius.sh
prefix = /usr
exec_prefix = /usr
sysconfdir = /etc
localstatedir = /var
sbindir = /usr/sbin
libdir = /usr/lib/freeradius
name = freeradius
raddbdir = $raddb
confdir = $raddb
logdir = $dir
run_dir = $dir
radacctdir = $dir
pidfile = $dir/radiusd.pid
hostname_lookups = no
max_request_time = 30
cleanup_delay = 5
max_requests = 1024

log {
    destination = files
    file = $dir/radius.log
    auth = yes              # "Login OK / Login incorrect" lines, useful for tests
    auth_badpass = no       # never log the (one-time) passwords
    auth_goodpass = no
}

security {
    user = freerad          # as Debian's radiusd.conf (a no-op: we already start as freerad)
    group = freerad
    allow_core_dumps = no
    max_attributes = 200
    reject_delay = 0        # Debian uses 1 s; 0 keeps rejects fast in tests
    status_server = yes     # lets 'start' probe readiness with Status-Server
}

thread pool {
    start_servers = 2
    max_servers = 4
    min_spare_servers = 1
    max_spare_servers = 3
    max_requests_per_server = 0
}

client localhost {
    ipaddr = 127.0.0.1
    secret = $SECRET
    require_message_authenticator = no
}

modules {
    pam {
        pam_auth = $svc
    }
    files {
        filename = \${confdir}/users
    }
}

server default {
    listen {
        type = auth
        ipaddr = 127.0.0.1
        port = $port
    }
    authorize {
        files
    }
    authenticate {
        Auth-Type PAM {
            pam
        }
    }
}
EOF
    chgrp -R freerad "$raddb"; chmod -R g+rX,o-rwx "$raddb"
    # radiusd opens its log file itself, as freerad.
    rm -f "$dir/radius.log"; install -o freerad -g freerad -m 0640 /dev/null "$dir/radius.log"
    # Start it the way Debian's freeradius.service does: User=freerad, Group=freerad
    # (with freerad's supplementary groups, e.g. shadow) and NoNewPrivileges=true
    # (so set-uid/set-gid helpers such as unix_chkpwd gain nothing).
    # setsid: own session, so the test runner's signals/terminal don't reach it.
    # -f: stay in the foreground, so $! is the daemon's pid; -d: our config dir.
    setsid setpriv --reuid=freerad --regid=freerad --init-groups --no-new-privs \
        freeradius -f -d "$raddb" </dev/null >>"$dir/radius.log" 2>&1 &
    echo $! > "$dir/radiusd.pid"
    pid=$!
    deadline=$((SECONDS + TIMEOUT))
    while :; do
        if ! alive "$pid"; then
            echo "radius.sh: freeradius exited during start-up; log tail:" >&2
            tail -n 30 "$dir/radius.log" >&2; rm -f "$dir/radiusd.pid"; exit 1
        fi
        # Status-Server (RFC 5997) is answered without touching PAM.
        if echo 'Message-Authenticator = 0x00' |
            radclient -q -r 1 -t 0.3 "127.0.0.1:$port" status "$SECRET" >/dev/null 2>&1; then
            break
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "radius.sh: freeradius not answering on 127.0.0.1:$port after ${TIMEOUT}s; log tail:" >&2
            tail -n 30 "$dir/radius.log" >&2
            kill "$pid" 2>/dev/null || true; rm -f "$dir/radiusd.pid"; exit 1
        fi
        sleep 0.2
    done
    echo "freeradius running pid $pid on 127.0.0.1:$port (user $(ps -o user= -p "$pid"))"
    ;;

stop)
    [ $# -eq 1 ] || die "usage: stop DIR"
    pidf=$1/radiusd.pid
    [ -f "$pidf" ] || exit 0
    pid=$(cat "$pidf")
    # Only signal it if it really is freeradius (pid reuse safety).
    if [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = freeradius ]; then
        kill "$pid"
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidf"
    ;;

auth)
    [ $# -eq 3 ] || die "usage: auth PORT USER PASSWORD"
    port=$1; user=$2; pass=$3
    # Quoting for radclient's attribute parser (FreeRADIUS 3.2.1): a single-quoted
    # value (no %{xlat}, unlike "...") is tokenized (\' -> ') and then unescaped
    # once more C-style (\\ -> \, \n, \101 ...). radclient then re-parses
    # User-Password a second time (radclient.c: fr_pair_make("Cleartext-Password",
    # vp->vp_strvalue)), so a password backslash must be written as 4 of them.
    # q N STR: double every backslash N times, then escape single quotes.
    q() { local s=$2 i; for ((i = 0; i < $1; i++)); do s=${s//\\/\\\\}; done
          printf "'%s'" "${s//\'/\\\'}"; }
    # -r 1: send exactly once (radclient's default is 3 tries, 5 s apart, and
    #       radtest uses that default: a one-time code could be sent 3 times).
    # -t: how long to wait for that one reply.
    # -x: print the reply code ("Received Access-Accept ...").
    out=$(printf 'User-Name = %s\nUser-Password = %s\nNAS-IP-Address = 127.0.0.1\nMessage-Authenticator = 0x00\n' \
              "$(q 1 "$user")" "$(q 2 "$pass")" |
          timeout $((TIMEOUT + 5)) radclient -x -r 1 -t "$TIMEOUT" "127.0.0.1:$port" auth "$SECRET" 2>&1) || true
    code=$(sed -n 's/^Received \([A-Za-z-]*\) .*/\1/p' <<<"$out" | head -n 1)
    [ -n "${RADIUS_VERBOSE:-}" ] && echo "$out" >&2
    case "$code" in
    Access-Accept) echo Access-Accept; exit 0 ;;
    Access-Reject) echo Access-Reject; exit 1 ;;
    "") echo no-reply; exit 2 ;;
    *) echo "$code"; exit 2 ;;   # e.g. Access-Challenge (rlm_pam never sends one)
    esac
    ;;

*) die "usage: radius.sh {start DIR PAM_SERVICE PORT | stop DIR | auth PORT USER PASSWORD}" ;;
esac
