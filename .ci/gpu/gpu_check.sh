#!/usr/bin/env bash
# The GPU check: what a GPU user's first runs exercise, in the minutes a GPU is lent.
# One command of a 15-minute loan: at most 6 minutes on one H100, copy and install included, the
# whole script under one timeout; a rerun of failed steps in about 3.
#
#   timeout 360 bash .ci/gpu/gpu_check.sh                        # on the GPU machine ($OUT set)
#   STEPS="jpeg ncu" timeout 200 bash .ci/gpu/gpu_check.sh       # rerun the failed steps alone
#   bash .ci/gpu/gpu_loan.sh       # a loan's one command: this check, then its cut steps again
#   GPU_CHECK_DRY=1 OUT=/tmp/rehearsal bash .ci/gpu/gpu_check.sh  # the rehearsal, on the CPU
#
# Steps, most informative first, so a loan cut short keeps what tells most:
#   study    the README's main command on CUDA at 224 px (8 trials, 3 confirmation rounds at
#            least). It is the user's first command and crosses most GPU paths at once: batches
#            moved to the device, device input stages, cuDNN/TF32/AMP/CUDA Graphs applied, NVML
#            per window, pruning, the interleaved confirmation, numerics with device transforms,
#            the Nsight commands; each trial that fails is recorded with its reason.
#   lm       a small Llama-style decoder through the Hugging Face adapter (examples/hf_lm.py),
#            in tokens/s: the attention backends on CUDA (flash and cuDNN only under amp),
#            activation checkpointing, padded batches of varying length, expandable_segments.
#   tests    the gpu-marked tests: each GPU path alone (CUDA faults, the sync rule, adapters,
#            NCCL at world size 1, the allocator's expandable segments, every SDPA backend
#            under checkpointing inside a CUDA Graph).
#   figures  .ci/gpu/gpu_figures.py over the studies: figures.md (goal: 22x, 90% of ceiling).
# Not in the default set (a loan's second phase runs them, .ci/gpu/gpu_loan.sh):
#   compile  the study's exported configuration with torch.compile searched (off, default,
#            reduce-overhead; max-autotune's minutes of kernel autotuning do not fit) and its
#            loader narrowed to its own workers or one, so that a compiled trial whose loader
#            cannot keep up is pruned before its compile: compile cost cold and warm, the
#            compiled speedup over the tuned eager step, with its interval.
#   jpeg     a JPEG folder decoded and resized on the device (nvJPEG, transform_split=0).
#   ncu      the first ncu command of the study's best.yaml nsight section, as printed there.
#   finetune the language-model fine-tuning knobs only a GPU runs, on the lm
#            step's Llama (examples/hf_lm.py) with padding-free packing searched: Liger's
#            kernels (knobs.liger_kernel), flash attention (attention=flash_attention_2) and
#            bitsandbytes' 8-bit AdamW (knobs.optimizer), each listed where its package imports
#            on the machine (else said, and left out); the numerics check on (off in the
#            rehearsal, as for every step). tokens/s per trial in its trials.csv. A loan's own:
#            STEPS="finetune" TOTAL_S=200 timeout 220 bash .ci/gpu/gpu_check.sh (not measured).
#   script   the training a user launches, tuned as it is: autotune -- python
#            examples/script_train.py (its own loader, batch 128 and 2 workers, its own steps as
#            the trials' windows), then autotune verify running the same command. Never run on
#            a GPU yet: STEPS="script" TOTAL_S=170 timeout 190 bash .ci/gpu/gpu_check.sh.
#   race     the README's study twice on the same seed (python -m benchmarks.race): every
#            confirmation round after the search, then the finalists raced during it
#            (study.race=true); 12 trials each, the study step's windows (capped at 5 s), the
#            confirmation's own defaults. Where windows are quiet the confirmation ends on precision: whether the
#            study's wall time comes within 1.5x of its search there. A loan of its own:
#            STEPS="race" TOTAL_S=570 timeout 590 bash .ci/gpu/gpu_check.sh (about 2 x 4 min
#            estimated from the H200's 122 s study step, not measured).
#
# Each step has its own timeout (BUDGET_<step> seconds, cut to what the whole script has left,
# TOTAL_S), and ends in $OUT/<step>.tgz (its log and files), written as it ends; summary.txt
# holds the device and one line per step: PASS, DONE (a study that ran through and exited 3, a
# regression, or 4, could not measure), FAIL, TIMEOUT or SKIP, seconds, and why. Files
# back: summary.txt, figures.md and one archive per step (at most 8).
#
# The GPU machine lacks optuna, hydra and nvtx: wheels from `bash ../shared/gpu/wheels.sh` in
# .whl/ (carried) are installed into /tmp/site when present. Steps run in a copy of the
# checkout (WORK), so a checkout replaced mid-run does not kill a study.
#
# GPU_CHECK_DRY=1 runs the same steps against the CPU with tiny windows and trial counts, so
# the plumbing (paths, timeouts, the $OUT layout, the figures) is proven before a loan is spent;
# tests/test_gpu_check.py runs it.
set -u -o pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$SRC/gpu_check_out}
DRY=${GPU_CHECK_DRY:-0}
STEPS=${STEPS:-study lm tests figures}
PY=${PYTHON:-python3}
TOTAL_S=${TOTAL_S:-352}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
# The copy keeps its studies between calls, so a rerun's ncu step finds the study's best.yaml;
# a step that runs a study starts it afresh.
WORK=${WORK:-/tmp/gpu_check}
export OUT WORK
SUMMARY=$OUT/summary.txt

