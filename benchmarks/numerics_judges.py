"""Which finalists the numerics check lets through, before and after the tolerance came from the
user's own seed-to-seed spread, and what the check costs: the README's workload
(``autotune workload=resnet18``) and a language-model fine-tune (a GPT-2 of 4 layers of 128
built from its config, AdamW through ``hf.tune``), each a default study run by the code of
each side in a fresh folder.

    python -m benchmarks.numerics_judges [--before df4a9e9] [--after HEAD] [--trials 12]
        [--only readme,lm] [--sides before,after] [--out DIR] [--reuse] [--record]

``--before``/``--after``: the commits compared (a worktree of each is made under --out);
``--sides``: the sides to run, the others' studies reused from --out. Run
from the repository's root on an idle machine: each side's studies run one after the other,
nothing beside them. The figures come from each study's best.yaml (``numerics.trials``: each
checked finalist's verdict; ``study.wall.phases``: the check's time)."""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.child_env import child_env
from benchmarks.record import command, machine, publish

ROOT = Path(__file__).resolve().parents[1]

#: The fine-tune each side runs: a model from its config (nothing downloaded), the Trainer as
#: a user builds it, and hf.tune with the study's name and trials.
LM_PROGRAM = """
import sys, torch, transformers
from autotune.adapters import hf
from examples.hf_tune import tokens
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    n_layer=4, n_head=4, n_embd=128, vocab_size=2048, n_positions=128, bos_token_id=0,
    eos_token_id=0))
args = transformers.TrainingArguments(output_dir="hf-out", per_device_train_batch_size=8,
    learning_rate=5e-4, use_cpu=True, report_to="none", max_steps=10)
trainer = transformers.Trainer(model=model, args=args,
    train_dataset=tokens(n=960, seq_len=128, vocab_size=2048),
    data_collator=transformers.default_data_collator)
try:
    hf.tune(trainer, [f"study.n_trials={sys.argv[1]}"], device="cpu", name="lm-finetune")
except Exception as exc:  # an export that says what it could not measure still has a best.yaml
    print(f"hf.tune raised {type(exc).__name__}: {exc}")
"""


def run_side(label: str, code: Path, out: Path, only: list[str], trials: int,
             reuse: bool = False) -> dict[str, Any]:
    """Each study of one side in its own folder; what its best.yaml says (``reuse``: the
    studies already in ``out``, not run again)."""
    env = child_env(code)
    results: dict[str, Any] = {}
    for name in only:
        folder = out / label / name
        folder.mkdir(parents=True, exist_ok=True)
        if name == "readme":
            argv = [sys.executable, "-m", "autotune", "workload=resnet18", "device=cpu",
                    f"study.n_trials={trials}", "study.name=readme"]
            study = "readme"
        else:
            argv = [sys.executable, "-c", LM_PROGRAM, str(trials)]
            study = "lm-finetune"
        best = folder / "studies" / study / "best.yaml"
        if reuse:  # the studies of an earlier run: their own wall time and exit
            doc = yaml.safe_load(best.read_text())
            results[name] = {"wall_s": float(doc["study"]["wall"]["measured_s"]),
                             "exit": "-", "doc": doc, "runs": check_runs(best.parent)}
            continue
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True,
                              check=False)
        (folder / "console.txt").write_text(done.stdout + done.stderr)
        doc = yaml.safe_load(best.read_text()) if best.exists() else {}
        results[name] = {"wall_s": time.monotonic() - t0, "exit": done.returncode, "doc": doc,
                         "runs": check_runs(best.parent)}
        print(f"{label} {name}: exit {done.returncode}, {time.monotonic() - t0:.0f} s",
              flush=True)
    return results


def check_runs(study: Path) -> str:
    """The check's runs and their seconds, each from its request to its result (the check
    runs during the confirmation too, since it vets each answer's leader as it leads: the
    phase's time alone leaves those out)."""
    runs = [d for d in (study / "numerics").glob("*/") if (d / "result.json").exists()]
    seconds = sum((d / "result.json").stat().st_mtime - (d / "request.json").stat().st_mtime
                  for d in runs)
    return f"{len(runs)} runs, {seconds:.0f} s"


