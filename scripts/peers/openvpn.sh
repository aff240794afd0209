#!/usr/bin/env bash
# openvpn.sh — run the REAL OpenVPN 2.6 server (Debian 12 `openvpn`, with
# openvpn-plugin-auth-pam.so) and client in two network namespaces joined by a
# veth pair, as a test peer for pam_totp.
#
# Needs (as root): apt-get install -y --no-install-recommends openvpn ; iproute2, openssl.
#
# Usage:
#   openvpn.sh start DIR PAM_SERVICE [EXTRA_SERVER_OPTION...]
#       Throwaway EC P-256 PKI in DIR/pki, namespaces + veth, server in the server
#       namespace (UDP 10.201.0.1:1194, tunnel 10.8.0.1/24), log DIR/server.log.
#       Each EXTRA option is one config line, e.g. 'reneg-sec 20' 'auth-gen-token 3600'.
#       Default plugin: `plugin .../openvpn-plugin-auth-pam.so PAM_SERVICE`; if an
#       EXTRA starts with `plugin `, it replaces the default, e.g. the static-challenge form
#       'plugin /usr/lib/x86_64-linux-gnu/openvpn/plugins/openvpn-plugin-auth-pam.so "svc login USERNAME password PASSWORD verification OTP"'
#   openvpn.sh connect DIR USER PASSWORD [--challenge RESPONSE] [EXTRA_CLIENT_OPTION...]
#       Prints CONNECTED (exit 0, client left running, pid DIR/client.pid) or
#       AUTH_FAILED (exit 1, client gone); anything else: a message, exit 2.
#       Without --challenge: auth-user-pass from DIR/client.auth (0600).
#       With --challenge: `static-challenge "Verification code" 1`; the answer goes in
#       through the management interface (127.0.0.1:7505 inside the client namespace)
#       as `password "Auth" "SCRV1:<b64 pass>:<b64 response>"` — OpenVPN 2.6 reads a
#       static-challenge response only from a tty or the management interface. A
#       helper stays connected and answers every later credential query (e.g. after
#       a renegotiation with auth-nocache) from DIR/client.cred (3 lines: user,
#       password, response): rewrite that file to "type" a new code.
#   openvpn.sh ping DIR               # client ns -> 10.8.0.1:9/tcp through the tunnel; exit 0 if
#                                     # the server's kernel answers (RST): no iputils-ping needed
#   openvpn.sh wait-reneg DIR SECONDS # RENEGOTIATED-OK (exit 0) / RENEGOTIATED-FAILED (exit 1)
#   openvpn.sh disconnect DIR
#   openvpn.sh stop DIR               # kills server+client, deletes namespaces (and with them the veth)
#
# Names: namespaces ovs-<h>/ovc-<h>, veths ovs<h>/ovc<h>, h = 8 hex of md5(realpath DIR),
# so parallel runs with different DIRs don't collide. Addresses exist only in
# those namespaces. The server runs as root, as Debian's openvpn-server@.service
# does (no User=); the auth-pam plugin runs PAM in a process forked as root anyway.
# Env: OPENVPN_TIMEOUT (default 20 s) bounds start/connect.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

TIMEOUT=${OPENVPN_TIMEOUT:-20}
PLUGIN=/usr/lib/x86_64-linux-gnu/openvpn/plugins/openvpn-plugin-auth-pam.so
SRV_IP=10.201.0.1 CLI_IP=10.201.0.2 TUN_SRV=10.8.0.1 MGMT_PORT=7505
die() { echo "openvpn.sh: $*" >&2; exit 2; }

[ $# -ge 2 ] || die "usage: openvpn.sh {start|connect|ping|wait-reneg|disconnect|stop} DIR ..."
cmd=$1; mkdir -p "$2"; dir=$(cd "$2" && pwd); shift 2
h=$(printf %s "$dir" | md5sum | cut -c1-8)
NS_S=ovs-$h NS_C=ovc-$h   # network namespaces
VS=ovs$h VC=ovc$h         # veth ends (<= 15 chars)
in_s() { ip netns exec "$NS_S" "$@"; }
in_c() { ip netns exec "$NS_C" "$@"; }


# kill_pidfile FILE: stop the openvpn whose pid is in FILE (only if it is openvpn).
kill_pidfile() {
    local f=$1 pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f"); rm -f "$f"
    [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = openvpn ] || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do alive "$pid" || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}

# wait_log FILE PID OK_REGEX FAIL_REGEX: 0 = OK seen, 1 = FAIL seen, 2 = pid died, 3 = timeout.
wait_log() {
    local f=$1 pid=$2 ok=$3 bad=$4 deadline=$((SECONDS + TIMEOUT))
    while [ $SECONDS -lt $deadline ]; do
        grep -Eq "$ok" "$f" 2>/dev/null && return 0
        grep -Eq "$bad" "$f" 2>/dev/null && return 1
        # Dead: read the log once more (it may have written its last line after the greps above).
        alive "$pid" || { grep -Eq "$ok" "$f" 2>/dev/null && return 0; grep -Eq "$bad" "$f" 2>/dev/null && return 1; return 2; }
        sleep 0.1
    done
    return 3
}

do_stop_client() {
    [ -f "$dir/mgmt.pid" ] && { kill "$(cat "$dir/mgmt.pid")" 2>/dev/null || true; rm -f "$dir/mgmt.pid"; }
    kill_pidfile "$dir/client.pid"
}

case "$cmd" in
start)
    [ $# -ge 1 ] || die "usage: start DIR PAM_SERVICE [EXTRA_SERVER_OPTION...]"
    svc=$1; shift
    ip netns list | grep -qw "$NS_S" && die "namespace $NS_S exists: run 'stop $dir' first"

    # Throwaway PKI: EC P-256 (fast), 2-day validity. The server cert needs
    # EKU serverAuth because the client checks it with remote-cert-tls server.
    pki=$dir/pki; rm -rf "$pki"; mkdir -p "$pki"; (
        cd "$pki"; ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
        openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 2 -subj /CN=peer-test-ca
        openssl req "${ec[@]}" -keyout server.key -out server.csr -subj /CN=server
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' > server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -set_serial 2 -days 2 \
            -extfile server.ext -out server.crt
    ) >"$dir/pki.log" 2>&1 || { cat "$dir/pki.log" >&2; die "openssl failed"; }

    # Any failure from here on: undo everything (server, namespaces) before exiting.
    trap '"$0" stop "$dir" >/dev/null 2>&1' EXIT
    ip netns add "$NS_S"; ip netns add "$NS_C"
    # Create the veth pair directly inside the namespaces: nothing touches the root namespace.
    ip link add "$VS" netns "$NS_S" type veth peer name "$VC" netns "$NS_C"
    in_s ip addr add "$SRV_IP/30" dev "$VS"; in_s ip link set "$VS" up; in_s ip link set lo up
    in_c ip addr add "$CLI_IP/30" dev "$VC"; in_c ip link set "$VC" up; in_c ip link set lo up

    plugin_line="plugin $PLUGIN $svc"
    for o in "$@"; do [[ $o == plugin\ * ]] && plugin_line=""; done
    {
        echo "# written by scripts/peers/openvpn.sh"
        echo "dev tun"
        echo "topology subnet"
        echo "server 10.8.0.0 255.255.255.0"
        echo "proto udp4"
        echo "local $SRV_IP"
        echo "port 1194                   # own namespace: no clash with a distro daemon"
        echo "ca $pki/ca.crt"
        echo "cert $pki/server.crt"
        echo "key $pki/server.key"
        echo "dh none                     # ECDHE only, no DH params to generate"
        echo "verify-client-cert none     # clients authenticate by username/password only"
        echo "username-as-common-name"
        echo "verb 4                      # 4 = auth-pam plugin logs its PAM conversation"
        echo "status $dir/server.status 1"
        [ -n "$plugin_line" ] && echo "$plugin_line"
        for o in "$@"; do echo "$o"; done
    } > "$dir/server.conf"
    # setsid: own session, so signals to the test runner's process group don't reach it.
    # Log = its stdout/stderr (so option errors are caught too); ip netns exec and
    # setsid exec, so $! is openvpn's own pid.
    setsid ip netns exec "$NS_S" openvpn --config "$dir/server.conf" </dev/null >"$dir/server.log" 2>&1 &
    echo $! > "$dir/server.pid"
    rc=0; wait_log "$dir/server.log" "$!" 'Initialization Sequence Completed' 'Exiting due to fatal error' || rc=$?
    if [ $rc -ne 0 ]; then
        echo "openvpn.sh: server did not start (rc=$rc); log tail:" >&2
        tail -n 20 "$dir/server.log" >&2 2>/dev/null || true
        exit 1
    fi
    trap - EXIT
    echo "openvpn server up in $NS_S ($SRV_IP:1194), pid $(cat "$dir/server.pid")"
    ;;

connect)
    [ $# -ge 2 ] || die "usage: connect DIR USER PASSWORD [--challenge RESPONSE] [EXTRA_CLIENT_OPTION...]"
    user=$1 pass=$2; shift 2
    challenge=""; chal_set=0
    if [ "${1:-}" = --challenge ]; then
        [ $# -ge 2 ] || die "--challenge needs a RESPONSE"
        challenge=$2; chal_set=1; shift 2
    fi
    do_stop_client
    (umask 077; printf '%s\n%s\n' "$user" "$pass" > "$dir/client.auth"
     printf '%s\n%s\n%s\n' "$user" "$pass" "$challenge" > "$dir/client.cred")
    {
        echo "# written by scripts/peers/openvpn.sh"
        echo "client"
        echo "dev tun"
        echo "proto udp4"
        echo "remote $SRV_IP 1194"
        echo "nobind"
        echo "ca $dir/pki/ca.crt"
        echo "remote-cert-tls server      # server cert must carry EKU serverAuth"
        echo "verify-x509-name server name"
        echo "auth-retry none             # on AUTH_FAILED exit: never resend a one-time code"
        echo "verb 4"
        if [ $chal_set = 1 ]; then
            echo "auth-user-pass              # no file: credentials come from the management interface"
            echo "static-challenge \"Verification code\" 1"
            echo "management 127.0.0.1 $MGMT_PORT   # loopback of the client namespace only"
            echo "management-query-passwords"
            echo "management-hold             # wait until our helper is connected"
        else
            echo "auth-user-pass $dir/client.auth"
        fi
        for o in "$@"; do echo "$o"; done
    } > "$dir/client.conf"
    # Emptied here, not by the background job's redirection: wait_log must not read the last
    # connection's "Initialization Sequence Completed" before the new client truncates it.
    : > "$dir/client.log"
    setsid ip netns exec "$NS_C" openvpn --config "$dir/client.conf" </dev/null >>"$dir/client.log" 2>&1 &
    cpid=$!; echo $cpid > "$dir/client.pid"

    if [ $chal_set = 1 ]; then
        # Management helper (bash /dev/tcp, inside the client namespace). It answers
        # every ">PASSWORD:Need 'Auth'" from DIR/client.cred; quotes and backslashes
        # are escaped as the management protocol requires.
        setsid ip netns exec "$NS_C" bash -c '
            cred=$1 port=$2
            esc() { local s=${1//\\/\\\\}; printf "%s" "${s//\"/\\\"}"; }
            for _ in $(seq 100); do { exec 3<>/dev/tcp/127.0.0.1/$port; } 2>/dev/null && break; sleep 0.1; done
            echo "hold release" >&3
            while IFS= read -r line <&3; do
                line=${line%$'\''\r'\''}; echo "< $line"
                case $line in
                ">PASSWORD:Need '\''Auth'\''"*)
                    { IFS= read -r u; IFS= read -r p; IFS= read -r r; } < "$cred"
                    printf "username \"Auth\" \"%s\"\n" "$(esc "$u")" >&3
                    printf "password \"Auth\" \"SCRV1:%s:%s\"\n" \
                        "$(printf %s "$p" | base64 -w0)" "$(printf %s "$r" | base64 -w0)" >&3
                    echo "> answered Auth for $u" ;;
                esac
            done' mgmt "$dir/client.cred" "$MGMT_PORT" </dev/null >"$dir/mgmt.log" 2>&1 &
        echo $! > "$dir/mgmt.pid"
    fi

    rc=0; wait_log "$dir/client.log" "$cpid" 'Initialization Sequence Completed' 'AUTH_FAILED' || rc=$?
    case $rc in
    0) echo CONNECTED; exit 0 ;;
    1) do_stop_client; echo AUTH_FAILED; exit 1 ;;
    *) do_stop_client
       echo "openvpn.sh: client neither connected nor got AUTH_FAILED ($([ $rc = 3 ] && echo "timeout ${TIMEOUT}s" || echo exited)); log tail:" >&2
       tail -n 15 "$dir/client.log" >&2 2>/dev/null || true
       exit 2 ;;
    esac
    ;;