if [ "$DRY" = 1 ]; then
    DEVICE=cpu
    # Tiny windows and counts, no numerics check: the rehearsal proves the plumbing, not the
    # figures (the numerics check is proven by its own tests). Two finalists of two trials:
    # the confirmation's rounds run whichever trial was faster. With one, a second trial
    # slower than the baseline (channels_last on a CPU without bf16, as in one .ci/run on
    # 2026-11-28) left the baseline alone, and no rounds to rehearse.
    WINDOW=(window.warmup_steps=2 window.measure_steps=6 window.measure_seconds=2
            window.min_measure_seconds=0.5 window.min_measure_steps=2 window.profile_steps=2)
    STUDY=(study.n_trials=2 study.confirm_top=2 study.confirm_runs=3 study.confirm_budget_s=0
           study.confirm_precision=10 study.numerics_steps=0)
    JPEG=(study.n_trials=1 workload.n_images=64 workload.image_size=64)
    LM=(--trials 2 --set study.confirm_runs=0 --no-train)  # a CPU epoch: a minute of nothing new
    # A CPU's inductor compile of the study's model takes minutes on 2 cores: the rehearsal
    # runs the step's plumbing (best.yaml's knobs pinned, the narrowed loader) eager.
    COMPILE=(knobs.compile=off study.n_trials=2 study.confirm_runs=0)
    # The race step's plumbing (two studies, their table, race.tgz): on 2 cores neither 2 nor
    # 3 trials leave the search a round to race (2026-12-02: "3 (0 raced)" either way), so 2
    # trials and 8 s of rounds (55 s where 3 and 20 s took 87 s); tests/test_race.py races.
    RACE=(--set study.n_trials=2 --set study.confirm_top=2 --set study.confirm_budget_s=8
          --set study.numerics_steps=0)
    FINETUNE=(--trials 2 --set study.confirm_runs=0 --set study.numerics_steps=0 --no-train)
    SCRIPT=(study.n_trials=2 study.confirm_runs=0 study.numerics_steps=0)
    VERIFY=(--rounds 1 --warmup 2 --steps 8)
else
    DEVICE=cuda
    # The README's main command with the window capped at 5 s (an input-bound batch of 256 at
    # the baseline's ~600 samples/s would otherwise measure for 17 s), 8 trials, and a
    # confirmation of 2 finalists that stops after its 3 rounds unless they are already sure.
    WINDOW=(window.measure_seconds=5)
    STUDY=(study.n_trials=8 study.confirm_top=2 study.confirm_runs=3 study.confirm_budget_s=30
           study.timeout_s=110)
    JPEG=(study.n_trials=2 workload.n_images=512)
    # Trials of ~12 s on one H200 (2026-11-28), after ~30 s of imports and the user's Trainer:
    # the model is small, its steps launch-bound. No confirmation: the step's subject is the
    # attention backends and tokens/s, and the 6 minutes hold no rounds for it.
    LM=(--trials 6 --set study.confirm_runs=0 --set study.timeout_s=50
        --set window.measure_seconds=3)
    COMPILE=("knobs.compile=[off,default,reduce-overhead]" study.n_trials=5 study.confirm_top=1
             study.confirm_runs=2 study.confirm_budget_s=0 study.timeout_s=90)
    RACE=(--set study.n_trials=12)
    FINETUNE=(--trials 8 --set study.confirm_runs=0 --set study.timeout_s=150
              --set window.measure_seconds=3)
    # Not yet run on a GPU: the script's own loader (batch 128, 2 workers) and steps.
    SCRIPT=(study.n_trials=6 study.confirm_top=2 study.confirm_runs=3 study.confirm_budget_s=30
            study.timeout_s=90)
    VERIFY=(--rounds 3)
