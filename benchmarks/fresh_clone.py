"""From a fresh clone to a verified speedup on the nanoGPT tutorial's script, following only
its page (docs/guide/nanogpt.md) after the README's set-up command, each step timed:

1. ``git clone`` of this checkout's HEAD (a local clone: the network's part is the install's);
2. the README's set-up: ``python3 -m venv .venv && .venv/bin/pip install --no-cache-dir -e .``
   (no pip cache, as on a new machine; where pip's wheels come from a local folder, as on this
   project's VMs, the section says so: the install is then unpacking, not downloading);
3. the page's four commands, in the venv (its ``bin`` first on PATH, as once activated):
   the script as it is, ``autotune study.name=nanogpt -- python examples/nanogpt/train.py
   --steps S``, the script tuned, and ``autotune verify studies/nanogpt``.

The section gives each step's wall time, the whole, the exported speedup with its interval and
what verify realized of it (the goal: under 10 minutes of a user's time on the CPU, and at
least 0.8 of the speedup realized).

    python -m benchmarks.fresh_clone [--steps 300] [--keep DIR] [--record]

Run from the repository's root, on an idle machine with the network up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.record import command, machine, publish

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 600.0


def timed(args: list[str], cwd: Path, log: Path, env: dict[str, str]) -> float:
    """One step in ``cwd``, its output to ``log``; its seconds. A failing step ends the
    benchmark, naming the log."""
    t = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(args, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env,
                              check=False)
    if proc.returncode not in (0, 4):  # 4: exported with a could-not-measure note
        sys.exit(f"{' '.join(args)} exited with {proc.returncode}; its output: {log}")
    return time.perf_counter() - t


def steps(folder: Path, script_steps: int) -> dict[str, float]:
    """Each step's seconds, in the order a new user takes them."""
    clone = folder / "autotune"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = {"git clone": timed(["git", "clone", "-q", str(ROOT), str(clone)], folder,
                              folder / "clone.log", env)}
    out["set-up (venv, pip install -e .)"] = timed(
        ["sh", "-c", "python3 -m venv .venv && .venv/bin/pip install -q --no-cache-dir -e ."],
        clone, folder / "setup.log", env)
    venv = {**env, "PATH": f"{clone / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "VIRTUAL_ENV": str(clone / ".venv")}
    script = ["--steps", str(script_steps)]
    page = {
        "your script as it is": ["python", "examples/nanogpt/train_original.py", *script],
        "the study of train.py": ["autotune", "study.name=nanogpt", "--", "python",
                                  "examples/nanogpt/train.py", *script],
        "your script, tuned": ["python", "examples/nanogpt/train.py", *script],
        "autotune verify": ["autotune", "verify", "studies/nanogpt"],
    }
    for i, (name, args) in enumerate(page.items()):
        out[name] = timed(args, clone, folder / f"page-{i}.log", venv)
    return out


def _wheels() -> str:
    """Where pip took the wheels from: a local folder or index makes the install's time an
    unpacking, not a download, and the section says so."""
    local = [v for k in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
             if (v := os.environ.get(k)) and not v.startswith(("http://", "https://"))]
    if local:
        return (f"This machine's pip takes its wheels from a local folder ({', '.join(local)}): "
                "the set-up's time is unpacking them, not downloading (torch's CUDA build and "
                "its libraries are some 5 GB).")
    return "Every wheel was downloaded."


def section(times: dict[str, float], best: dict, verified: dict, script_steps: int
            ) -> list[str]:
    total = sum(times.values())
    user = total - times["set-up (venv, pip install -e .)"]
    ratio = verified.get("ratio")
    lines = [f"## From a fresh clone to a verified speedup on nanoGPT's script "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"    {command('benchmarks.fresh_clone')}", "",
             machine(best) + " Idle, nothing else ran. The README's set-up command, then "
             f"docs/guide/nanogpt.md's four commands as written (`--steps {script_steps}`), "
             f"in the new virtual environment; pip's cache off. {_wheels()}",
             "", "| step | wall time |", "|---|---|"]
    lines += [f"| {name} | {s / 60:.1f} min |" for name, s in times.items()]
    lines += [f"| **all** | **{total / 60:.1f} min** ({'under' if total < GOAL_S else 'OVER'} "
              f"the 10-minute goal; {user / 60:.1f} min without the install) |", "",
              f"Exported: {best.get('speedup_text')}; verify realized "
              f"{verified.get('realized_text')}"
              + (f", {ratio:.0%} of it." if ratio is not None else "."), ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--keep", type=Path, help="run in this folder (kept)")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fresh-clone-") as tmp:
        folder = (a.keep or Path(tmp)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        times = steps(folder, a.steps)
        study = folder / "autotune" / "studies" / "nanogpt"
        best = yaml.safe_load((study / "best.yaml").read_text())
        verified = json.loads((study / "verify.json").read_text())
        publish(section(times, best, verified, a.steps), a.record)


if __name__ == "__main__":
    main()
