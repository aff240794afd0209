# scripts/peers/common.sh: what radius.sh and openvpn.sh share (sourced, after set -euo pipefail).

# Close every descriptor the caller left open (but bash's own 255, the script): a daemon started
# here would hold it, and a caller that waits for its end-of-file (swift-corelibs-foundation's
# Process does) would wait as long as the daemon lives.
for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

# alive PID: running and not a zombie (an orphaned daemon stays a zombie until PID 1 reaps it;
# kill -0 would count it as alive).
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }
