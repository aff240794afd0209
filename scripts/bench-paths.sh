#!/usr/bin/env bash
# scripts/bench-paths.sh: callgrind instructions of one `pamtester SERVICE nobody authenticate`
# per path, for the costs of policy sections and first-login enrolment (docs/ARCHITECTURE.md
# §5.4, §5.5). Root; uses throwaway services /etc/pam.d/benchpaths_<pid>_* and a temp store.
#
# Usage: scripts/bench-paths.sh OURS_SO TOTP_ENROLL [BASE_SO]
#   OURS_SO      the module to measure (.build-embedded/pam_totp.so)
#   TOTP_ENROLL  totp-enroll, to enrol the user in the temp store
#   BASE_SO      optional: another build of the module (say, main's) measured the same way
# Prints "NAME PATH INSTRUCTIONS": a pam_permit.so floor, then success and wrong-code logins of an
# enrolled user with a one-line config (nullok), the same with two [group] sections (the NSS
# look-ups), and a first-login enrolment (enroll_at_login, a user without a record, wrong code).
set -euo pipefail
OURS=$1 E=$2 BASE=${3:-}
W=$(mktemp -d /tmp/benchpaths.XXXXXX); chmod 700 "$W"
trap 'rm -rf "$W"; rm -f /etc/pam.d/benchpaths_$$_*' EXIT
SECRET=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ
mkdir -m700 "$W/pristine" "$W/empty"
faketime -f '-5m' "$E" enroll --user nobody --name bench --secret - --code "$(faketime -f '-5m' oathtool --totp -b $SECRET)" \
    --quiet --store "$W/pristine" <<<"$SECRET" >/dev/null
printf 'nullok\n' > "$W/plain.conf"
printf 'nullok\n[service nothing]\nadjacent_intervals = 3\n[group admins]\nnullok = no\n[group breakglass]\nexempt\n' > "$W/groups.conf"
chmod 644 "$W"/*.conf
measure() { # measure SERVICE-LINE ANSWER
    echo "$1" > /etc/pam.d/benchpaths_$$_x
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$W/vg.log" \
        pamtester benchpaths_$$_x nobody authenticate <<<"$2" >/dev/null 2>&1 || true
    grep -Eo 'Collected : [0-9]+' "$W/vg.log" | grep -Eo '[0-9]+$'
}
run() { # run NAME MODULE CONF PATH
    rm -rf "$W/store"; cp -a "$W/pristine" "$W/store"
    local code=700435; [ "$4" = ok ] && code=$(oathtool --totp -b $SECRET)
    echo "$1 $4 $(measure "auth required $2 store=$W/store config=$3" "$code")"
}
echo "floor - $(measure 'auth required pam_permit.so' '')"
for p in ok wrong; do
    [ -n "$BASE" ] && run base "$BASE" "$W/plain.conf" $p
    run ours "$OURS" "$W/plain.conf" $p
    run ours-group-sections "$OURS" "$W/groups.conf" $p
done
echo "ours-enrol-at-login wrong $(measure "auth required $OURS store=$W/empty config=$W/plain.conf enroll_at_login=2999-12-31" 000000)"
