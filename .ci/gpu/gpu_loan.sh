#!/usr/bin/env bash
# One loan's command: the GPU check under its 6-minute timeout, then, on the same warm machine,
# the steps it failed or cut, rerun with the time the command has left, then the steps that do
# not fit the check (compile, jpeg, ncu). A second call would find the machine given back (it
# stays warm 30 s) and start a fresh one, 1-3 of the loan's 15 minutes; one command of at most
# 10 minutes does not.
#
#   run: bash .ci/gpu/gpu_loan.sh     carry [".whl"], timeout_s 600 (an H100 or an H200)
#   GPU_CHECK_DRY=1 OUT=/tmp/loan LIMIT_S=300 bash .ci/gpu/gpu_loan.sh   # on the CPU
#
# $OUT gets the check's own files (summary.txt, figures.md, install.log and a .tgz per step:
# 6) and rerun.tgz, the rerun's summary, figures and archives: 7 of the 8 that come back.
# The tests step reruns one file at a time (no other test shares the GPU with it), the tests
# that passed in the check deselected. Measured on one H100, 2026-11-26 (docs/benchmarks.md):
# the check took 346 s; its rerun, led by a study, left the tests 81 s.
set -u -o pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
: "${OUT:?set OUT to the folder whose files come back}"
LIMIT_S=${LIMIT_S:-590}   # this command's own limit; the device allows 600 s
CHECK_S=${CHECK_S:-360}
WORK=${WORK:-/tmp/gpu_check}
export WORK

timeout -k 5 "$CHECK_S" bash "$SRC/.ci/gpu/gpu_check.sh"
echo "check: exit $? after ${SECONDS}s (timeout ${CHECK_S}s)" >> "$OUT/summary.txt"

# Failed or cut, or (ncu) without a study to read. The tests first: a study cut in its last
# seconds (2026-11-26: writing report.html at 140 s) has still proven most of its paths, and
# the rerun of a 2.5-minute study would leave the tests no time. ncu reruns after a study.
failed=$(sed -nE -e 's/^(study|lm|tests|jpeg|ncu): (FAIL|TIMEOUT).*/\1/p' \
    -e 's/^(ncu): SKIP.*the study step exported nothing.*/\1/p' "$OUT/summary.txt")
rerun=""
for step in tests lm jpeg study ncu; do
    grep -qx "$step" <<< "$failed" && rerun="$rerun $step"
done
left=$((LIMIT_S - SECONDS - 10))  # 10 s to pack
AGAIN=$(dirname "$WORK")/gpu_rerun  # /tmp/gpu_rerun on the GPU machine
rm -rf "$AGAIN" && mkdir -p "$AGAIN"
[ -f "$WORK/logs/tests.log" ] && cp "$WORK/logs/tests.log" "$WORK/logs/tests.check.log"
# What was cut gets the time it lacked first; then compile, ncu and jpeg take what is left
# (SKIP under 3 s).
# RERUN_BUDGET_<step> sets one (the CPU rehearsal gives a busy machine more).
export BUDGET_study=${RERUN_BUDGET_study:-200} BUDGET_lm=${RERUN_BUDGET_lm:-120}
export BUDGET_tests=${RERUN_BUDGET_tests:-$((left - 10))} BUDGET_jpeg=${RERUN_BUDGET_jpeg:-60}
export BUDGET_ncu=${RERUN_BUDGET_ncu:-40} BUDGET_compile=${RERUN_BUDGET_compile:-200}
steps="$rerun ${EXTRA_STEPS-compile ncu jpeg} figures"
OUT=$AGAIN STEPS="$steps" TOTAL_S=$left TEST_WORKERS=1 \
    PASSED_LOG=$WORK/logs/tests.check.log timeout -k 5 "$left" bash "$SRC/.ci/gpu/gpu_check.sh"
echo "rerun: exit $? of steps '$steps', ${left}s given"  >> "$AGAIN/summary.txt"
tar -czf "$OUT/rerun.tgz" -C "$(dirname "$AGAIN")" "$(basename "$AGAIN")"
cat "$OUT/summary.txt" "$AGAIN/summary.txt"
