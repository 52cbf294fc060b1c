"""Retake the report screenshots the documentation shows (docs/guide/report.md).

Runs a real tiny study on the CPU in a temporary directory (the README's `resnet18` at CPU sizes,
6 trials, short windows), renders its report.html, screenshots it in headless Chromium and crops the
screenshot into the parts the page shows. Beside the PNGs, ``shots.json`` keeps a hash of the
report's renderer sources: tests/test_docs.py fails when they changed since the screenshots
were taken, so the pictures cannot go stale silently::

    python docs/shots/take.py          # about two minutes on 2 CPU cores
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: What decides how report.html looks: its renderer and the modules that build its parts.
RENDERER = ["autotune/results/report_html.py", "autotune/results/report_loader.py",
            "autotune/results/report_data.py", "autotune/results/compare.py"]
#: The README's workload at CPU sizes, 6 trials and a short confirmation: a study whose report
#: has a path to its best, a speedup with its interval and finalists (the mlp study taken before
#: 2026-11-27 had its baseline as the only finalist: a report with nothing to show).
STUDY = ["workload=resnet18", "device=cpu", "study.name=report-shots", "study.n_trials=6",
         "window.warmup_steps=2", "window.measure_steps=8", "window.measure_seconds=3",
         "study.confirm_runs=3", "study.confirm_budget_s=60"]
#: (file, top, bottom) in CSS pixels of a 1280-wide page: the parts the report page shows.
PARTS = [("report-top.png", 0, 1100), ("report-plots.png", 1100, 2600)]
WIDTH, HEIGHT = 1280, 4000


def renderer_hash() -> str:
    h = hashlib.sha256()
    for rel in RENDERER:
        h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    return h.hexdigest()


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    return exe


def main() -> None:
    from PIL import Image

    work = Path(tempfile.mkdtemp(prefix="report-shots-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_PROGRESS": "lines"}
    # Exit 4 (the machine was too busy to rank the configurations) still writes the report,
    # and says so in it: a real report, as a user on a busy machine would see it.
    study = subprocess.run([sys.executable, "-m", "autotune", *STUDY], cwd=work, env=env)
    if study.returncode not in (0, 3, 4):
        raise SystemExit(f"the study failed (exit {study.returncode}): no report to take")
    report = work / "studies" / "report-shots" / "report.html"
    shot = work / "full.png"
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--virtual-time-budget=8000",
                    f"--user-data-dir={work / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
                    f"--screenshot={shot}", report.as_uri()], check=True, capture_output=True)
    full = Image.open(shot)
    for name, top, bottom in PARTS:
        full.crop((0, top, WIDTH, bottom)).save(HERE / name, optimize=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    meta = {"renderer_sha256": renderer_hash(), "renderer": RENDERER,
            "taken": datetime.date.today().isoformat(), "commit": commit,
            "study": "autotune " + " ".join(STUDY), "files": [p[0] for p in PARTS]}
    (HERE / "shots.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {', '.join(p[0] for p in PARTS)} and shots.json in {HERE}")


if __name__ == "__main__":
    main()
