"""The README's main command on an idle machine and beside CPU hogs.

Each run is the README's own command, ``autotune workload=resnet18``, in a study of its own
(``study.name=<label>-<i>``, outputs under ``--out``), with nothing else started by this
script; a hogged run starts ``stress-ng --cpu N`` in a session of its own (another user's job)
for the whole study. After each idle run, benchmarks/reproduce.py re-measures the exported
configuration against the baseline in interleaved rounds: does it fall inside the study's
interval? The table goes to stdout and, with ``--record``, to docs/benchmarks.md:

    python benchmarks/busy_machine.py --idle 5 --hog1 3 --hog4 1 --record

Run it on an otherwise idle machine: the idle runs are the comparison for the others.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.reproduce import reproduce  # noqa: E402

#: The knobs whose values make a configuration's "family": what moves the speed on this
#: workload (the loader's processes, the batch, the arithmetic, the layout). Prefetch depth,
#: persistence, zero_grad's mode and the allocator are within-family details.
FAMILY = ("num_workers", "batch_size", "amp", "channels_last", "cpu_threads", "compile")


def family(doc: dict[str, Any], base: dict[str, Any]) -> str:
    """The exported configuration's family: its FAMILY knobs that differ from the baseline's
    ("baseline" when none do)."""
    k = doc["knobs"]
    changed = [f"{n}={k[n]}" for n in FAMILY if n in k and k[n] != base.get(n)]
    return " ".join(changed) or "baseline"


def one_study(label: str, out: Path, hog: int, extra: list[str]) -> dict[str, Any]:
    name = f"{label}"
    cmd = [sys.executable, "-m", "autotune", "workload=resnet18", f"study.name={name}",
           f"study.out_dir={out}", *extra]
    hog_proc = None
    if hog:
        hog_proc = subprocess.Popen(["stress-ng", "--cpu", str(hog), "--quiet"],
                                    start_new_session=True)
        time.sleep(2.0)
    t0 = time.monotonic()
    log = out / f"{name}.log"
    try:
        with log.open("w") as f:
            code = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                  env={**os.environ, "AUTOTUNE_PROGRESS": "lines"}).returncode
    finally:
        if hog_proc is not None:
            os.killpg(hog_proc.pid, signal.SIGTERM)
            hog_proc.wait()
    wall = time.monotonic() - t0
    best_yaml = out / name / "best.yaml"
    doc = yaml.safe_load(best_yaml.read_text()) if best_yaml.exists() else {}
    return {"name": name, "hog": hog, "code": code, "wall_s": wall, "doc": doc,
            "best_yaml": best_yaml, "log": log}


def row(r: dict[str, Any], base_knobs: dict[str, Any]) -> dict[str, Any]:
    doc = r["doc"]
    conf = doc.get("confirmation") or {}
    load = doc.get("contention") or {}
    return {
        "run": r["name"], "load": f"stress-ng --cpu {r['hog']}" if r["hog"] else "idle",
        "exit": r["code"], "minutes": round(r["wall_s"] / 60, 1),
        "family": family(doc, base_knobs) if doc else "-",
        "speedup": doc.get("speedup"), "speedup_text": doc.get("speedup_text"),
        "rounds": conf.get("rounds"), "stopped": conf.get("stopped"),
        "window_noise": conf.get("window_noise"),
        "load_seen": load.get("windows"), "could_not_measure": load.get("could_not_measure"),
        "leader_interval": (conf.get("intervals") or {}).get(str(conf.get("leader"))),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=5)
    ap.add_argument("--hog1", type=int, default=3, help="runs beside stress-ng --cpu 1")
    ap.add_argument("--hog4", type=int, default=1, help="runs beside stress-ng --cpu 4")
    ap.add_argument("--reproduce-rounds", type=int, default=10)
    ap.add_argument("--out", default="/tmp/autotune-busy")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("extra", nargs="*", help="more overrides for every run")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M")
    rows, repro = [], []
    plan = ([("idle", 0)] * a.idle + [("hog1", 1)] * a.hog1 + [("hog4", 4)] * a.hog4)
    for i, (label, hog) in enumerate(plan):
        r = one_study(f"{label}-{stamp}-{i}", out, hog, a.extra)
        base = _baseline_knobs(r)
        rows.append(row(r, base))
        print(json.dumps(rows[-1]), flush=True)
        if not hog and r["best_yaml"].exists():
            rep = reproduce(r["best_yaml"], a.reproduce_rounds)
            repro.append({"run": r["name"], "study": r["doc"].get("speedup_text"),
                          "alone": rep["interval"].text(), "inside": rep["inside"]})
            print(json.dumps(repro[-1]), flush=True)
        (out / f"busy-{stamp}.json").write_text(json.dumps({"rows": rows, "reproduce": repro},
                                                           indent=1, default=str))
    text = report(rows, repro, a)
    print(text)
    if a.record:
        with open(ROOT / "docs" / "benchmarks.md", "a") as f:
            f.write("\n" + text)


def _baseline_knobs(r: dict[str, Any]) -> dict[str, Any]:
    req = r["best_yaml"].parent / "trials" / "0" / "request.json"
    return json.loads(req.read_text())["knobs"] if req.exists() else {}


def report(rows: list[dict[str, Any]], repro: list[dict[str, Any]], a: Any) -> str:
    idle = [r["speedup"] for r in rows if r["load"] == "idle" and r["speedup"]]
    med = statistics.median(idle) if idle else None
    lines = [f"### The README's main command, idle and beside stress-ng "
             f"({datetime.date.today()}, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores)", "",
             f"Command: `python benchmarks/busy_machine.py --idle {a.idle} --hog1 {a.hog1} "
             f"--hog4 {a.hog4} --record` (each run: `autotune workload=resnet18 "
             f"study.name=<run>`).", "",
             "| run | load | exit | min | exported family | speedup (95% CI) | rounds, stop | "
             "window noise | vs idle median | load the study named |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = (f"{100 * (r['speedup'] / med - 1):+.1f}%" if med and r["speedup"] else "-")
        said = r["could_not_measure"] or r["load_seen"] or "-"
        lines.append(f"| {r['run']} | {r['load']} | {r['exit']} | {r['minutes']} | "
                     f"{r['family']} | {r['speedup_text']} | {r['rounds']}, {r['stopped']} | "
                     f"{100 * float(r['window_noise'] or 0):.1f}% | {vs} | {said} |")
    if repro:
        lines += ["", "Re-measured alone afterwards (benchmarks/reproduce.py, "
                  f"{a.reproduce_rounds} interleaved rounds with the baseline):", "",
                  "| run | study | alone | inside the study's interval |", "|---|---|---|---|"]
        lines += [f"| {p['run']} | {p['study']} | {p['alone']} | {p['inside']} |" for p in repro]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