ping)
    # No ping binary is needed: a TCP connect from the client namespace to a closed
    # port of the server's tunnel address is answered with a RST ("Connection
    # refused") only if packets cross the tunnel both ways; otherwise it times out.
    # 3 tries of 2 s, in case the first packet races a key switch.
    for _ in 1 2 3; do
        out=$(LC_ALL=C in_c timeout 2 bash -c "exec 3<>/dev/tcp/$TUN_SRV/9" 2>&1 || true)
        [[ $out == *"Connection refused"* ]] && exit 0
    done
    exit 1
    ;;

wait-reneg)
    [ $# -eq 1 ] || die "usage: wait-reneg DIR SECONDS"
    secs=$1; log=$dir/client.log; pidf=$dir/client.pid
    [ -f "$pidf" ] || die "no client running"
    cpid=$(cat "$pidf")
    # Every completed TLS handshake (initial or renegotiation) logs one "Control Channel:" line.
    n0=$(grep -c 'Control Channel:' "$log" || true)
    deadline=$((SECONDS + secs)); reneg=0
    while [ $SECONDS -lt $deadline ]; do
        [ "$(grep -c 'Control Channel:' "$log" || true)" -gt "$n0" ] && { reneg=1; break; }
        alive "$cpid" || break
        sleep 0.2
    done
    # Give the server time to judge the new key's credentials before looking.
    [ $reneg = 1 ] && sleep 2
    bad() { grep -E 'AUTH_FAILED|SIGUSR1|SIGTERM|Restart pause|TLS Error|Exiting' "$log" || true; }
    if [ $reneg = 1 ] && alive "$cpid" && [ -z "$(bad)" ] && "$0" ping "$dir"; then
        echo RENEGOTIATED-OK; exit 0
    fi
    echo RENEGOTIATED-FAILED
    [ $reneg = 1 ] || echo "no renegotiation within ${secs}s"
    alive "$cpid" || echo "client process exited"
    bad | tail -n 5
    grep -E 'authentication (succeeded|failed)|AUTH_FAILED|auth-token' "$dir/server.log" | tail -n 5 || true
    exit 1
    ;;

disconnect)
    do_stop_client
    ;;

stop)
    do_stop_client
    kill_pidfile "$dir/server.pid"
    # Deleting the namespaces also deletes the veth pair and the tun devices in them.
    ip netns del "$NS_C" 2>/dev/null || true
    ip netns del "$NS_S" 2>/dev/null || true
    ;;

*) die "unknown command: $cmd" ;;
esac