fi
# Measured (docs/benchmarks.md): on one H100 (2026-11-26) the copy and install 8 s, study
# 129-143 s, jpeg 41-48 s, ncu 44 s. On one H200 (2026-11-28): setup 8-9 s, study 122 s, lm
# 90 s (once its windows were no longer read as contended by the user's own process), tests
# 94 s in 4 pytest processes (test_nccl.py alone 34 s): 9 + 122 + 90 + 94 + 3 = 318 s of the
# 352. The budgets add up to TOTAL_S less the copy; a step that is cut is rerun on the same
# machine by .ci/gpu/gpu_loan.sh.
: "${BUDGET_study:=135}" "${BUDGET_lm:=100}" "${BUDGET_tests:=100}" "${BUDGET_jpeg:=50}"
: "${BUDGET_ncu:=47}" "${BUDGET_figures:=3}" "${BUDGET_compile:=220}" "${BUDGET_race:=560}"
: "${BUDGET_finetune:=180}" "${BUDGET_script:=150}"

say() { echo "$*" | tee -a "$SUMMARY"; }

autotune() { "$PY" -m autotune "device=$DEVICE" study.out_dir=studies "$@"; }

# Each log line starts with the seconds since its step began ("[ 42s] "): a step cut by its
# timeout shows where its time went (on 2026-11-26 the ncu step and the Lightning test were cut
# with no clue which part ran long).
stamp() {
    local t0=$SECONDS line
    while IFS= read -r line; do printf '[%3ds] %s\n' $((SECONDS - t0)) "$line"; done
}
unstamped() { sed -E 's/^\[ *[0-9]+s\] //' "logs/$1.log"; }

# run_step NAME: NAME_step under its own timeout, its output in NAME.log; a status line.
run_step() {
    local name=$1
    local budget_var=BUDGET_$name left=$((TOTAL_S - SECONDS))
    local budget=${!budget_var}
    [ "$name" != figures ] && left=$((left - BUDGET_figures))  # the figures always get theirs
    [ "$budget" -gt "$left" ] && budget=$left
    if [ "$budget" -lt 3 ]; then
        say "$name: SKIP: ${left}s left of TOTAL_S=$TOTAL_S"; return
    fi
    local t0=$SECONDS rc
    mkdir -p "logs"
    GPU_CHECK_STEP=$name WORK=$WORK STEP_BUDGET=$budget timeout -k 10 "$budget" \
        bash "$WORK/.ci/gpu/gpu_check.sh" 2>&1 | stamp > "logs/$name.log"
    rc=${PIPESTATUS[0]}
    local took=$((SECONDS - t0)) status=PASS why=""
    if [ $rc = 124 ] || [ $rc = 137 ]; then status=TIMEOUT why="cut at ${budget}s"
    elif [ $rc = 3 ] || [ $rc = 4 ]; then  # a study that ran through but flagged its result
        status=DONE why="exit $rc: $(unstamped "$name" | grep '^autotune: ' | tail -1 | cut -c1-200)"
    elif [ $rc != 0 ]; then status=FAIL why="exit $rc: $(unstamped "$name" | grep -v '^\s*$' | tail -1 | cut -c1-200)"
    fi
    [ -f "logs/$name.why" ] && { status=SKIP; why=$(cat "logs/$name.why"); }
    say "$name: $status ${took}s${why:+: $why}"
}

