"""The loader ceiling of the test suite's sleeping loader (10 ms an item, batch 16, persistent
workers) against its physical limit (workers x 100 items/s), one fresh trial per worker count.

    PYTHONPATH=. python benchmarks/loader_ceiling.py [1 2 11 16]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.measure.runner import run_window  # noqa: E402
from tests.test_ceilings import sleepy_request  # noqa: E402

if __name__ == "__main__":  # the fork server re-imports this module in each trial
    print("| workers | physical limit | ceiling | noise | trained |\n|---|---|---|---|---|")
    for w in [int(a) for a in sys.argv[1:]] or [1, 2, 11, 16]:
        with tempfile.TemporaryDirectory() as tmp:
            r = run_window(sleepy_request(w), Path(tmp))
        print(f"| {w} | {w * 100:,} | {r.ceilings.get('loader', 0):,.0f} | "
              f"{100 * r.ceiling_noise.get('loader', 0):.1f}% | {r.samples_per_sec:,.0f} |", flush=True)
