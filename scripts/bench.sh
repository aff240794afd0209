#!/usr/bin/env bash
# scripts/bench.sh: measure pam_totp.so against Debian's pam_google_authenticator.so.
#
# Usage (as root, Debian 12):  scripts/bench.sh OUR_SO TOTP_ENROLL VERIFY_BENCH OUT_MD [PAM_TOTPD]
#   OUR_SO        absolute path to the built (stripped) pam_totp.so
#   TOTP_ENROLL   absolute path to the totp-enroll CLI: the only way the test user is enrolled
#                 (this script never reads or writes the store's files, whatever their format)
#   VERIFY_BENCH  absolute path to verify-bench (Tests/VerifyBench, built like the module): the
#                 in-process verification row, TOTPVerifier.match against its HMACs
#   OUT_MD        markdown report to write (e.g. docs/benchmarks.md); also printed on stdout
#   PAM_TOTPD     the built pam-totpd: adds the daemon path (pamtester as the unprivileged user,
#                 the module asking pam-totpd over its socket) beside the in-process path, and a
#                 phone-factor login through it (a code sent by a test sender, delivery excluded)
#
# The modules are driven by pamtester in one run, for the same user, secret and code:
# callgrind instruction counts, wall/CPU time (hyperfine, else a bash loop), peak RSS
# (/usr/bin/time) and .so size, each for pam_permit.so (the floor), pam_totp,
# google-authenticator as the plain secret file configures it, and google-authenticator with
# the protections pam_totp always has (DISALLOW_REUSE, RATE_LIMIT 10 300, WINDOW_SIZE 11), on
# the success path and on the wrong-code path. The targets compare against the last one.
#
# Environment (optional):
#   BENCH_RUNS=200          timed runs per module and path
#   TMPDIR=/tmp             where the temporary store, state files and reset script go
#   BENCH_NO_HYPERFINE=1    time with the bash loop even if hyperfine is installed
#   BENCH_PROFILES=DIR      keep each pamtester run's callgrind profile in DIR (callgrind_annotate
#                           DIR/ours.ok shows where the module's instructions go)
#   BENCH_ALLOW_STANDIN=1   development only: do not require OUR_SO to accept the right code and
#                           reject a wrong one (lets you run with pam_permit.so as a stand-in)
#
# Every system change (user totpbench, /etc/pam.d/pam_totp_bench_*, the temp dir; with PAM_TOTPD the
# delivery user pam-totp-sender if there was none) is undone on exit.
# Anything that cannot be measured as intended stops the script with an error; it never prints
# a zero or a blank in its place.
set -euo pipefail

readonly BENCH_USER=totpbench
readonly SENDER_USER=pam-totp-sender       # pam-totpd runs senders as this user (the install creates it)
readonly PHONE_NUMBER=+15105550123         # the phone-factor login's number (555-01xx: fictional)
readonly SERVICE_PREFIX=pam_totp_bench_
readonly MODULES=(floor ours theirs guarded)   # guarded: google-authenticator, same protections
# The protections, as lines of google-authenticator's secret file: one-time codes, at most 10
# attempts per 300 s, and a window of 11 codes (pam_totp's adjacent_intervals=5: T-5 .. T+5).
readonly GA_PROTECTIONS=('" RATE_LIMIT 10 300' '" WINDOW_SIZE 11' '" DISALLOW_REUSE')
readonly ENROL_STEPS_BACK=12               # see "Our store" below
readonly SO_TARGET_BYTES=204800            # 200 KiB
readonly WRONG_PATH_BUDGET_MS=20000        # cap per module when a run sleeps (pam_fail_delay)
RUNS=${BENCH_RUNS:-200}
STANDIN=${BENCH_ALLOW_STANDIN:-0}

die()  { printf 'bench.sh: error: %s\n' "$*" >&2; exit 1; }
warn() { printf 'bench.sh: warning: %s\n' "$*" >&2; }
log()  { printf 'bench.sh: %s\n' "$*" >&2; }