# pack NAME PATH...: the step's log and files as $OUT/NAME.tgz (missing paths are left out).
pack() {
    local name=$1; shift
    local have=("logs/$name.log")
    for p in "$@"; do [ -e "$p" ] && have+=("$p"); done
    tar --exclude='*/trials/*/trace.json' --exclude='*/best_trace.json' -czf "$OUT/$name.tgz" \
        "${have[@]}" 2>/dev/null
}

study_step() {
    rm -rf studies/gpu-resnet18
    autotune workload=resnet18 study.name=gpu-resnet18 "${STUDY[@]}" "${WINDOW[@]}" knobs.compile=off
}

# The training a user launches, tuned as it is (autotune -- python ...): a plain script whose
# trials are the script itself, then autotune verify running the same command, each side
# ending at its window.
script_step() {
    rm -rf studies/gpu-script
    autotune study.name=gpu-script "${SCRIPT[@]}" "${WINDOW[@]}" -- \
        python examples/script_train.py --epochs 100000 -b 128 -j 2 \
        && "$PY" -m autotune verify studies/gpu-script "${VERIFY[@]}"
}

# The old and the new path side by side, the studies kept for the archive (best.yaml, trials.csv).
race_step() {
    rm -rf studies/race
    local win=()
    for w in "${WINDOW[@]}"; do win+=(--set "$w"); done
    "$PY" -m benchmarks.race --workload resnet18 --set "device=$DEVICE" "${RACE[@]}" "${win[@]}" \
        --keep studies/race
}

jpeg_step() {
    rm -rf studies/gpu-jpeg
    autotune workload=jpeg study.name=gpu-jpeg knobs.transform_split=0 study.confirm_runs=0 \
        study.numerics_steps=0 "${JPEG[@]}" "${WINDOW[@]}"
}

# The files that hold gpu-marked tests (TEST_FILES to choose), in TEST_WORKERS (4) groups, one
# pytest process per group, side by side on the GPU (no test times anything). A process of
# its own per group, not pytest-xdist: each collects only its own files (4 xdist workers each
# imported all nine, Lightning and Transformers included: 36 s before the first test on the
# H100, 2026-11-26). The files go longest first in a snake order (1 2 3 4 4 3 2 1 1 ...), so
# the Lightning study (61 s alone there) shares its group with the shortest. TEST_WORKERS=1:
# one pytest per file in turn, so a run cut short keeps each finished file's failures.
# PASSED_LOG=<an earlier tests.log>: the tests it shows passed are deselected, so a rerun
# spends its time on the ones that failed or were cut.
tests_step() {
    # A test stuck past this fails with its stack (pytest-timeout) before the step is cut.
    local files rc=0 test_timeout=$(( ${STEP_BUDGET:-150} > 30 ? ${STEP_BUDGET:-150} - 15 : 15 ))
    local workers=${TEST_WORKERS:-4} skip=() order
    order="tests/test_adapters.py tests/test_cuda_faults.py tests/test_knobs.py \
        tests/test_sequences.py tests/test_nccl.py tests/test_sync_rule.py tests/test_batch.py \
        tests/test_runtime.py tests/test_stages.py"
    # shellcheck disable=SC2086
    files=${TEST_FILES:-$(grep -l "mark.gpu" $order tests/test_*.py | awk '!seen[$0]++')}
    if [ -n "${PASSED_LOG:-}" ] && [ -f "$PASSED_LOG" ]; then
        while read -r id; do skip+=(--deselect "$id"); done < <(passed_tests "$PASSED_LOG")
        echo "deselected $(( ${#skip[@]} / 2 )) tests that passed in $PASSED_LOG"
    fi
    local pytest=("$PY" -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider
                  --timeout="$test_timeout" --durations=5 -o addopts="" "${skip[@]}")
    if [ "$workers" -le 1 ]; then
        for f in $files; do
            "${pytest[@]}" "$f"
            case $? in 0|5) ;; *) rc=1 ;; esac  # 5: every test of the file was deselected
        done
        return $rc
    fi
    local -a group
    local i=0 g f
    for f in $files; do
        g=$(( i % (2 * workers) )); [ "$g" -ge "$workers" ] && g=$(( 2 * workers - 1 - g ))
        group[g]="${group[g]:-} $f"; i=$((i + 1))
    done
    local pids=()
    for g in "${!group[@]}"; do
        rm -f "logs/tests.g$g.rc"
        # shellcheck disable=SC2086
        { "${pytest[@]}" ${group[g]} 2>&1; echo $? > "logs/tests.g$g.rc"; } \
            | sed -u "s/^/[g$g] /" &
        pids+=($!)
    done
    wait "${pids[@]}"
    for g in "${!group[@]}"; do  # 0 passed, 5 every test deselected (passed before)
        case $(cat "logs/tests.g$g.rc" 2>/dev/null) in
            0|5) ;; *) echo "group $g ($(echo ${group[g]})) failed"; rc=1 ;;
        esac
    done
    return $rc
}

