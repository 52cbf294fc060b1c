"""Transformer training's own knobs on this machine's CPU: a decoder LM (examples/hf_lm.py, a Llama-style
model built from its config, texts of varying length, the LM collator's padding) tuned through
its real Trainer.

1. ``search``: the study searches the new knobs (attention, checkpointing; length grouping and
   packing listed by the user) and reports tokens/s and the padding share of every trial.
2. ``grouping`` / ``packing``: every knob pinned to the user's own but one, searched over
   [false, true]: the confirmation's paired rounds measure its gain against the same
   configuration without it; packing also gets the numerics check's verdict.
3. ``memory``: a model whose activations dominate the process's memory, a memory limit that
   batch 32 exceeds without checkpointing: batch 16/32 x checkpointing off/on, the over-limit
   trial recorded, and the confirmed answer on whether checkpointing plus the bigger batch pays.

    python -m benchmarks.transformer_knobs [--only search,grouping,packing,memory] [--out DIR]
        [--collator lm|function]

Run from the repository's root.

``--collator function``: the Trainer's collator is a plain ``collate(features)`` function that
pads (examples/hf_lm.pad_collate) instead of transformers' LM collator; the padding is read
from its batches all the same.

Puts a section at the top of docs/benchmarks.md (machine, date, command, figures from the
studies' own records).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.record import command, prepend_section
from examples.hf_lm import users_trainer

#: The user's own setup, pinned where a study measures one knob against it.
PINNED = {"num_workers": 0, "cpu_threads": 2, "attention": "sdpa", "batch_size": 8,
          "activation_checkpointing": False, "optimizer_impl": "default",
          "host_allocator": "default", "amp": "off", "compile": "off", "set_to_none": True,
          "pad_to_multiple_of": None}
WINDOW = ["window.warmup_steps=2", "window.measure_steps=8", "window.measure_seconds=4",
          "window.min_measure_steps=4", "window.profile=false"]
#: Activations dominate: 4 layers at 256 tokens (samples of 192-256). The trials' peak memory
#: (12:41 UTC run, limit 1.2 GB): 0.64 GB at batch 16, 0.51 with checkpointing, 1.02 at batch
#: 32; so 0.85 GB keeps batch 32 out unless checkpointing brings it under. Pruning is off:
#: both arms are measured, not bounded by the compute ceiling.
MEMORY_MODEL = {"n": 128, "max_len": 256, "min_len": 192, "layers": 4, "hidden": 128,
                "batch_size": 16}
MEMORY_LIMIT_GB = 0.85


def studies() -> dict[str, dict[str, Any]]:
    lm = {"n": 512, "max_len": 256, "layers": 2, "hidden": 128}
    both = [False, True]
    return {
        "search": {"model": lm, "trials": 12,
                   "knobs": {"length_grouping": both, "padding_free": both}},
        "grouping": {"model": lm, "trials": 4,
                     "knobs": {**PINNED, "length_grouping": both, "padding_free": False}},
        "packing": {"model": lm, "trials": 4,
                    "knobs": {**PINNED, "padding_free": both, "length_grouping": False},
                    "extra": ["study.numerics_steps=5"]},
        "memory": {"model": MEMORY_MODEL, "trials": 8,
                   "knobs": {**PINNED, "batch_size": [16, 32], "activation_checkpointing": both,
                             "length_grouping": False, "padding_free": False},
                   "extra": [f"memory.limit_gb={MEMORY_LIMIT_GB}", "study.prune=false"]},
    }


def run(name: str, spec: dict[str, Any], out: Path, collator: str = "lm") -> dict[str, Any]:
    from autotune.adapters import hf
    from autotune.cli.api import CouldNotMeasure

    trainer = users_trainer(tempfile.mkdtemp(), **spec["model"], collator=collator)
    t0 = time.time()
    said = ""
    try:
        hf.tune(trainer, [*WINDOW, *spec.get("extra", [])], device="cpu",
                n_trials=spec["trials"], name=name, out_dir=out, knobs=spec["knobs"])
    except CouldNotMeasure as exc:
        said = str(exc)
    folder = out / name
    with open(folder / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    best = yaml.safe_load((folder / "best.yaml").read_text())
    return {"rows": rows, "best": best, "wall_s": time.time() - t0, "said": said}


def _f(x: Any, spec: str = ",.1f") -> str:
    try:
        return format(float(x), spec)
    except (TypeError, ValueError):
        return "-"


def table(rows: list[dict[str, Any]], knobs: list[str]) -> list[str]:
    head = ["trial", "source", "state", *knobs, "tokens/s (search)", "samples/s",
            "padding", "peak GB"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join([
            r["number"], r["source"], r["state"] if r["feasible"] != "False" else "over the limit",
            *[r.get(f"knob.{k}", "") for k in knobs], _f(r.get("tokens_per_sec")),
            _f(r.get("samples_per_sec")), _f(100 * float(r["padding_share"]), ".0f") + "%"
            if r.get("padding_share") else "-", _f(r.get("peak_memory_gb"), ".2f")]) + " |")
    return out


def section(results: dict[str, dict[str, Any]], command: str, collator: str = "lm") -> str:
    import torch
    import transformers

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    made_by = ("a plain function collator that pads" if collator == "function" else
               "DataCollatorForLanguageModeling")
    lines = [f"## Transformer training's own knobs and tokens/s ({made_by}; {now}, "
             f"{platform.processor() or platform.machine()}, 2 vCPUs, Python "
             f"{platform.python_version()}, torch {torch.__version__}, transformers "
             f"{transformers.__version__})", "", f"    {command}", ""]
    knobs = {"search": ["batch_size", "num_workers", "attention", "activation_checkpointing",
                        "length_grouping", "padding_free"],
             "grouping": ["length_grouping"], "packing": ["padding_free"],
             "memory": ["batch_size", "activation_checkpointing"]}
    for name, res in results.items():
        best = res["best"]
        lines += [f"### {name}", "", *table(res["rows"], knobs[name]), ""]
        lines.append(f"best.yaml: unit {best['metrics'].get('unit')}, speedup "
                     f"{best.get('speedup_text') or best.get('speedup')}, exported knobs "
                     + ", ".join(f"{k}={best['knobs'][k]}" for k in knobs[name])
                     + f"; wall time {res['wall_s']:.0f} s.")
        numerics = best.get("numerics") or {}
        if numerics:
            lines.append(f"numerics: {numerics}")
        if res["said"]:
            lines.append(f"The study said: {res['said']}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="search,grouping,packing,memory")
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()) / "studies")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--collator", choices=["lm", "function"], default="lm")
    a = ap.parse_args()
    wanted = a.only.split(",")
    results = {n: run(n, s, a.out, a.collator) for n, s in studies().items() if n in wanted}
    text = section(results, command("benchmarks.transformer_knobs"),
                   a.collator)
    print(text)
    if not a.no_write:
        prepend_section(text)


if __name__ == "__main__":
    main()
