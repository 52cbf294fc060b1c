"""The DDP step knobs and launch.scaling on a communication-bound workload, through
the product itself: a study of 2 ranks (gloo, one core each) of a wide MLP (3 layers of 1024:
3.2 M parameters, 13 MB all-reduced per step, little compute per sample), every knob pinned to
the baseline's value but the one measured, searched over [off, on]; the confirmation's paired
rounds measure the knob against the same configuration without it, and ``launch.scaling``
measures the exported configuration as one rank alone.

1. ``accumulation``: ``study.keep_global_batch=true`` with micro-batches of 8 (4 accumulation
   steps of the global batch 32): ``accumulation_no_sync`` false (an all-reduce per micro-batch,
   a plain loop's default) against true (one per optimizer step).
2. ``compression``: ``comm_hook`` none against bf16 (listed: it changes the numerics; the
   numerics check runs on it).

    PYTHONPATH=. python benchmarks/ddp_step_knobs.py [--only accumulation,compression]

Appends a section to docs/benchmarks.md (machine, date, command, the studies' own figures).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.history import prepend_section  # noqa: E402

WORKLOAD = ["workload=mlp", "workload.hidden=1024", "workload.depth=3", "device=cpu",
            "launch.nproc_per_node=2", "launch.scaling=true"]
#: The baseline's own values, pinned: only the measured knob moves.
PINNED = ["knobs.num_workers=0", "knobs.cpu_threads=1", "knobs.bucket_cap_mb=25",
          "knobs.gradient_as_bucket_view=false", "knobs.batched_grad_copy=false",
          "knobs.static_graph=false", "knobs.broadcast_buffers=true",
          "knobs.optimizer_impl=default", "knobs.set_to_none=true",
          "knobs.host_allocator=default"]
WINDOW = ["window.warmup_steps=3", "window.measure_steps=20", "window.measure_seconds=4",
          "window.min_measure_steps=8", "window.profile=false"]


def studies() -> dict[str, list[str]]:
    return {
        "accumulation": ["study.keep_global_batch=true", "knobs.batch_size=8",
                         "knobs.accumulation_no_sync=[false,true]", "knobs.comm_hook=none",
                         "study.n_trials=3", "study.numerics_steps=0"],
        "compression": ["knobs.batch_size=32", "knobs.comm_hook=[none,bf16]",
                        "study.n_trials=3", "study.numerics_steps=5"],
    }


def run(name: str, args: list[str], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "autotune", *WORKLOAD, *PINNED, *WINDOW, *args,
           f"study.name={name}", f"study.out_dir={out}", "study.confirm_budget_s=240"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    folder = out / name
    with open(folder / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    best = yaml.safe_load((folder / "best.yaml").read_text())
    return {"rows": rows, "best": best, "wall_s": time.time() - t0, "code": proc.returncode,
            "tail": proc.stderr.strip().splitlines()[-1:] if proc.returncode else [],
            "command": "autotune " + " ".join(cmd[3:])}


def _f(x: Any, spec: str = ",.1f") -> str:
    try:
        return format(float(x), spec)
    except (TypeError, ValueError):
        return "-"


def section(results: dict[str, dict[str, Any]], command: str) -> str:
    import torch

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"## DDP step knobs and scaling efficiency ({now}, "
             f"{platform.processor() or platform.machine()}, 2 vCPUs, Python "
             f"{platform.python_version()}, torch {torch.__version__}, gloo, 2 ranks)", "",
             f"    {command}", ""]
    knob = {"accumulation": "accumulation_no_sync", "compression": "comm_hook"}
    for name, res in results.items():
        best = res["best"]
        lines += [f"### {name}", "", f"    {res['command']}", "",
                  f"| trial | {knob[name]} | samples/s (search) | all-reduce share | state |",
                  "|---|---|---|---|---|"]
        for r in res["rows"]:
            lines.append(f"| {r['number']} | {r.get('knob.' + knob[name], '')} | "
                         f"{_f(r.get('samples_per_sec'))} | "
                         f"{_f(100 * float(r['comm.exposed_share']), '.0f') + '%' if r.get('comm.exposed_share') else '-'} | "
                         f"{r['state']} |")
        lines += ["", f"best.yaml: {knob[name]}={best['knobs'][knob[name]]}, speedup "
                  f"{best.get('speedup_text') or best.get('speedup')}; "
                  f"{(best.get('scaling') or {}).get('words', 'no scaling figure')}; "
                  f"wall time {res['wall_s']:.0f} s, exit {res['code']}."]
        if best.get("numerics"):
            lines.append(f"numerics: {best['numerics'].get('trials')}")
        if res["tail"]:
            lines.append(f"The study said: {res['tail'][0]}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="accumulation,compression")
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()) / "studies")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    wanted = a.only.split(",")
    results = {n: run(n, s, a.out) for n, s in studies().items() if n in wanted}
    text = section(results, "PYTHONPATH=. python benchmarks/ddp_step_knobs.py "
                   + " ".join(sys.argv[1:]))
    print(text)
    if not a.no_write:
        prepend_section(text)


if __name__ == "__main__":
    main()