# The node ids a pytest -v log shows PASSED, once each: xdist's "[gw1] [ 50%] PASSED
# tests/x.py::test_y", the -rA summary's "PASSED tests/x.py::test_y", or one process's
# "tests/x.py::test_y PASSED [ 50%]".
passed_tests() {
    sed -E 's/^\[ *[0-9]+s\] //' "$1" | sed -nE \
        -e 's/.*PASSED (tests\/[^ ]+::[^ ]+).*/\1/p' -e 's/.*(tests\/[^ ]+::[^ ]+) PASSED.*/\1/p' \
        | sort -u
}

# The first ncu command of best.yaml's nsight section, as a user would paste it, with a short
# window appended (Hydra keeps the last value of a key). No CUDA study: why, and SKIP.
ncu_step() {
    local cmd
    cmd=$("$PY" - studies/gpu-resnet18/best.yaml 2>&1 <<'PYEOF'
import sys, yaml
from pathlib import Path
best = Path(sys.argv[1])
if not best.exists():
    sys.exit(f"no {best}: the study step exported nothing")
ns = yaml.safe_load(best.read_text()).get("nsight") or {}
if not ns.get("ncu"):
    sys.exit(f"no ncu command in best.yaml: {ns.get('omitted') or 'no top kernels recorded'}")
print(ns["ncu"][0]["command"])
PYEOF
    ) || { echo "$cmd" | tail -1 | tee logs/ncu.why; return 0; }
    rm -rf studies/gpu-resnet18-ncu1
    echo "$cmd"
    if ! command -v ncu >/dev/null; then
        echo "ncu is not on the PATH here" | tee logs/ncu.why; return 0
    fi
    local short="window.warmup_steps=3 window.measure_steps=5 window.min_measure_seconds=0"
    eval "${cmd/ autotune / $PY -m autotune } $short" 2>&1 | tee logs/ncu.out
    ls studies/gpu-resnet18/*.ncu-rep 2>/dev/null && return 0
    # ncu that cannot read counters on this machine (on gVisor: "==ERROR== Failed to initialize
    # the profiler: LibraryNotLoaded", device/KINDS.md, 2026-11-04) says so itself: its words are
    # the step's why (SKIP), and the loan's rerun does not spend two minutes repeating them.
    local err
    err=$(grep -m1 '==ERROR==' logs/ncu.out | cut -c1-200)
    if [ -n "$err" ]; then
        echo "ncu could not profile here: $err" | tee logs/ncu.why; return 0
    fi
    echo "ncu wrote no report"; return 1
}

lm_step() {
    local w win=()
    for w in "${WINDOW[@]}"; do win+=(--set "$w"); done
    rm -rf studies/gpu-lm
    "$PY" examples/hf_lm.py --device "$DEVICE" --name gpu-lm --set study.out_dir=studies \
        --set study.numerics_steps=0 "${win[@]}" "${LM[@]}"
}

# The fine-tuning knobs listed where their package imports here (a knob whose package is
# missing is refused by the study, naming it: said here instead, and the step goes on).
finetune_step() {
    local knobs=() pkg w
    for w in "${WINDOW[@]}"; do knobs+=(--set "$w"); done
    for pkg in "liger_kernel:knobs.liger_kernel=[false,true]" \
               "flash_attn:knobs.attention=[sdpa,flash_attention_2]" \
               "bitsandbytes:knobs.optimizer=[adamw_torch,adamw_bnb_8bit]"; do
        if "$PY" -c "import ${pkg%%:*}" 2>/dev/null && [ "$DEVICE" = cuda ]; then
            knobs+=(--set "${pkg#*:}")
        else
            echo "finetune: ${pkg%%:*} not importable on $DEVICE: ${pkg#*:} not listed"
        fi
    done
    rm -rf studies/gpu-finetune
    "$PY" examples/hf_lm.py --device "$DEVICE" --name gpu-finetune --pack \
        --set study.out_dir=studies "${knobs[@]}" "${FINETUNE[@]}"
}

# The study step's exported knobs as overrides, but compile (searched) and num_workers (its
# own count or one: a loader that cannot keep up prunes a compiled trial before its compile is
# spent). cuda_graphs and set_to_none stay pinned: inactive under compile's modes, so the
# eager baseline is the export itself.
compile_overrides() {
    "$PY" - studies/gpu-resnet18/best.yaml <<'PYEOF'
import sys, yaml
from pathlib import Path
best = Path(sys.argv[1])
if not best.exists():
    sys.exit(f"no {best}: the study step exported nothing to compile")
knobs = yaml.safe_load(best.read_text())["knobs"]
free = {"compile", "num_workers"}
out = [f"knobs.{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
       for k, v in knobs.items() if k not in free]
w = int(knobs.get("num_workers") or 0)
out.append(f"knobs.num_workers=[{w},{1 if w > 1 else 0}]" if w else "knobs.num_workers=0")
print(" ".join(out))
PYEOF
}

compile_step() {
    local pins
    pins=$(compile_overrides 2>&1) || { echo "$pins" | tail -1 | tee logs/compile.why; return 0; }
    rm -rf studies/gpu-compile
    echo "pinned from studies/gpu-resnet18/best.yaml: $pins"
    # shellcheck disable=SC2086
    autotune workload=resnet18 study.name=gpu-compile study.numerics_steps=0 $pins \
        "${COMPILE[@]}" "${WINDOW[@]}"
}

figures_step() {
    "$PY" .ci/gpu/gpu_figures.py studies "$OUT/figures.md"
}

# One step, started by run_step under its own timeout (bash functions cannot be timed).
if [ -n "${GPU_CHECK_STEP:-}" ]; then
    cd "$WORK" && "${GPU_CHECK_STEP}_step"
    exit
fi

# The copy and the install are timed against the same budget as the steps.
mkdir -p "$WORK"
tar -C "$SRC" --exclude=./.venv --exclude=./.git --exclude=./studies --exclude=./gpu_check_out \
    -cf - . | tar -C "$WORK" -xf - || { say "setup: FAIL: could not copy the checkout"; exit 1; }
cd "$WORK" || exit 1
mkdir -p studies
export PYTHONPATH=$WORK PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1 && ! "$PY" -c "import optuna, hydra, nvtx" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl/*.whl > "$OUT/install.log" 2>&1 || say "install: FAIL: see install.log"
    export PYTHONPATH=/tmp/site:$WORK
fi
{
    echo "gpu_check $(date -u +%FT%TZ) dry=$DRY steps: $STEPS"
    # A device's copy of .git has lagged the tree it copied (2026-11-26: it named the commit
    # before the one that ran), so the sources' own digest says which code ran; the same
    # command in a checkout: find autotune -name '*.py' | sort | xargs cat | sha1sum
    echo "sources: $(cd "$SRC" && find autotune -name '*.py' | sort | xargs cat | sha1sum \
        | cut -c1-12) (git here says $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo -))"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
        || echo "nvidia-smi: not here"
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available())" 2>&1
    echo "cpus: $(nproc), setup took ${SECONDS}s"
} >> "$SUMMARY"

for step in $STEPS; do
    case $step in
        study) run_step study; pack study studies/gpu-resnet18 ;;
        lm) run_step lm; pack lm studies/gpu-lm ;;
        tests) run_step tests; pack tests ;;
        jpeg) run_step jpeg; pack jpeg studies/gpu-jpeg ;;
        ncu) run_step ncu; pack ncu studies/gpu-resnet18/*.ncu-rep studies/gpu-resnet18-ncu1 ;;
        compile) run_step compile; pack compile studies/gpu-compile ;;
        race) run_step race; pack race studies/race/*/best.yaml studies/race/*/trials.csv ;;
        finetune) run_step finetune; pack finetune studies/gpu-finetune ;;
        script) run_step script; pack script studies/gpu-script ;;
        figures) run_step figures ;;
        *) say "$step: SKIP: unknown step (study lm tests jpeg ncu compile race finetune script figures)" ;;
    esac
done
say "total: ${SECONDS}s"