def _phase_s(doc: dict[str, Any], name: str) -> str:
    phases = (((doc.get("study") or {}).get("wall") or {}).get("phases") or {})
    got = phases.get(name) or {}
    return f"{got['measured_s']:.0f} s" if "measured_s" in got else "-"


def _verdicts(doc: dict[str, Any]) -> list[str]:
    """One cell per checked finalist: its knobs' families, its deviation and the tolerance, and
    whether it passed."""
    cells = []
    for n, e in sorted(((doc.get("numerics") or {}).get("trials") or {}).items(),
                       key=lambda kv: int(kv[0])):
        if e.get("passed") is None:
            verdict = "not checked"
        else:
            verdict = "passed" if e.get("passed") else "refused"
        dev = e.get("deviation", e.get("max_rel_dev"))
        dev_s = f"{dev:.2%}" if isinstance(dev, (int, float)) else "-"
        tol = e.get("tolerance")
        tol_s = f"{tol:.2%}" if isinstance(tol, (int, float)) else "-"
        fams = "+".join(e.get("families") or []) or "-"
        cells.append(f"trial {n} ({fams}): {dev_s} against {tol_s}, {verdict}")
    return cells


def _speedup(doc: dict[str, Any]) -> str:
    return str(doc.get("speedup_text") or doc.get("speedup") or "-")


def section(sides: dict[str, dict[str, Any]], codes: dict[str, str]) -> list[str]:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    first = next(r["doc"] for side in sides.values() for r in side.values() if r["doc"])
    lines = [f"## The numerics check before and after the user's own spread: the README's "
             f"workload and a fine-tune (ended {now})", "",
             machine(first) + " Idle, nothing else ran. Command: `"
             + command("benchmarks.numerics_judges") + "`. Each side ran a default "
             "study of each workload in a fresh folder, its own code on PYTHONPATH: "
             + ", ".join(f"{k}: {v}" for k, v in codes.items()) + ". The README's workload: "
             "`autotune workload=resnet18 device=cpu`; the fine-tune: a GPT-2 of 4 layers of "
             "128 built from its config, AdamW at 5e-4, batch 8, through `hf.tune`.", "",
             "| workload | code | finalists checked: deviation against tolerance, verdict | "
             "the check's runs | numerics phase | confirmation | study | exported |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("readme", "lm"):
        for label, results in sides.items():
            r = results.get(name)
            if r is None:
                continue
            doc = r["doc"]
            cells = "; ".join(_verdicts(doc)) or "none checked"
            lines.append(f"| {name} | {label} | {cells} | {r['runs']} | "
                         f"{_phase_s(doc, 'numerics check')} | "
                         f"{_phase_s(doc, 'confirmation')} | {r['wall_s']:.0f} s (exit "
                         f"{r['exit']}) | {_speedup(doc)} |")
    lines += ["", "Before: each finalist's first 10 losses against one reference run from the "
              "same seed, its tolerance the family's (10% for amp) or 3x the reference's "
              "deterministic replay. After: the tail of the first steps against the user's "
              "configuration at three seeds, the tolerance 3x their spread (at least the "
              "family's); a run beyond it runs again at the next seed."]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="df4a9e9")
    p.add_argument("--after", default="HEAD")
    p.add_argument("--sides", default="before,after", help="the sides to run (others reused)")
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--only", default="readme,lm")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--reuse", action="store_true", help="report the studies already in --out")
    p.add_argument("--record", action="store_true")
    a = p.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="numerics-judges-"))
    codes = {"before": a.before, "after": a.after}
    only = a.only.split(",")
    sides = {}
    for label in ("before", "after"):
        tree = out / f"{label}-code"  # a worktree of the side's commit: committed code only
        if not tree.exists():
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), codes[label]],
                           cwd=ROOT, check=True, capture_output=True)
        sides[label] = run_side(label, tree, out, only, a.trials,
                                a.reuse or label not in a.sides.split(","))
    publish(section(sides, codes), a.record)
    print(f"studies kept in {out}")


if __name__ == "__main__":
    main()
