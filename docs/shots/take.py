"""Retake the report screenshots the documentation shows (docs/guide/report.md).

Runs a real tiny study on the CPU in a temporary directory (the README's `resnet18` at CPU sizes,
6 trials, short windows), renders its report.html, screenshots it in headless Chromium and crops the
page into the parts the page shows (each part screenshotted alone, cut at its sections' headings,
so a longer or shorter report never shows a sliver of the section beside it). Beside the PNGs, ``shots.json`` keeps a hash of the
report's renderer sources: tests/test_docs.py fails when they changed since the screenshots
were taken, so the pictures cannot go stale silently::

    python docs/shots/take.py          # about four minutes on 2 CPU cores
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: What decides how report.html looks: its renderer and the modules that build its parts.
RENDERER = ["autotune/results/report_html.py", "autotune/results/report_plots.py",
            "autotune/results/report_loader.py", "autotune/results/report_data.py",
            "autotune/results/compare.py", "autotune/results/report_numerics.py"]
#: The README's workload at CPU sizes, 6 trials and a short confirmation: a study whose report
#: has a path to its best, a speedup with its interval and finalists (the mlp study taken before
#: 2026-11-27 had its baseline as the only finalist: a report with nothing to show).
STUDY = ["workload=resnet18", "device=cpu", "study.name=report-shots", "study.n_trials=6",
         "window.warmup_steps=2", "window.measure_steps=8", "window.measure_seconds=3",
         "study.confirm_runs=3", "study.confirm_budget_s=120"]
#: (file, first heading, heading it stops before): the parts the report page shows. None: the
#: page's start or end. The plots stop before the loader's chart, which a CPU study lacks.
PARTS = [("report-top.png", None, "<h2>Pruned"), ("report-plots.png", "<h2>Plots", None)]
WIDTH, HEIGHT = 1280, 4000
#: No part is taller than this (the plots of a CPU study, four of them, are about 1,900).
MAX_HEIGHT = 2200


def renderer_hash() -> str:
    """The renderer's code, read as Python: its syntax tree without docstrings (comments are
    not in it), so a reworded docstring does not call for new screenshots; any change to what
    the code does does."""
    h = hashlib.sha256()
    for rel in RENDERER:
        h.update(rel.encode() + b"\0" + _code((ROOT / rel).read_text()).encode() + b"\0")
    return h.hexdigest()


def _code(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def part_page(page: str, start: str | None, stop: str | None) -> str:
    """report.html with only its sections from heading ``start`` to before ``stop``."""
    head, body = page.split("<body>", 1)
    if start is not None:
        body = body[body.index(start):]
    if stop is not None:
        body = body[:body.index(stop)] + "</body></html>"
    return head + "<body>" + body


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
    page = (work / "studies" / "report-shots" / "report.html").read_text()
    for name, start, stop in PARTS:
        part = work / f"{name}.html"
        part.write_text(part_page(page, start, stop))
        shot = work / name
        subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--virtual-time-budget=8000",
                        f"--user-data-dir={work / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
                        f"--screenshot={shot}", part.as_uri()], check=True, capture_output=True)
        _trimmed(Image.open(shot)).save(HERE / name, optimize=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    meta = {"renderer_sha256": renderer_hash(), "renderer": RENDERER,
            "taken": datetime.date.today().isoformat(), "commit": commit,
            "study": "autotune " + " ".join(STUDY), "files": [p[0] for p in PARTS]}
    (HERE / "shots.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {', '.join(p[0] for p in PARTS)} and shots.json in {HERE}")


def _trimmed(image: Any) -> Any:
    """The screenshot less the blank page below the part's content, at most MAX_HEIGHT."""
    from PIL import ImageChops

    rgb = image.convert("RGB")
    blank = rgb.point(lambda _: 255)
    box = ImageChops.difference(rgb, blank).getbbox()
    bottom = min(MAX_HEIGHT, (box[3] if box else rgb.height) + 24)
    return rgb.crop((0, 0, WIDTH, bottom))


if __name__ == "__main__":
    main()