[[ $# -eq 4 || $# -eq 5 ]] || die "usage: $0 OUR_SO TOTP_ENROLL VERIFY_BENCH OUT_MD [PAM_TOTPD]"
OUR_SO=$1 TOTP_ENROLL=$2 VERIFY_BENCH=$3 OUT_MD=$4 PAM_TOTPD=${5:-}
[[ -z $PAM_TOTPD || ($PAM_TOTPD == /* && -x $PAM_TOTPD) ]] || die "PAM_TOTPD must be an absolute path to an executable: $PAM_TOTPD"
[[ $OUR_SO == /* ]] || die "OUR_SO must be an absolute path (PAM resolves relative names in its module dir): $OUR_SO"
[[ -f $OUR_SO ]] || die "OUR_SO not found: $OUR_SO (build it first)"
[[ $TOTP_ENROLL == /* && -x $TOTP_ENROLL ]] || die "TOTP_ENROLL must be an absolute path to an executable: $TOTP_ENROLL (build it first)"
[[ $VERIFY_BENCH == /* && -x $VERIFY_BENCH ]] || die "VERIFY_BENCH must be an absolute path to an executable: $VERIFY_BENCH (build it first)"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer: $RUNS"
[[ $(id -u) -eq 0 ]] || die "must run as root (it writes /etc/pam.d/${SERVICE_PREFIX}* and creates user $BENCH_USER)"

need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 ||
        die "'$1' not found: apt-get install -y $2   (the Makefile's bench target installs it)"
}
need pamtester pamtester
need oathtool oathtool
need faketime faketime
need valgrind valgrind
need dpkg-query dpkg
need base32 coreutils
need useradd passwd
if [[ -n $PAM_TOTPD ]]; then
    need strace strace
    need mkfifo coreutils
    need setpriv util-linux
fi
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (the shell keyword cannot report peak RSS): apt-get install -y time"
HAVE_HYPERFINE=0
if [[ ${BENCH_NO_HYPERFINE:-0} == 1 ]]; then log "BENCH_NO_HYPERFINE=1: timing with a bash loop"
elif command -v hyperfine >/dev/null 2>&1; then HAVE_HYPERFINE=1
else warn "hyperfine not found (apt-get install -y hyperfine): timing with a bash loop instead"; fi

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
[[ -n $multiarch ]] || die "cannot determine the multiarch triplet (need dpkg-dev's dpkg-architecture or gcc)"
SECDIR=
for d in "/lib/$multiarch/security" "/usr/lib/$multiarch/security"; do
    [[ -f $d/pam_permit.so ]] && { SECDIR=$d; break; }
done
[[ -n $SECDIR ]] || die "PAM module directory not found under /lib/$multiarch/security"
GA_SO=$SECDIR/pam_google_authenticator.so
PERMIT_SO=$SECDIR/pam_permit.so
[[ -f $GA_SO ]] || die "$GA_SO not found: apt-get install -y libpam-google-authenticator"

# ---------------------------------------------------------------- set-up and cleanup
TMP=
SOCKDIR=
SELFDIR=
DAEMON_PID=
PHONE_PID=
PHONE_CG_PID=
CREATED_USER=0
CREATED_SENDER=0
PAMD_FILES=()
cleanup() {
    local rc=$?
    local f
    for f in $DAEMON_PID $PHONE_PID $PHONE_CG_PID; do kill "$f" 2>/dev/null; wait "$f" 2>/dev/null || true; done
    if [[ -n $SOCKDIR && -d $SOCKDIR ]]; then rm -rf -- "$SOCKDIR"; fi
    for f in "${PAMD_FILES[@]}"; do rm -f -- "$f"; done
    if ((CREATED_USER)); then userdel "$BENCH_USER" >/dev/null 2>&1 || warn "could not remove user $BENCH_USER"; fi
    if ((CREATED_SENDER)); then userdel "$SENDER_USER" >/dev/null 2>&1 || warn "could not remove user $SENDER_USER"; fi
    if [[ -n $TMP && -d $TMP ]]; then rm -rf -- "$TMP"; fi
    if [[ -n $SELFDIR && -d $SELFDIR ]]; then rm -rf -- "$SELFDIR"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pam_totp_bench.XXXXXXXX")
chmod 0700 "$TMP"

if ! id "$BENCH_USER" >/dev/null 2>&1; then
    useradd -r -M -s /usr/sbin/nologin "$BENCH_USER"
    CREATED_USER=1
fi
# pam-totpd refuses to start with sms_command set and no delivery user: created as make install does.
if [[ -n $PAM_TOTPD ]] && ! getent passwd "$SENDER_USER" >/dev/null; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group "$SENDER_USER"
    CREATED_SENDER=1
fi

SECRET=$(head -c 20 /dev/urandom | base32 | tr -d '=\n')   # 20 bytes -> 32 Base32 chars
printf '%s\n' "$SECRET" >"$TMP/secret"

# Seconds left in the current 30 s step; sleep into the next step when fewer than $1 remain.
guard_step() {
    local now rem
    now=$(date +%s)
    rem=$((30 - now % 30))
    if ((rem < $1)); then sleep "$rem"; fi
}
current_code() { guard_step 3; oathtool --totp -b "$SECRET"; }

# google-authenticator's secret files (its own format, fixed since 2011), one per configuration:
# - plain: secret + TOTP_AUTH only. No RATE_LIMIT, no DISALLOW_REUSE (either makes the module
#   rewrite the file on every attempt), default WINDOW_SIZE (3). It never writes the file.
# - guarded: the same plus GA_PROTECTIONS. It rewrites the file on every attempt (the used code,
#   the attempt times), so like our store it is restored before every measured run.
mkdir -m 0700 "$TMP/ga" "$TMP/ga_guarded"
printf '%s\n" TOTP_AUTH\n' "$SECRET" >"$TMP/ga/$BENCH_USER"
printf '%s\n' "$SECRET" "${GA_PROTECTIONS[@]}" '" TOTP_AUTH' >"$TMP/ga_guarded/$BENCH_USER"
chmod 0600 "$TMP/ga/$BENCH_USER" "$TMP/ga_guarded/$BENCH_USER"
# - guarded, looking up the same account: the guarded file in the user's own directory, owned by
#   the user, and no user=root, so google-authenticator looks up the bench user (as our module
#   does) instead of root, and works as that user. Instructions only (the "same account" row).
SELFDIR=$(mktemp -d "${TMPDIR:-/tmp}/pam_totp_bench_self.XXXXXXXX")
cp "$TMP/ga_guarded/$BENCH_USER" "$SELFDIR/$BENCH_USER"
chown -R "$BENCH_USER": "$SELFDIR"
chmod 0700 "$SELFDIR"; chmod 0600 "$SELFDIR/$BENCH_USER"
mkdir -m 0700 "$TMP/ga_self_pristine"
cp -a "$SELFDIR/$BENCH_USER" "$TMP/ga_self_pristine/"

# Our store, enrolled only through the CLI: nothing here knows its files or their format (the
# whole directory is copied to reset it). The Base32 secret goes on stdin (`--secret -`).
#
# Enrolment records the time step of the code that proved it as used, so a login with that
# step's code is (rightly) refused as a replay. The enrolment therefore runs under faketime with
# its clock ENROL_STEPS_BACK steps (6 minutes) in the past, proved by oathtool's code for that
# time: whatever the CLI marks as used — the proving step, or even its whole window of up to
# ±10 steps — lies before every login measured here, without sleeping into the next step and
# without relying on how wide the CLI's window is. The correctness gate below then proves that
# the current code logs in and that the same code cannot log in twice.
dir_hash() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }
mkdir -m 0700 "$TMP/store"
now=$(date +%s)
ENROL_AT=$(((now / 30 - ENROL_STEPS_BACK) * 30 + 15))   # mid-step: the code stays valid while the CLI runs
enrol_code=$(oathtool --totp -b --now "@$ENROL_AT" "$SECRET")
log "enrolling $BENCH_USER with $TOTP_ENROLL (clock set $(((now - ENROL_AT) / 60)) min back by faketime)"
printf '%s\n' "$SECRET" |
    faketime "@$ENROL_AT" "$TOTP_ENROLL" --user "$BENCH_USER" --store "$TMP/store" --name bench \
        --secret - --code "$enrol_code" --qr none >"$TMP/enroll.out" 2>&1 ||
    die "enrolment failed: faketime @$ENROL_AT $TOTP_ENROLL --user $BENCH_USER --store DIR --name bench --secret - --code C --qr none: $(tail -3 "$TMP/enroll.out")"
[[ -n $(dir_hash "$TMP/store") ]] || die "$TOTP_ENROLL reported success but left $TMP/store empty"
ENROLLED_WITH="\`totp-enroll --user $BENCH_USER --store DIR --name bench --secret - --code CODE --qr none\` under \`faketime\`, $(((now - ENROL_AT) / 60)) min back"

svc() { printf '%s%s' "$SERVICE_PREFIX" "$1"; }
write_service() { # write_service MODULE LINE
    local f
    f=/etc/pam.d/$(svc "$1")
    PAMD_FILES+=("$f")
    printf '# temporary, written by scripts/bench.sh\n%s\n' "$2" >"$f"
}

# A returning user, not one logging in for the first time since enrolment: one login before the
# pristine copy, under faketime halfway between the enrolment and now (WARM_AT). The store then
# holds the user's state file (its first login creates it; later ones update it in place), and
# the measured logins, with the current code, are past the step this login used.
WARM_AT=$((ENROL_AT + ENROL_STEPS_BACK / 2 * 30))
write_service warmup "auth required $OUR_SO store=$TMP/store adjacent_intervals=5"
oathtool --totp -b --now "@$WARM_AT" "$SECRET" |
    faketime "@$WARM_AT" pamtester "$(svc warmup)" "$BENCH_USER" authenticate >"$TMP/warmup.out" 2>&1 ||
    die "the warm-up login (faketime @$WARM_AT) failed: $(tail -3 "$TMP/warmup.out")"

# Pristine copies: every measured run starts from the same state (both pam_totp and the guarded
# google-authenticator record the last accepted code and the attempts; restoring keeps replay
# guard and rate limits out of the numbers).
mkdir -m 0700 "$TMP/pristine"
cp -a "$TMP/store" "$TMP/ga" "$TMP/ga_guarded" "$TMP/pristine/"
GA_HASH=$(dir_hash "$TMP/ga")
GUARDED_HASH=$(dir_hash "$TMP/ga_guarded")
OURS_HASH=$(dir_hash "$TMP/store")

# reset.sh: restore every module's state and write a fresh valid code (never timed: it runs in
# hyperfine's --prepare or outside the timed region of the loop).
cat >"$TMP/reset.sh" <<EOF
#!/bin/sh
set -eu
rm -rf '$TMP/store' '$TMP/ga' '$TMP/ga_guarded'
cp -a '$TMP/pristine/store' '$TMP/pristine/ga' '$TMP/pristine/ga_guarded' '$TMP/'
cp -a '$TMP/ga_self_pristine/$BENCH_USER' '$SELFDIR/$BENCH_USER'
now=\$(date +%s); rem=\$((30 - now % 30)); [ "\$rem" -ge 3 ] || sleep "\$rem"
oathtool --totp -b "\$(cat '$TMP/secret')" >'$TMP/code_ok'
EOF
chmod 0700 "$TMP/reset.sh"
reset_state() { "$TMP/reset.sh"; }

# A wrong code: not valid anywhere in +/-1600 steps, so google-authenticator's +/-1499-step skew
# search finds nothing (a hit would make it rewrite its file) during the whole run.
wrong=$(current_code)
wrong=$(printf '%06d' $(((10#$wrong + 1) % 1000000)))
tries=0
while oathtool --totp -b -w 1600 "$SECRET" "$wrong" >/dev/null 2>&1; do
    wrong=$(printf '%06d' $(((10#$wrong + 7919) % 1000000)))
    ((++tries < 1000)) || die "could not find a wrong code"
done
printf '%s\n' "$wrong" >"$TMP/code_wrong"

write_service floor   "auth required pam_permit.so"
write_service ours    "auth required $OUR_SO store=$TMP/store adjacent_intervals=5"
write_service theirs  "auth required pam_google_authenticator.so secret=$TMP/ga/\${USER} user=root"
write_service guarded "auth required pam_google_authenticator.so secret=$TMP/ga_guarded/\${USER} user=root"
write_service selfga  "auth required pam_google_authenticator.so secret=$SELFDIR/\${USER}"
declare -A STATE_DIR=([ours]=$TMP/store [theirs]=$TMP/ga [guarded]=$TMP/ga_guarded [selfga]=$SELFDIR)
declare -A PRISTINE_HASH=([ours]=$OURS_HASH [theirs]=$GA_HASH [guarded]=$GUARDED_HASH [selfga]=$(dir_hash "$SELFDIR"))
declare -A LABEL=([floor]="pam_permit.so" [ours]=pam_totp [theirs]=google-authenticator
                  [guarded]="google-authenticator with the same protections"
                  [selfga]="google-authenticator with the same protections, looking up the same account")

pt() { # pt MODULE CODEFILE [extra wrapper...]: one pamtester authenticate, answer on stdin
    local m=$1 input=$2
    shift 2
    "$@" pamtester "$(svc "$m")" "$BENCH_USER" authenticate <"$input" >/dev/null 2>&1
}
now_ns() { date +%s%N; }

# ---------------------------------------------------------------- correctness gate
# Every module must accept the current code and reject a wrong one; the modules that guard
# against replay (pam_totp, guarded google-authenticator) must also reject the same code a second
# time, and reset.sh must bring every state directory back to its pristine bytes.
declare -A PROBE_WRONG_MS WRITES
CHECK_MSG=
check_module() { # check_module MODULE
    local m=$1 label=${LABEL[$1]} dir=${STATE_DIR[$1]} rc t0
    reset_state
    [[ $(dir_hash "$dir") == "${PRISTINE_HASH[$m]}" ]] ||
        { CHECK_MSG="$label: reset.sh did not restore its state"; return 1; }
    rc=0; pt "$m" "$TMP/code_ok" || rc=$?
    if ((rc != 0)); then CHECK_MSG="$label: the current code was rejected (pamtester exit $rc)"; return 1; fi
    WRITES[$m]=no
    [[ $(dir_hash "$dir") == "${PRISTINE_HASH[$m]}" ]] || WRITES[$m]=yes
    if [[ $m != theirs ]]; then
        rc=0; pt "$m" "$TMP/code_ok" || rc=$?
        if ((rc == 0)); then CHECK_MSG="$label: the same code was accepted twice (replay guard not in effect)"; return 1; fi
    fi
    reset_state
    t0=$(now_ns)
    rc=0; pt "$m" "$TMP/code_wrong" || rc=$?
    PROBE_WRONG_MS[$m]=$((($(now_ns) - t0) / 1000000))
    if ((rc == 0)); then CHECK_MSG="$label: the wrong code $(cat "$TMP/code_wrong") was accepted"; return 1; fi
    return 0
}
log "checking that every module accepts the current code, once, and rejects a wrong one"
for m in theirs guarded selfga; do
    check_module "$m" || die "$CHECK_MSG: fix the set-up before benchmarking"
done
[[ ${WRITES[selfga]} == yes ]] ||
    die "google-authenticator (guarded, same account) did not record the login in its secret file"
[[ ${WRITES[theirs]} == no ]] ||
    die "google-authenticator (plain) rewrote its secret file on a login (options not as intended)"
[[ ${WRITES[guarded]} == yes ]] ||
    die "google-authenticator (guarded) did not record the login in its secret file (DISALLOW_REUSE/RATE_LIMIT not in effect?)"
if check_module ours; then :
elif [[ $STANDIN == 1 ]]; then warn "BENCH_ALLOW_STANDIN=1: ignoring: $CHECK_MSG"; WRITES[ours]=${WRITES[ours]:-unknown}
else die "$CHECK_MSG: a benchmark of a broken path is worthless"
fi
rc=0; pt floor "$TMP/code_wrong" || rc=$?
((rc == 0)) || die "pam_permit.so floor service failed (exit $rc)"
PROBE_WRONG_MS[floor]=0

# ---------------------------------------------------------------- 1. instructions (callgrind)
declare -A INSTR
callgrind_run() { # callgrind_run MODULE PATH(ok|wrong) [FUNCTION]: with FUNCTION, only the instructions inside it
    local m=$1 p=$2 fn=${3:-} rc n
    reset_state
    rc=0
    local profile=/dev/null toggle=()
    if [[ -n ${BENCH_PROFILES:-} && -z $fn ]]; then profile=$BENCH_PROFILES/$m.$p; fi
    [[ -z $fn ]] || toggle=(--toggle-collect="$fn")
    valgrind --tool=callgrind --callgrind-out-file="$profile" "${toggle[@]}" \
        --log-file="$TMP/vg.log" pamtester "$(svc "$m")" "$BENCH_USER" authenticate <"$TMP/code_$p" >/dev/null 2>&1 || rc=$?
    n=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$TMP/vg.log")
    [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "no instructions counted by callgrind for $m/$p${fn:+ inside $fn}: $(tail -3 "$TMP/vg.log")"
    if [[ $m != floor && ! ($m == ours && $STANDIN == 1) ]]; then
        if [[ $p == ok ]] && ((rc != 0)); then die "$m rejected the right code under valgrind (exit $rc)"; fi
        if [[ $p == wrong ]] && ((rc == 0)); then die "$m accepted the wrong code under valgrind"; fi
    fi
    INSTR[$m,$p${fn:+,$fn}]=$n
}
for p in ok wrong; do
    for m in "${MODULES[@]}" selfga; do
        log "callgrind: $m, ${p/ok/success} path"
        callgrind_run "$m" "$p"
    done
done

# ---------------------------------------------------------------- 2. wall and CPU time
declare -A WALL SD CPU NRUNS
time_hyperfine() { # time_hyperfine MODULE PATH RUNS
    local m=$1 p=$2 n=$3 warm=5 ign=()
    [[ $p == wrong ]] && ign=(--ignore-failure)
    if ((n < RUNS)); then warm=0; fi
    hyperfine --style none --runs "$n" --warmup "$warm" "${ign[@]}" \
        --prepare "$TMP/reset.sh" --export-csv "$TMP/hf.csv" \
        "pamtester $(svc "$m") $BENCH_USER authenticate <$TMP/code_$p" >"$TMP/hf.out" 2>&1 ||
        die "hyperfine failed for $m/$p (a run failed on the success path?): $(tail -5 "$TMP/hf.out")"
    # command,mean,stddev,median,user,system,min,max (seconds)
    local mean sd cpu
    read -r mean sd cpu < <(sed -n 2p "$TMP/hf.csv" |
        awk -F, '{ printf "%.4f %.4f %.4f\n", $2 * 1000, $3 * 1000, ($5 + $6) * 1000 }')
    [[ -n $cpu ]] || die "unreadable hyperfine CSV for $m/$p"
    WALL[$m,$p]=$mean SD[$m,$p]=$sd CPU[$m,$p]=$cpu
}
time_loop() { # time_loop MODULE PATH RUNS: bash fallback, only pamtester itself is timed
    local m=$1 p=$2 n=$3 i rc total=0 sq=0 cpu=0 r u s
    local TIMEFORMAT='%3R %3U %3S'
    for ((i = 0; i < n; i++)); do
        reset_state
        rc=0
        { time pt "$m" "$TMP/code_$p" 2>/dev/null; } 2>"$TMP/t.out" || rc=$?
        if [[ $p == ok ]] && ((rc != 0)) && [[ ! ($m == ours && $STANDIN == 1) ]]; then
            die "$m rejected the right code in run $i (exit $rc)"
        fi
        read -r r u s <"$TMP/t.out"
        total=$(awk -v a="$total" -v b="$r" 'BEGIN { print a + b * 1000 }')
        sq=$(awk -v a="$sq" -v b="$r" 'BEGIN { print a + b * b * 1000000 }')
        cpu=$(awk -v a="$cpu" -v b="$u" -v c="$s" 'BEGIN { print a + (b + c) * 1000 }')
    done
    WALL[$m,$p]=$(awk -v t="$total" -v n="$n" 'BEGIN { printf "%.4f", t / n }')
    SD[$m,$p]=$(awk -v t="$total" -v q="$sq" -v n="$n" 'BEGIN { v = n > 1 ? (q - t * t / n) / (n - 1) : 0; printf "%.4f", (v > 0 ? sqrt(v) : 0) }')
    CPU[$m,$p]=$(awk -v t="$cpu" -v n="$n" 'BEGIN { printf "%.4f", t / n }')
}
for p in ok wrong; do
    for m in "${MODULES[@]}"; do
        n=$RUNS
        if [[ $p == wrong ]] && ((PROBE_WRONG_MS[$m] > 100)); then
            # a failure that sleeps (pam_fail_delay): bound the time spent, note it in the report
            n=$((WRONG_PATH_BUDGET_MS / PROBE_WRONG_MS[$m]))
            if ((n < 3)); then n=3; fi
            if ((n > RUNS)); then n=$RUNS; fi
        fi
        NRUNS[$m,$p]=$n
        log "timing: $m, ${p/ok/success} path, $n runs"
        if ((HAVE_HYPERFINE)); then time_hyperfine "$m" "$p" "$n"; else time_loop "$m" "$p" "$n"; fi
    done
done

# ---------------------------------------------------------------- 3. peak RSS (success path)
declare -A RSS
for m in "${MODULES[@]}"; do
    vals=()
    for _ in 1 2 3 4 5; do
        reset_state
        pt "$m" "$TMP/code_ok" /usr/bin/time -f %M -o "$TMP/rss" || [[ $m == ours && $STANDIN == 1 ]] ||
            die "$m rejected the right code under /usr/bin/time"
        vals+=("$(tail -1 "$TMP/rss")")
    done
    RSS[$m]=$(printf '%s\n' "${vals[@]}" | sort -n | sed -n 3p)   # median of 5
done

# ---------------------------------------------------------------- 4. sizes
declare -A SIZE
SIZE[floor]=$(stat -L -c %s "$PERMIT_SO")
SIZE[ours]=$(stat -L -c %s "$OUR_SO")
SIZE[theirs]=$(stat -L -c %s "$GA_SO")
SIZE[guarded]=${SIZE[theirs]}

# ---------------------------------------------------------------- 5. in-process verification
# verify-bench (Tests/VerifyBench, built like the module) calls TOTPVerifier.match at window 5
# (11 codes, constant time) through a function named pam_totp_bench_match, and the 11 HMACs it
# has to compute through pam_totp_bench_hmacs; callgrind counts only inside the one named by
# --toggle-collect. The names are fixed in that program, not mangled Swift: a rename in the library
# does not touch them, and a function that was not entered reads 0 and stops the script.
declare -A VERIFY
verify_cost() { # verify_cost match|hmacs UNIX_TIME
    local mode=$1 at=$2 rc=0 n
    LD_BIND_NOW=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$TMP/vg.verify.log" \
        --toggle-collect="pam_totp_bench_$mode" \
        "$VERIFY_BENCH" "$mode" "$SECRET" "$at" >"$TMP/verify.out" 2>&1 || rc=$?
    ((rc == 0)) || die "$VERIFY_BENCH $mode failed under valgrind (exit $rc): $(tail -3 "$TMP/verify.out")"
    n=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$TMP/vg.verify.log")
    [[ $n =~ ^[0-9]+$ ]] || die "no 'Collected' count from callgrind for verify-bench $mode: $(tail -3 "$TMP/vg.verify.log")"
    ((n > 0)) || die "callgrind counted 0 instructions in pam_totp_bench_$mode: the function was not entered (renamed or inlined? see Tests/VerifyBench)"
    VERIFY[$mode]=$n
}
log "callgrind: in-process verification (verify-bench)"
at=$(date +%s)
verify_cost match "$at"
verify_cost hmacs "$at"

# ---------------------------------------------------------------- 5b. what the rules fix in process
# The parts of a success login that the project's rules fix (docs/ARCHITECTURE.md): the account
# look-up that binds the record to the uid (getpwnam_r, counted inside our module's run with
# --toggle-collect), the 11 HMACs of the constant-time window (verify-bench, above), the success
# line in the log (pam_syslog, the same way), and loading and unloading a module at all (an
# empty C module, run like ours, above the floor). Their sum is a floor under the success path
# whatever the store does; the report compares it with the 0.6x target.
# The empty module, built once: here as root, and in section 6 as the user (a copy the user can read).
printf '%s\n' '#include <security/pam_modules.h>' \
    'int pam_sm_authenticate(pam_handle_t *h, int f, int c, const char **v) { return PAM_SUCCESS; }' \
    'int pam_sm_setcred(pam_handle_t *h, int f, int c, const char **v) { return PAM_SUCCESS; }' >"$TMP/empty.c"
gcc -shared -fPIC -O2 -o "$TMP/pam_empty.so" "$TMP/empty.c" -lpam || die "cannot build the empty module (gcc, libpam0g-dev)"
write_service emptyroot "auth required $TMP/pam_empty.so"
log "callgrind: the parts the rules fix (account look-up, log line, an empty module)"
callgrind_run ours ok 'getpwnam_r*'
callgrind_run ours ok pam_syslog
callgrind_run emptyroot ok
declare -A PART=([lookup]=${INSTR[ours,ok,getpwnam_r*]} [log]=${INSTR[ours,ok,pam_syslog]}
                 [load]=$((INSTR[emptyroot,ok] - INSTR[floor,ok])))

# ---------------------------------------------------------------- 6. the daemon path
# A caller without root (a screen locker): pamtester runs as $BENCH_USER, the module asks
# pam-totpd over its socket, the daemon verifies against the same store as root. Module-side
# instructions are callgrind's count for that pamtester process above a pam_permit.so floor run
# the same way; daemon-side CPU is the sum of the daemon's threads' on-CPU time
# (/proc/PID/task/*/schedstat, ns) across the timed runs, divided by the requests they made.
declare -A DPATH
if [[ -n $PAM_TOTPD ]]; then
    SOCKDIR=$(mktemp -d /tmp/pam_totp_bench_sock.XXXXXXXX)
    chmod 0755 "$SOCKDIR"
    mkdir -m 0700 "$SOCKDIR/vg" && chown "$BENCH_USER" "$SOCKDIR/vg"
    printf 'store = %s\nadjacent_intervals = 5\n' "$TMP/store" >"$TMP/daemon.conf"
    chmod 0644 "$TMP/daemon.conf"
    "$PAM_TOTPD" --config "$TMP/daemon.conf" --socket "$SOCKDIR/socket" >"$TMP/daemon.log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 100); do [[ -S $SOCKDIR/socket ]] && break; sleep 0.1; done
    [[ -S $SOCKDIR/socket ]] || die "pam-totpd did not create its socket: $(tail -3 "$TMP/daemon.log")"
    proc_kb() { awk -v k="$1:" '$1 == k { print $2 }' /proc/"$DAEMON_PID"/status; }
    DPATH[rss_idle]=$(proc_kb VmRSS)
    write_service userfloor "auth required pam_permit.so"
    # What loading any second module costs above pam_permit.so (it is not pam_totp's work): an
    # empty C module, built here, that only returns PAM_SUCCESS.
    install -m 0755 "$TMP/pam_empty.so" "$SOCKDIR/pam_empty.so"  # built in section 5b
    write_service emptymod "auth required $SOCKDIR/pam_empty.so"
    # The floor under the module side (scripts/bench-module-floor.c): a C module linked like a real
    # one that gets the user, asks once, makes one round trip to the daemon and logs one line.
    gcc -shared -fPIC -O2 -o "$SOCKDIR/pam_cfloor.so" "$(dirname "$0")/bench-module-floor.c" -lpam ||
        die "cannot build scripts/bench-module-floor.c"
    write_service cfloor "auth required $SOCKDIR/pam_cfloor.so socket=$SOCKDIR/socket"
    write_service daemon "auth required $OUR_SO socket=$SOCKDIR/socket adjacent_intervals=5"
    BENCH_GID=$(id -g "$BENCH_USER")
    as_user() { setpriv --reuid "$BENCH_USER" --regid "$BENCH_GID" --clear-groups "$@"; }
    daemon_cpu_ns() { cat /proc/"$DAEMON_PID"/task/*/schedstat | awk '{ s += $1 } END { printf "%d\n", s }'; }
    # A phone-factor login (issue 19): an account whose only factor is a phone, through a
    # second pam-totpd whose configuration names a sender (sms_command). Set up and enrolled
    # here, measured at the end of this section: the enrolment's send is in the account's state,
    # and its next send must wait oob_resend_interval (30 s), which the measurements between
    # use up. Its own store, configuration and socket: the rows above are not touched.
    PHONE_DIR=$SOCKDIR/phone                 # 0755: the sender and the configuration, read as other users
    PHONE_CONF=$PHONE_DIR/pam_totp.conf      # the daemons' and the module's (config=)
    PHONE_SOCK=$PHONE_DIR/socket
    PHONE_SPOOL=$PHONE_DIR/spool/messages    # what the sender received: "to NUMBER", the message, "--"
    PHONE_FIFO=$PHONE_DIR/answer
    mkdir -m 0755 "$PHONE_DIR"
    mkdir -m 0700 "$PHONE_DIR/spool" "$TMP/phonestore"
    chown "$SENDER_USER:" "$PHONE_DIR/spool"
    # The sender (tests' pattern): root's, mode 0755, run as pam-totp-sender with the message on stdin.
    cat >"$PHONE_DIR/sms" <<EOF
#!/bin/sh
# temporary, written by scripts/bench.sh: appends "to NUMBER", the message and "--" to the spool
{ printf 'to %s\\n' "\$1"; cat; printf '\\n--\\n'; } >>'$PHONE_SPOOL'
EOF
    chmod 0755 "$PHONE_DIR/sms"
    printf 'store = %s\nadjacent_intervals = 5\nsms_command = %s\n' "$TMP/phonestore" "$PHONE_DIR/sms" >"$PHONE_CONF"
    # totp-enroll finds pam-totpd through its configuration's socket (it has no --socket).
    { cat "$PHONE_CONF"; printf 'socket = %s\n' "$PHONE_SOCK"; } >"$PHONE_DIR/enroll.conf"
    chmod 0644 "$PHONE_CONF" "$PHONE_DIR/enroll.conf"
    "$PAM_TOTPD" --config "$PHONE_CONF" --socket "$PHONE_SOCK" >"$TMP/phone-daemon.log" 2>&1 &
    PHONE_PID=$!
    for _ in $(seq 100); do [[ -S $PHONE_SOCK ]] && break; sleep 0.1; done
    [[ -S $PHONE_SOCK ]] || die "pam-totpd (with sms_command) did not create its socket: $(tail -3 "$TMP/phone-daemon.log")"
    phone_msgs() { # messages in the spool so far
        if [[ -f $PHONE_SPOOL ]]; then awk '$0 == "--" { n++ } END { print n + 0 }' "$PHONE_SPOOL"; else echo 0; fi
    }
    phone_code() { # the code in the spool's last message (its first run of 6 or more digits)
        awk '$0 == "--" { last = cur; cur = ""; next } /^to / { next } { cur = cur " " $0 }
             END { if (match(last, /[0-9][0-9][0-9][0-9][0-9][0-9]+/)) print substr(last, RSTART, RLENGTH) }' "$PHONE_SPOOL"
    }
    # phone_drive ok|wrong OUT COMMAND...: COMMAND (a login, or totp-enroll add-phone) with its
    # standard input on a FIFO. Nothing is written until the code it made pam-totpd send is in the
    # spool (the sender has exited: the message ends with "--"); then that code (ok) or another
    # (wrong) and end of input. Reading stdin the process waits in read(2): the wait costs it no
    # instructions, and nothing but the code it is asked for reaches it. Sets PHONE_RC (its exit
    # status) and PHONE_SENT (messages sent while it ran).
    phone_drive() {
        local how=$1 out=$2 before code fd pid i
        shift 2
        before=$(phone_msgs)
        rm -f -- "$PHONE_FIFO"
        mkfifo -m 0600 "$PHONE_FIFO"
        "$@" <"$PHONE_FIFO" >"$out" 2>&1 &
        pid=$!
        exec {fd}>"$PHONE_FIFO"
        for ((i = 0; i < 1200; i++)); do   # up to 60 s (pam-totpd or pamtester under valgrind)
            (($(phone_msgs) > before)) && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        PHONE_SENT=$(($(phone_msgs) - before))
        if ((PHONE_SENT > 0)); then
            code=$(phone_code)
            [[ $code =~ ^[0-9]+$ ]] || die "no code in the spool's last message ($PHONE_SPOOL)"
            if [[ $how == wrong ]]; then code=$(printf '%0*d' "${#code}" $(((10#$code + 1) % 10 ** ${#code}))); fi
            printf '%s\n' "$code" >&"$fd"
        fi
        exec {fd}>&-
        PHONE_RC=0
        wait "$pid" || PHONE_RC=$?
        rm -f -- "$PHONE_FIFO"
    }
    log "enrolling $BENCH_USER with a phone only: totp-enroll add-phone $PHONE_NUMBER (the code read from the spool)"
    phone_drive ok "$TMP/enroll-phone.out" "$TOTP_ENROLL" --config "$PHONE_DIR/enroll.conf" --user "$BENCH_USER" \
        --store "$TMP/phonestore" add-phone "$PHONE_NUMBER" --name mobile
    ((PHONE_RC == 0 && PHONE_SENT == 1)) ||
        die "totp-enroll add-phone failed (exit $PHONE_RC, $PHONE_SENT messages sent): $(tail -3 "$TMP/enroll-phone.out") $(tail -3 "$TMP/phone-daemon.log")"
    PHONE_ENROLLED_AT=$(date +%s)   # its send was before this
    # No warm-up login: the enrolment's send is recorded in the user's state, so the state file
    # exists and every measured login is a returning user's, as for the app code above.
    mkdir -m 0700 "$TMP/pristine/phone"
    cp -a "$TMP/phonestore" "$TMP/pristine/phone/"
    phone_reset() { rm -rf -- "$TMP/phonestore"; cp -a "$TMP/pristine/phone/phonestore" "$TMP/"; }
    # Gate: the right code through the daemon, once; a wrong one refused.
    reset_state
    rc=0; as_user pamtester "$(svc daemon)" "$BENCH_USER" authenticate <"$TMP/code_ok" >/dev/null 2>&1 || rc=$?
    ((rc == 0)) || die "the daemon path rejected the current code (exit $rc): $(tail -3 "$TMP/daemon.log")"
    rc=0; as_user pamtester "$(svc daemon)" "$BENCH_USER" authenticate <"$TMP/code_ok" >/dev/null 2>&1 || rc=$?
    ((rc != 0)) || die "the daemon path accepted the same code twice"
    for m in userfloor emptymod cfloor daemon; do
        for p in ok wrong; do
            [[ ($m == emptymod || $m == cfloor) && $p == wrong ]] && continue
            log "callgrind: $m as $BENCH_USER, ${p/ok/success} path"
            reset_state
            rc=0
            as_user valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$SOCKDIR/vg/vg.log" \
                pamtester "$(svc "$m")" "$BENCH_USER" authenticate <"$TMP/code_$p" >/dev/null 2>&1 || rc=$?
            n=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$SOCKDIR/vg/vg.log")
            [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "no callgrind count for $m/$p as $BENCH_USER"
            if [[ $m == emptymod || $m == cfloor ]] && ((rc != 0)); then die "the $m module failed under valgrind"; fi
            if [[ $m == daemon && $p == ok ]] && ((rc != 0)); then die "the daemon path rejected the right code under valgrind"; fi
            if [[ $m == daemon && $p == wrong ]] && ((rc == 0)); then die "the daemon path accepted a wrong code under valgrind"; fi
            DPATH[instr,$m,$p]=$n
        done
    done
    ((HAVE_HYPERFINE)) || die "the daemon path needs hyperfine (apt-get install -y hyperfine)"
    # Wall time of the success path as the user, through the daemon and over the floor; the
    # daemon's CPU across the same runs.
    before=$(daemon_cpu_ns)
    hyperfine --style none --runs "$RUNS" --warmup 5 --prepare "$TMP/reset.sh" --export-csv "$TMP/hfd.csv" \
        "setpriv --reuid $BENCH_USER --regid $BENCH_GID --clear-groups pamtester $(svc daemon) $BENCH_USER authenticate <$TMP/code_ok" \
        >"$TMP/hfd.out" 2>&1 || die "hyperfine failed for the daemon path: $(tail -5 "$TMP/hfd.out")"
    after=$(daemon_cpu_ns)
    DPATH[cpu_ns]=$(((after - before) / (RUNS + 5)))
    DPATH[rss_after]=$(proc_kb VmRSS)
    DPATH[rss_peak]=$(proc_kb VmHWM)
    read -r DPATH[wall] DPATH[sd] < <(sed -n 2p "$TMP/hfd.csv" | awk -F, '{ printf "%.4f %.4f\n", $2 * 1000, $3 * 1000 }')
    hyperfine --style none --runs "$RUNS" --warmup 5 --prepare "$TMP/reset.sh" --export-csv "$TMP/hff.csv" \
        "setpriv --reuid $BENCH_USER --regid $BENCH_GID --clear-groups pamtester $(svc userfloor) $BENCH_USER authenticate <$TMP/code_ok" \
        >"$TMP/hff.out" 2>&1 || die "hyperfine failed for the user floor: $(tail -5 "$TMP/hff.out")"
    read -r DPATH[floorwall] DPATH[floorsd] < <(sed -n 2p "$TMP/hff.csv" | awk -F, '{ printf "%.4f %.4f\n", $2 * 1000, $3 * 1000 }')
    # The floor under the daemon's CPU: only the file system calls of one accepted code, in C
    # (scripts/bench-syscall-floor.c), on the store's file system; spaced like the timed logins
    # (the mean wall time of one), then back to back.
    gcc -O2 -o "$SOCKDIR/syscall-floor" "$(dirname "$0")/bench-syscall-floor.c" || die "cannot build scripts/bench-syscall-floor.c"
    pace_us=$(awk -v ms="${DPATH[wall]}" 'BEGIN { printf "%d", ms * 1000 }')
    for mode in paced back; do
        mkdir -m 0700 "$TMP/floor.$mode"
        DPATH[sysfloor,$mode]=$("$SOCKDIR/syscall-floor" "$TMP/floor.$mode" 300 "$([[ $mode == paced ]] && echo "$pace_us" || echo 0)") ||
            die "scripts/bench-syscall-floor.c failed"
        rm -rf "$TMP/floor.$mode"
    done
    # Daemon-side instructions per request: a second pam-totpd under callgrind (a copy without
    # DWARF, which this valgrind cannot read), answering 5 and then 25 requests; the difference
    # over 20 leaves out its start and exit. Every request from a restored store.
    strip -g -o "$SOCKDIR/pam-totpd.cg" "$PAM_TOTPD"
    write_service daemoncg "auth required $OUR_SO socket=$SOCKDIR/cg.socket adjacent_intervals=5"
    daemon_instructions() { # daemon_instructions REQUESTS ok|wrong
        rm -f "$SOCKDIR/cg.socket" "$SOCKDIR/cg.log"
        valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$SOCKDIR/cg.log" \
            "$SOCKDIR/pam-totpd.cg" --config "$TMP/daemon.conf" --socket "$SOCKDIR/cg.socket" >/dev/null 2>&1 &
        local pid=$! i n
        for _ in $(seq 300); do [[ -S $SOCKDIR/cg.socket ]] && break; sleep 0.1; done
        [[ -S $SOCKDIR/cg.socket ]] || die "pam-totpd under callgrind did not create its socket"
        for i in $(seq "$1"); do
            reset_state
            as_user pamtester "$(svc daemoncg)" "$BENCH_USER" authenticate <"$TMP/code_$2" >/dev/null 2>&1 || true
        done
        kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
        n=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$SOCKDIR/cg.log")
        [[ $n =~ ^[0-9]+$ ]] || die "no callgrind count for pam-totpd ($1 requests, $2)"
        echo "$n"
    }
    for p in ok wrong; do
        log "callgrind: pam-totpd, ${p/ok/success} path, 5 and 25 requests"
        a=$(daemon_instructions 5 "$p"); b=$(daemon_instructions 25 "$p")
        DPATH[dinstr,$p]=$(((b - a) / 20))
    done
    # The phone-factor login, measured: the module as the user asks pam-totpd to look the user
    # up (the hints: one phone), to send (op 3), then to check the code typed.
    write_service phone "auth required $OUR_SO config=$PHONE_CONF socket=$PHONE_SOCK adjacent_intervals=5"
    wait_s=$((PHONE_ENROLLED_AT + 32 - $(date +%s)))
    if ((wait_s > 0)); then log "waiting $wait_s s: one send per account per 30 s (oob_resend_interval), the enrolment's was the last"; sleep "$wait_s"; fi
    # Gate: the code sent logs in, and the requests it took are counted (the module's
    # connections to the socket, strace); a wrong answer to a code sent is refused.
    phone_reset
    phone_drive ok "$SOCKDIR/vg/phone.gate" as_user strace -f -qq -e trace=connect -o "$SOCKDIR/vg/phone.strace" \
        pamtester "$(svc phone)" "$BENCH_USER" authenticate
    ((PHONE_RC == 0 && PHONE_SENT == 1)) ||
        die "the phone-factor login failed (exit $PHONE_RC, $PHONE_SENT messages sent): $(tail -3 "$SOCKDIR/vg/phone.gate") $(tail -3 "$TMP/phone-daemon.log")"
    grep -q 'Code sent to ' "$SOCKDIR/vg/phone.gate" || die "the phone-factor login did not ask for the code sent: $(tail -3 "$SOCKDIR/vg/phone.gate")"
    PHONE_REQS=$(grep -c "sun_path=\"$PHONE_SOCK\"}, [0-9]*) = 0\$" "$SOCKDIR/vg/phone.strace" || true)
    [[ $PHONE_REQS =~ ^[1-9][0-9]*$ ]] || die "no connection to pam-totpd counted in the phone-factor login (strace): $(tail -3 "$SOCKDIR/vg/phone.strace")"
    phone_reset
    phone_drive wrong "$SOCKDIR/vg/phone.gate" as_user pamtester "$(svc phone)" "$BENCH_USER" authenticate
    ((PHONE_SENT == 1)) || die "the phone-factor login sent $PHONE_SENT messages where one was due (wrong-answer gate)"
    ((PHONE_RC != 0)) || die "the phone-factor login accepted a wrong answer to the code sent"
    # Module side: callgrind on pamtester, as for the rows above.
    log "callgrind: phone-factor login as $BENCH_USER (module side)"
    phone_reset
    phone_drive ok "$SOCKDIR/vg/phone.out" as_user valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$SOCKDIR/vg/vg.log" \
        pamtester "$(svc phone)" "$BENCH_USER" authenticate
    ((PHONE_RC == 0 && PHONE_SENT == 1)) ||
        die "the phone-factor login failed under valgrind (exit $PHONE_RC, $PHONE_SENT messages sent): $(tail -3 "$SOCKDIR/vg/phone.out")"
    n=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$SOCKDIR/vg/vg.log")
    [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "no callgrind count for the phone-factor login as $BENCH_USER"
    DPATH[instr,phone,ok]=$n
    # pam-totpd's side: the callgrind copy answering 5 and then 25 phone logins (each from the
    # restored store, each checked), the difference over 20. The sender is not traced
    # (--trace-children=no): the program pam-totpd starts, and its own child between fork and
    # execve, are not counted; pam-totpd's side of starting, feeding and reaping it is.
    write_service phonecg "auth required $OUR_SO config=$PHONE_CONF socket=$PHONE_DIR/cg.socket adjacent_intervals=5"
    phone_daemon_instructions() { # phone_daemon_instructions LOGINS: sets PHONE_DCOUNT
        local i n
        rm -f -- "$PHONE_DIR/cg.socket" "$PHONE_DIR"/cg.*.log
        valgrind --tool=callgrind --trace-children=no --callgrind-out-file=/dev/null --log-file="$PHONE_DIR/cg.%p.log" \
            "$SOCKDIR/pam-totpd.cg" --config "$PHONE_CONF" --socket "$PHONE_DIR/cg.socket" >/dev/null 2>&1 &
        PHONE_CG_PID=$!
        for _ in $(seq 300); do [[ -S $PHONE_DIR/cg.socket ]] && break; sleep 0.1; done
        [[ -S $PHONE_DIR/cg.socket ]] || die "pam-totpd (with sms_command) under callgrind did not create its socket"
        for ((i = 1; i <= $1; i++)); do
            phone_reset
            phone_drive ok "$PHONE_DIR/cg.login" as_user pamtester "$(svc phonecg)" "$BENCH_USER" authenticate
            ((PHONE_RC == 0 && PHONE_SENT == 1)) ||
                die "phone-factor login $i of $1 through pam-totpd under callgrind failed (exit $PHONE_RC, $PHONE_SENT messages sent): $(tail -3 "$PHONE_DIR/cg.login")"
        done
        kill -TERM "$PHONE_CG_PID"
        wait "$PHONE_CG_PID" 2>/dev/null || true
        n=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$PHONE_DIR/cg.$PHONE_CG_PID.log")
        [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || die "no callgrind count for pam-totpd ($1 phone logins): $(tail -3 "$PHONE_DIR/cg.$PHONE_CG_PID.log")"
        # A sender callgrind followed to its end would have left its own count: none may.
        if grep -l 'Collected :' "$PHONE_DIR"/cg.*.log | grep -qv "/cg\.$PHONE_CG_PID\.log\$"; then
            die "callgrind counted a process other than pam-totpd (a sender traced?)"
        fi
        # This valgrind may not know pidfd_open (Linux 5.3): pam-totpd then waits for the sender's
        # exit with its fallback (a look every 10 ms), said in the report.
        if grep -q 'unhandled .*syscall: 434$' "$PHONE_DIR/cg.$PHONE_CG_PID.log"; then DPATH[phone_nopidfd]=1; fi
        PHONE_CG_PID=
        PHONE_DCOUNT=$n
    }
    log "callgrind: pam-totpd, phone-factor logins, 5 and 25"
    phone_daemon_instructions 5; a=$PHONE_DCOUNT
    phone_daemon_instructions 25; b=$PHONE_DCOUNT
    ((b > a)) || die "pam-totpd counted no more instructions for 25 phone logins ($b) than for 5 ($a)"
    DPATH[dinstr,phone]=$(((b - a) / 20))
    DPATH[phone_reqs]=$PHONE_REQS
fi

# ---------------------------------------------------------------- report
ratio() { # 3 significant digits, so a tiny ratio does not print as 0.000
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) { print "n/a"; exit } r = a / b
        if (r >= 1000 || r <= -1000) printf "%.0f\n", r; else printf "%#.3g\n", r }'
}
sub_() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d\n", a - b }'; }
fmt_ms() { awk -v a="$1" 'BEGIN { printf "%.3f\n", a }'; }
fmt_sd() { awk -v a="$1" -v s="$2" 'BEGIN { printf "%.3f ± %.3f\n", a, s }'; }
row() { printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$@"; }

declare -A ABOVE
for p in ok wrong; do
    for m in ours theirs guarded selfga; do
        ABOVE[$m,$p]=$(sub_ "${INSTR[$m,$p]}" "${INSTR[floor,$p]}")
    done
done
# The targets: against google-authenticator with the same protections.
r_ok=$(ratio "${ABOVE[ours,ok]}" "${ABOVE[guarded,ok]}")
r_wrong=$(ratio "${ABOVE[ours,wrong]}" "${ABOVE[guarded,wrong]}")
PASSWD_LINE=$(grep -n "^$BENCH_USER:" /etc/passwd | cut -d: -f1 || echo "?"); PASSWD_LINES=$(wc -l </etc/passwd)
PART_SUM=$((PART[lookup] + VERIFY[hmacs] + PART[log] + PART[load]))
r_self_ok=$(ratio "${ABOVE[ours,ok]}" "${ABOVE[selfga,ok]}")
r_self_wrong=$(ratio "${ABOVE[ours,wrong]}" "${ABOVE[selfga,wrong]}")
r_verify=$(ratio "${VERIFY[match]}" "${VERIFY[hmacs]}")
met() { # met VALUE LIMIT
    awk -v v="$1" -v l="$2" 'BEGIN { if (v == "n/a") print "n/a"; else if (v + 0 <= l + 0) print "**met**"; else print "**NOT met**" }'
}
vals_row() { # vals_row METRIC FLOOR OURS THEIRS GUARDED
    row "$1" "$2" "$3" "$4" "$5" "$(ratio "$3" "$4")" "$(ratio "$3" "$5")"
}

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo unknown; }
hf_ver=$( ((HAVE_HYPERFINE)) && hyperfine --version | awk '{ print $2 }' || echo "not installed")
runs_note() {
    local p=$1
    printf '%s/%s/%s/%s' "${NRUNS[floor,$p]}" "${NRUNS[ours,$p]}" "${NRUNS[theirs,$p]}" "${NRUNS[guarded,$p]}"
}
protections=$(printf '`%s`, ' "${GA_PROTECTIONS[@]}"); protections=${protections%, }

{
    echo "# Benchmarks: pam_totp vs pam_google_authenticator"
    echo
    echo "Generated by \`scripts/bench.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC')."
    echo
    echo "- Machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r), temp files on $(df -T "$TMP" | awk 'NR == 2 { print $2 }')"
    echo "- libpam0g $(ver libpam0g); libpam-google-authenticator $(ver libpam-google-authenticator); pamtester $(ver pamtester); $(valgrind --version); hyperfine $hf_ver"
    echo "- pam_totp: \`$OUR_SO\` (sha256 $(sha256sum "$OUR_SO" | cut -c1-16)…), enrolled with $ENROLLED_WITH"
    if [[ $STANDIN == 1 ]]; then
        echo "- **Development run with BENCH_ALLOW_STANDIN=1: the pam_totp column may be a stand-in module; its numbers and the targets below mean nothing.**"
    fi
    echo
    echo "## How it was measured"
    echo
    echo "- One run of this script, one system user (\`$BENCH_USER\`), one random 20-byte secret, the same code for every module."
    echo "  Four PAM services in \`/etc/pam.d\`, each \`pamtester SERVICE $BENCH_USER authenticate\` with the answer on stdin:"
    echo "  - floor: \`auth required pam_permit.so\`"
    echo "  - pam_totp: \`auth required pam_totp.so store=DIR adjacent_intervals=5\` (root-owned 0700 store), which always refuses a"
    echo "    used code, counts failures in the store and accepts 11 codes (T−5 … T+5). The user was enrolled through \`totp-enroll\` only,"
    echo "    with the clock set back by \`faketime\` so that the step its enrolment marks as used lies before every measured login,"
    echo "    then logged in once (3 min back, \`faketime\`) before the pristine copy: every measured login is a returning user's, whose state file exists."
    echo "  - google-authenticator: \`auth required pam_google_authenticator.so secret=DIR/\${USER} user=root\`; the file holds the secret and"
    echo "    \`\" TOTP_AUTH\` only (no RATE_LIMIT, no DISALLOW_REUSE, default window of 3 codes, default skew search), so it never rewrites it."
    echo "  - google-authenticator with the same protections (the targets' reference): the same line, another file that also holds"
    echo "    $protections: one-time codes, a rate limit kept in the file, the same window of 11 codes; it rewrites the file on every attempt."
    echo "- Gate before measuring: every module accepts the current code and rejects a wrong one; pam_totp and the protected"
    echo "  google-authenticator refuse the same code a second time; the plain google-authenticator leaves its file alone. Each"
    echo "  measured run under valgrind is checked the same way (success accepted, wrong code refused)."
    echo "- Success path: the current code from \`oathtool --totp\`, regenerated before every run (never within 3 s of a step change)."
    echo "  Wrong-code path: the fixed code \`$(cat "$TMP/code_wrong")\`, valid nowhere within ±1600 steps, so google-authenticator's"
    echo "  ±1499-step clock-skew search runs in full and finds nothing."
    echo "- Before every measured run every module's state (pam_totp's store directory, both google-authenticator files) is restored"
    echo "  from a pristine copy (not timed), so replay guards, failure counters and rate limits start from the same state each time."
    echo "  A success login changed the state: pam_totp ${WRITES[ours]}, google-authenticator ${WRITES[theirs]}, protected google-authenticator ${WRITES[guarded]}."
    echo "- Instructions: \`valgrind --tool=callgrind\` total (\"Collected\") for the whole pamtester process, one run each; \"above floor\" subtracts"
    echo "  the pam_permit.so run of the same path, leaving the module's own cost (load, parse, verify, record)."
    if ((HAVE_HYPERFINE)); then
        echo "- Wall and CPU time: \`hyperfine --runs N --warmup 5 --prepare RESET 'pamtester … <CODEFILE'\` per module and path (shell start-up"
        echo "  subtracted by hyperfine); mean per run. CPU = user + system."
    else
        echo "- Wall and CPU time: a bash loop timing each pamtester run with the \`time\` keyword (1 ms resolution); mean per run. CPU = user + system."
    fi
    echo "  Runs (floor/pam_totp/google-authenticator/protected): success $(runs_note ok), wrong code $(runs_note wrong)."
    if [[ $(runs_note wrong) != "$RUNS/$RUNS/$RUNS/$RUNS" ]]; then
        echo "  Fewer wrong-code runs where one failed login sleeps (\`pam_fail_delay\`, applied by libpam since pamtester sets no delay"
        echo "  callback); that wall time is mostly the delay, compare CPU time instead."
    fi
    echo "- Peak RSS: \`/usr/bin/time -f %M\` of the pamtester process, success path, median of 5."
    echo "- .so size: \`stat -c %s\` of the installed file (pam_totp: the stripped build)."
    echo "- In-process verification: \`verify-bench\` (Tests/VerifyBench, Embedded Swift like the module) under callgrind with"
    echo "  \`--toggle-collect\` on \`pam_totp_bench_match\` (one \`TOTPVerifier.match\` at window 5, 11 codes, the current code)"
    echo "  and on \`pam_totp_bench_hmacs\` (the same 11 \`HMACKey.authenticate(counter:)\` calls alone), each after an unmeasured warm-up."
    echo
    echo "## Results"
    echo
    row "metric" "floor (pam_permit)" "pam_totp" "google-authenticator" "google-authenticator, same protections" "ratio ours/plain" "ratio ours/protected"
    row "---" "---:" "---:" "---:" "---:" "---:" "---:"
    vals_row "instructions, success (raw)" "${INSTR[floor,ok]}" "${INSTR[ours,ok]}" "${INSTR[theirs,ok]}" "${INSTR[guarded,ok]}"
    vals_row "instructions, success, above floor" "0" "${ABOVE[ours,ok]}" "${ABOVE[theirs,ok]}" "${ABOVE[guarded,ok]}"
    vals_row "instructions, wrong code (raw)" "${INSTR[floor,wrong]}" "${INSTR[ours,wrong]}" "${INSTR[theirs,wrong]}" "${INSTR[guarded,wrong]}"
    vals_row "instructions, wrong code, above floor" "0" "${ABOVE[ours,wrong]}" "${ABOVE[theirs,wrong]}" "${ABOVE[guarded,wrong]}"
    for p in ok wrong; do
        lbl=${p/ok/success}; lbl=${lbl/wrong/wrong code}
        row "wall time, $lbl (ms/run, mean ± sd)" "$(fmt_sd "${WALL[floor,$p]}" "${SD[floor,$p]}")" "$(fmt_sd "${WALL[ours,$p]}" "${SD[ours,$p]}")" \
            "$(fmt_sd "${WALL[theirs,$p]}" "${SD[theirs,$p]}")" "$(fmt_sd "${WALL[guarded,$p]}" "${SD[guarded,$p]}")" \
            "$(ratio "${WALL[ours,$p]}" "${WALL[theirs,$p]}")" "$(ratio "${WALL[ours,$p]}" "${WALL[guarded,$p]}")"
    done
    for p in ok wrong; do
        lbl=${p/ok/success}; lbl=${lbl/wrong/wrong code}
        row "CPU time, $lbl (ms/run, mean)" "$(fmt_ms "${CPU[floor,$p]}")" "$(fmt_ms "${CPU[ours,$p]}")" "$(fmt_ms "${CPU[theirs,$p]}")" \
            "$(fmt_ms "${CPU[guarded,$p]}")" "$(ratio "${CPU[ours,$p]}" "${CPU[theirs,$p]}")" "$(ratio "${CPU[ours,$p]}" "${CPU[guarded,$p]}")"
    done
    vals_row "peak RSS, success (KB)" "${RSS[floor]}" "${RSS[ours]}" "${RSS[theirs]}" "${RSS[guarded]}"
    vals_row ".so size (bytes)" "${SIZE[floor]}" "${SIZE[ours]}" "${SIZE[theirs]}" "${SIZE[guarded]}"
    echo
    echo "In-process verification at window 5 (instructions): \`TOTPVerifier.match\` ${VERIFY[match]}, its 11 HMACs alone ${VERIFY[hmacs]}."
    echo
    echo "Looking up the same account: google-authenticator with the same protections and its file in a directory of the bench"
    echo "user's own (\`secret=DIR/\${USER}\`, no \`user=root\`, file and directory owned by the user), so that it looks up"
    echo "\`$BENCH_USER\` (line $PASSWD_LINE of $PASSWD_LINES in /etc/passwd) as pam_totp does, not root (line 1). Instructions above the floor:"
    echo "success ${ABOVE[selfga,ok]} (ours/it $r_self_ok×), wrong code ${ABOVE[selfga,wrong]} (ours/it $r_self_wrong×)."
    echo
    echo "What the rules fix on the success path (instructions, in process): the account look-up that binds the record to the"
    echo "uid (\`getpwnam_r\` in our run) ${PART[lookup]}; the 11 HMACs of the constant-time window ${VERIFY[hmacs]}; the success line"
    echo "in the log (\`pam_syslog\` in our run) ${PART[log]}; loading and unloading any module (an empty C module, run like ours,"
    echo "above the floor) ${PART[load]}. Sum: $PART_SUM, which is $(ratio "$PART_SUM" "${ABOVE[guarded,ok]}")× google-authenticator with the"
    echo "same protections (the target is 0.6×: $(awk -v g="${ABOVE[guarded,ok]}" 'BEGIN { printf "%d", g * 0.6 }') instructions), before the module reads a record,"
    echo "takes a lock or writes a state. google-authenticator's own look-up (of root, line 1) and log line are in its figure."
    if [[ -n $PAM_TOTPD ]]; then
        d_ok=$(sub_ "${DPATH[instr,daemon,ok]}" "${DPATH[instr,userfloor,ok]}")
        p_mod=$(sub_ "${DPATH[instr,phone,ok]}" "${DPATH[instr,userfloor,ok]}")
        p_req=$(awk -v a="${DPATH[dinstr,phone]}" -v n="${DPATH[phone_reqs]}" 'BEGIN { printf "%d\n", a / n }')
        d_wrong=$(sub_ "${DPATH[instr,daemon,wrong]}" "${DPATH[instr,userfloor,wrong]}")
        echo
        echo "## The daemon path (a caller without root)"
        echo
        echo "pamtester as \`$BENCH_USER\` (\`setpriv --reuid\`), stack \`auth required pam_totp.so socket=SOCKET adjacent_intervals=5\`:"
        echo "the module sends one request to \`pam-totpd --config FILE --socket SOCKET\`, which checks it against the same store"
        echo "(restored before every run). The floor is \`pam_permit.so\` run the same way as the same user."
        echo
        echo "| metric | floor (pam_permit, as the user) | pam_totp through pam-totpd | pam_totp in process (root) | ratio daemon/in-process |"
        echo "| --- | ---: | ---: | ---: | ---: |"
        echo "| module-side instructions, success, above floor | 0 | $d_ok | ${ABOVE[ours,ok]} | $(ratio "$d_ok" "${ABOVE[ours,ok]}") |"
        echo "| module-side instructions, wrong code, above floor | 0 | $d_wrong | ${ABOVE[ours,wrong]} | $(ratio "$d_wrong" "${ABOVE[ours,wrong]}") |"
        echo "| module-side instructions, phone-factor login (code sent), success, above floor | 0 | $p_mod | — | — |"
        echo "| wall time, success (ms/run, mean ± sd) | $(fmt_sd "${DPATH[floorwall]}" "${DPATH[floorsd]}") | $(fmt_sd "${DPATH[wall]}" "${DPATH[sd]}") | $(fmt_sd "${WALL[ours,ok]}" "${SD[ours,ok]}") | $(ratio "${DPATH[wall]}" "${WALL[ours,ok]}") |"
        echo
        echo "Daemon side, per request: CPU (all its threads' on-CPU time, success path, $RUNS runs + 5 warm-up)" \
            "$(awk -v n="${DPATH[cpu_ns]}" 'BEGIN { printf "%.1f", n / 1000 }') µs; instructions (callgrind, the difference between 25 and 5 requests," \
            "over 20) ${DPATH[dinstr,ok]} on the success path, ${DPATH[dinstr,wrong]} for a wrong code."
        echo
        echo "The floor under that CPU: the file system calls pam-totpd makes for one accepted code and nothing else (the store"
        echo "directory, the record read, the lock taken, the state read, one 2 KiB slot written and \`fdatasync\`ed; in C,"
        echo "scripts/bench-syscall-floor.c, on the store's file system) cost ${DPATH[sysfloor,paced]} µs of CPU each when spaced like the"
        echo "timed logins (a pause of $pace_us µs after each) and ${DPATH[sysfloor,back]} µs back to back."
        echo
        d_empty=$(sub_ "${DPATH[instr,emptymod,ok]}" "${DPATH[instr,userfloor,ok]}")
        echo "pam-totpd's memory (file store): RSS ${DPATH[rss_idle]} KB idle after start, ${DPATH[rss_after]} KB after the timed runs, peak ${DPATH[rss_peak]} KB."
        echo "The module's added RSS in the calling process is the peak RSS row of the first table (pam_totp minus the floor)."
        echo
        echo "Of the success path's $d_ok, $d_empty is what loading any second module costs above pam_permit.so (an empty C"
        echo "module built by this script, run the same way); the remaining $(sub_ "$d_ok" "$d_empty") is pam_totp's: its size and imports"
        echo "(libpam loads modules with RTLD_NOW), options, the prompt, the round trip and the syslog line."
        d_cfloor=$(sub_ "${DPATH[instr,cfloor,ok]}" "${DPATH[instr,userfloor,ok]}")
        echo
        echo "The floor under the module side: scripts/bench-module-floor.c, a C module linked against libpam like a real one,"
        echo "that gets the user, asks once through the conversation, sends one request frame of the same shape to pam-totpd and"
        echo "reads the reply, and logs one line with pam_syslog (the module's log line, docs/ARCHITECTURE.md rule 10), checking"
        echo "nothing: **$d_cfloor** above the floor, run the same way. pam_totp's $d_ok is $(ratio "$d_ok" "$d_cfloor") times it."
        echo
        echo "Targets (issue 22): module-side instructions above the floor for the round trip ≤ 60 K: $d_ok → $(met "$d_ok" 60000)" \
            "(the C floor: $d_cfloor → $(met "$d_cfloor" 60000));" \
            "daemon side ≤ 100 K instructions: ${DPATH[dinstr,ok]} → $(met "${DPATH[dinstr,ok]}" 100000), and ≤ 150 µs CPU:" \
            "$(awk -v n="${DPATH[cpu_ns]}" 'BEGIN { printf "%.1f", n / 1000 }') µs → $(met "${DPATH[cpu_ns]}" 150000)."
        echo
        echo "Phone-factor login (issue 19; informational, no target): \`$BENCH_USER\` with only an \`sms\` factor (\`totp-enroll add-phone\`) in its own"
        echo "store, a second pam-totpd whose file sets \`sms_command\` (a test sender appending to a spool file), stack \`… config=FILE socket=SOCKET"
        echo "adjacent_intervals=5\`, the code typed once it is in the spool. ${DPATH[phone_reqs]} requests a login ($( ((DPATH[phone_reqs] == 3)) && printf 'look-up, send, check; ')counted with strace)."
        echo "Module side $p_mod instructions above the floor ($(ratio "$p_mod" "$d_ok")× the app-code login's $d_ok); pam-totpd ${DPATH[dinstr,phone]} a login"
        echo "(25 logins less 5, over 20), $p_req a request on average ($(ratio "$p_req" "${DPATH[dinstr,ok]}")× the app-code request's ${DPATH[dinstr,ok]}). Delivery excluded: callgrind"
        echo "does not follow the sender (\`--trace-children=no\`); pam-totpd's own fork, message write and reaping are counted.$( ((${DPATH[phone_nopidfd]:-0})) &&
            printf ' This valgrind lacks pidfd_open: under it pam-totpd waits for the exit by its 10 ms fallback.')"
    fi
    echo
    echo "## Targets"
    echo
    echo "Against google-authenticator with the same protections (the last column):"
    echo
    echo "- Instructions above floor, success path ≤ 0.6× (aim 0.5×): $r_ok → $(met "$r_ok" 0.6) (aim 0.5×: $(met "$r_ok" 0.5))"
    echo "- Instructions above floor, wrong code ≤ 0.01×: $r_wrong → $(met "$r_wrong" 0.01)"
    echo "- pam_totp.so ≤ 200 KB ($SO_TARGET_BYTES bytes): ${SIZE[ours]} bytes → $(met "${SIZE[ours]}" "$SO_TARGET_BYTES")"
    echo "- In-process verification at window 5 ≤ 2× the HMACs it computes: \`TOTPVerifier.match\` ${VERIFY[match]} instructions," \
        "11 HMACs ${VERIFY[hmacs]}: $r_verify× → $(met "$r_verify" 2)"
} >"$TMP/report.md"

mkdir -p -- "$(dirname -- "$OUT_MD")"
new_file=0
[[ -e $OUT_MD ]] || new_file=1
# Sections other benches wrote (make bench-fleet's "## Fleet mode ...") stay at the end.
kept=
[[ -f $OUT_MD ]] && kept=$(sed -n '/^## Fleet mode/,$p' "$OUT_MD")
cat "$TMP/report.md" >"$OUT_MD"
[[ -z $kept ]] || printf '\n%s\n' "$kept" >>"$OUT_MD"
# a new file takes the owner of its directory (the script runs as root inside a user's checkout)
if ((new_file)); then chown --reference="$(dirname -- "$OUT_MD")" -- "$OUT_MD" 2>/dev/null || true; fi
cat "$TMP/report.md"
log "report written to $OUT_MD"
