#!/usr/bin/env bash
# scripts/fuzz.sh: run every target of the libFuzzer binary in turn (make fuzz, make fuzz-smoke).
#
# Usage:  scripts/fuzz.sh FUZZ_BIN SECONDS WORK_DIR [TARGET...]
#   FUZZ_BIN  the binary `make fuzz` builds (.build-fuzz/pam_totp_fuzz); `FUZZ_BIN --list`
#             names its targets
#   SECONDS   libFuzzer's -max_total_time for each target
#   WORK_DIR  scratch space: WORK_DIR/corpus/TARGET is the working corpus (the committed seeds
#             of Fuzz/corpus/TARGET are copied in; new inputs land here, never in git),
#             WORK_DIR/crashes/ the reproducers, WORK_DIR/logs/TARGET.log libFuzzer's output
#   TARGET    only these targets (default: all)
#
# Prints per target the executions (libFuzzer's final stat::number_of_executed_units), the
# rate and the crashes, then a total; exits 1 if any target crashed, timed out or ran out of
# memory, or a target has no seed corpus. Reproduce a crash with
#   FUZZ_TARGET=TARGET FUZZ_BIN CRASH_FILE
# Environment (optional): FUZZ_ARGS="-dict=..." extra libFuzzer flags; FUZZ_RUNS=N runs each
# target to N executions (libFuzzer's -runs; SECONDS stays the cap), and a target that stops
# short of N fails the run (make fuzz: 10 million each).
set -euo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
readonly bin=$1 seconds=$2 work=$3
shift 3
seeds=$(cd "$(dirname "$0")/.." && pwd)/Fuzz/corpus

mapfile -t all < <("$bin" --list | cut -f1)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

mkdir -p "$work/crashes" "$work/logs"
failed=0 total=0
for t in "${targets[@]}"; do
    if [ ! -d "$seeds/$t" ] || [ -z "$(ls -A "$seeds/$t")" ]; then
        echo "fuzz: $t has no seed corpus in Fuzz/corpus/$t" >&2
        failed=1
        continue
    fi
    corpus=$work/corpus/$t
    mkdir -p "$corpus"
    cp -p "$seeds/$t"/* "$corpus/"
    log=$work/logs/$t.log
    rm -f "$work/crashes/$t-"*
    # The Swift runtime's backtracer would hold a crashing process for seconds; libFuzzer
    # prints its own report. -timeout: one input taking 10 s is a hang, and a failure.
    # malloc_context_size=0: no stack is recorded at each allocation (a crash's own stack is
    # still printed; reproduce without it for the allocation's), which made the allocation-heavy
    # targets (pamstack, uri, cli) a quarter slower.
    status=0
    ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=0} SWIFT_BACKTRACE=enable=no FUZZ_TARGET=$t "$bin" -max_total_time="$seconds" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$work/crashes/$t-" ${FUZZ_ARGS:-} "$corpus" >"$log" 2>&1 || status=$?
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1 || true)
    [ -n "$runs" ] || runs=$(grep -Eo '^Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -1 || true)
    [ -n "$runs" ] || runs=0
    took=$(grep -Eo '^Done [0-9]+ runs in [0-9]+ second' "$log" | grep -Eo '[0-9]+ second' | grep -Eo '[0-9]+' || echo "$seconds")
    [ "$took" -gt 0 ] || took=1
    crashes=$(find "$work/crashes" -maxdepth 1 -name "$t-*" | wc -l)
    printf 'fuzz: %-7s %12d executions in %4d s (%d/s), %d crashes\n' "$t" "$runs" "$took" $((runs / took)) "$crashes"
    total=$((total + runs))
    if [ -n "${FUZZ_RUNS:-}" ] && [ "$runs" -lt "$FUZZ_RUNS" ] && [ "$status" -eq 0 ] && [ "$crashes" -eq 0 ]; then
        echo "fuzz:   $t stopped at $runs of $FUZZ_RUNS executions (the $seconds s cap): run it longer" >&2
        failed=1
    fi
    if [ "$status" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        failed=1
        grep -E 'Fatal error|ERROR: (AddressSanitizer|libFuzzer)|SUMMARY' "$log" | head -5 | sed 's/^/fuzz:   /' >&2 || true
        find "$work/crashes" -maxdepth 1 -name "$t-*" | sed 's/^/fuzz:   reproducer: /' >&2
        [ "$crashes" -gt 0 ] || echo "fuzz:   exit status $status; see $log" >&2
    fi
done
echo "fuzz: $total executions in total; $([ $failed -eq 0 ] && echo "no crashes" || echo "FAILED")"
exit $failed
