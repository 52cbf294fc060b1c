#!/usr/bin/env bash
# The GPU machines' software on this CPU machine, before a loan is spent on it: Python 3.12,
# torch 2.11, torchvision 0.26, transformers 5.17 and the rest of their image
# (../shared/gpu/README.md, read 2026-11-17), with autotune's other dependencies from .whl/ on
# PYTHONPATH as gpu_check.sh installs them there. Runs the loan's own command as a rehearsal
# (GPU_CHECK_DRY=1, steps on the CPU), then the tests under that software.
#
#   bash .ci/gpu/gpu_image.sh                    # rehearsal + the fast tier (idle: 130 s + 69 s)
#   bash .ci/gpu/gpu_image.sh tests/test_ddp.py  # rehearsal + the tests named (pytest args)
#   SKIP_REHEARSAL=1 bash .ci/gpu/gpu_image.sh -m "not slow" -x
#
# What it found on 2026-11-27 (this project's 2-core VM, 63fe0d0): the rehearsal passed; the
# fast tier failed 4 tests, the whole suite 4 more, and every test that starts a child process
# lost the dependencies on PYTHONPATH: the tests' own assumptions (torch 2.14's or transformers
# 5.23's names, psycopg, a replaced PYTHONPATH), fixed in 0b6a161 and f22deea; autotune/ itself
# needed no change for them. The docs tests are left out: the GPU image has
# neither mkdocs nor nbformat, and the docs do not run there.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
IMG=${IMG:-/tmp/gpuimg}
SITE=${SITE:-/tmp/site}
cd "$SRC"

if [ ! -x "$IMG/bin/python" ]; then
    # The first Python 3.12 that runs (a pyenv shim on PATH may name one it will not run).
    py312=${PY312:-}
    for c in $(command -v python3.12) ~/.pyenv/versions/3.12*/bin/python3.12; do
        [ -n "$py312" ] && break
        if "$c" -c "import sys" 2>/dev/null; then py312=$c; fi
    done
    [ -n "$py312" ] || { echo "no Python 3.12 here (the GPU image's); set PY312"; exit 1; }
    "$py312" -m venv "$IMG"
    # The image's packages (pytest-timeout, psutil, nvidia-ml-py ... are autotune's own needs).
    "$IMG/bin/pip" install -q "torch==2.11.0" "torchvision==0.26.0" "transformers==5.17.*" \
        accelerate lightning numpy PyYAML psutil nvidia-ml-py cloudpickle narwhals pillow pytest \
        pytest-timeout rich matplotlib
fi
ls .whl/*.whl >/dev/null 2>&1 || bash ../shared/gpu/wheels.sh
if ! PYTHONPATH=$SITE "$IMG/bin/python" -c "import optuna, hydra, nvtx" 2>/dev/null; then
    "$IMG/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$SITE" .whl/*.whl
fi
"$IMG/bin/python" -c "import sys, torch, transformers; print('python', sys.version.split()[0], \
'torch', torch.__version__, 'transformers', transformers.__version__)"

if [ "${SKIP_REHEARSAL:-0}" != 1 ]; then
    out=$(mktemp -d /tmp/gpu_image_out.XXXX)
    # gpu_loan.sh ends by printing the check's summary and its rerun's.
    GPU_CHECK_DRY=1 PYTHON="$IMG/bin/python" OUT="$out" LIMIT_S=400 WORK=/tmp/gpu_image_check \
        bash .ci/gpu/gpu_loan.sh > "$out/loan.log" 2>&1 || true
    tail -n 20 "$out/loan.log"
    # A step fails when its last word is FAIL or TIMEOUT: one cut in the check and passed in
    # the loan's rerun is what a loan does (the dry steps keep the GPU's budgets; beside other
    # work on 2 cores, jpeg's 50 s was cut once, 2026-11-27, and passed in the rerun).
    failed=$(awk -F': ' '/^(study|tests|jpeg|ncu|compile|figures): /{split($2, w, " "); last[$1]=w[1]}
        END {for (s in last) if (last[s] == "FAIL" || last[s] == "TIMEOUT") print s}' "$out/loan.log")
    if [ -n "$failed" ]; then
        echo "the rehearsal failed: $failed ($out/loan.log, $out/*.tgz)"; exit 1
    fi
fi

[ $# -gt 0 ] || set -- -m "not slow"
PYTHONPATH="$SITE:$SRC" "$IMG/bin/python" -m pytest -q -p no:cacheprovider -o addopts="" \
    --ignore tests/test_docs.py --ignore tests/test_docs_notebook.py \
    --ignore tests/test_docs_site.py "$@"
