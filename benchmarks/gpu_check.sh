#!/usr/bin/env bash
# One run on a GPU machine (H100/H200, see /work/shared/gpu/README.md): the GPU tests, the
# resnet18 and gpt studies, and the side-by-side (baseline, seed 004 recipe, autotune), with
# every figure written under $OUT for docs/benchmarks.md. Not run where it was written (no GPU
# there): each step is a plain command, its output kept whatever happens to the others.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh            # everything (~25 minutes on an H100)
#   STEPS="tests gpt" bash benchmarks/gpu_check.sh        # a subset: tests resnet18 gpt side
#
# The machine lacks optuna/hydra/nvtx: wheels from `bash ../shared/gpu/wheels.sh` in .whl/ are
# installed into /tmp/site first when present. Studies run from a copy of the checkout
# (/tmp/gpu_check), so replacing the checkout mid-run does not kill them.
set -u -o pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/gpu_check_out}
STEPS=${STEPS:-tests resnet18 gpt side figures}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

rm -rf /tmp/gpu_check && cp -r "$SRC" /tmp/gpu_check && cd /tmp/gpu_check || exit 1
export PYTHONPATH=$PWD
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
fi

{ date -u; nvidia-smi; "$PY" -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } \
    > "$OUT/device.txt" 2>&1

run() {  # run NAME COMMAND...: output to $OUT/NAME.log, wall time and exit status to summary.txt
    local name=$1; shift
    local t0=$SECONDS
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc, $((SECONDS - t0)) s: $*" | tee -a "$OUT/summary.txt"
}

study() {  # study NAME WORKLOAD [overrides...]: the README's main command, then its exports
    local name=$1 workload=$2; shift 2
    run "$name" "$PY" -c "from autotune.cli.main import main; main()" "workload=$workload" \
        "study.name=$name" "study.out_dir=studies" "$@"
    mkdir -p "$OUT/$name"
    cp studies/"$name"/{best.yaml,trials.csv,report.md} "$OUT/$name/" 2>/dev/null
}

for step in $STEPS; do
    case $step in
        tests) run gpu_tests "$PY" -m pytest -m gpu -q -p no:cacheprovider --durations=15 tests/ ;;
        resnet18) study resnet18 resnet18 ;;
        gpt) study gpt gpt ;;
        side) run side_by_side_resnet18 "$PY" benchmarks/side_by_side.py \
                  studies/resnet18/best.yaml --rounds 3 --out "$OUT/side_by_side_resnet18.md"
              run side_by_side_gpt "$PY" benchmarks/side_by_side.py \
                  studies/gpt/best.yaml --rounds 3 --out "$OUT/side_by_side_gpt.md" ;;
        figures) run figures "$PY" - "$OUT" <<'PYEOF'
# The must-show figures of issue 14 from each study's exports: speedup, share of the step-alone
# ceiling, ceilings beaten (measurement bugs), compile cost and pruned compiled trials.
import csv, json, sys
from pathlib import Path
import yaml
out = Path(sys.argv[1])
for name in ("resnet18", "gpt"):
    best = out / name / "best.yaml"
    if not best.exists():
        print(f"{name}: no best.yaml"); continue
    doc = yaml.safe_load(best.read_text())
    m, ceil = doc["metrics"], doc.get("ceilings") or {}
    print(f"{name}: speedup {doc.get('speedup')}x, best {m.get('samples_per_sec')} samples/s, "
          f"ceilings {ceil}, fraction of compute ceiling "
          f"{(m.get('samples_per_sec') or 0) / ceil['compute'] if ceil.get('compute') else None}")
    print(f"  knobs: {json.dumps(doc['knobs'])}")
    print(f"  compile: {json.dumps(doc.get('compile'))}")
    print(f"  pruning: {json.dumps(doc['study'].get('pruning'))}")
    rows = list(csv.DictReader((out / name / "trials.csv").open()))
    for r in rows:
        if r.get("ceiling_violation"):
            print(f"  trial {r['number']} beat its ceiling: {r['ceiling_violation']}")
        if r["state"] == "PRUNED" and r.get("knob.compile") not in ("", "off"):
            print(f"  trial {r['number']} compile={r['knob.compile']} pruned after "
                  f"{r.get('compile_s') or 0} s of compile: {r['reason']}")
PYEOF
        ;;
        *) echo "unknown step $step (tests resnet18 gpt side figures)" | tee -a "$OUT/summary.txt" ;;
    esac
done
echo "figures in $OUT:"; ls -R "$OUT"
