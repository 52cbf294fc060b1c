"""Fine-tuning a language model as teams run it, through ``hf.tune``: a small Llama saved with
``save_pretrained`` and loaded back by path, LoRA adapters from PEFT,
TRL's ``SFTTrainer`` with ``per_device_train_batch_size=4, gradient_accumulation_steps=4``
(examples/hf_sft_lora.py).

1. ``ship``: what sending the Trainer's model to the trials costs the user's process, each
   way in a fresh process of its own (its peak memory reset after the Trainer is built: Linux's
   ``/proc/self/clear_refs``): the whole model pickled as autotune did at eea20d3 (cloudpickle,
   the bytes joined into one payload), by value now (``ship_weights=True``: a safetensors file
   written one tensor at a time), and as its recipe. Bytes written and the peak RSS above the
   RSS before shipping.
2. ``study``: ``hf.tune(sft_trainer)``: tokens/s, both answers' global batch (best.yaml and
   best-same-training.yaml, training_args.yaml's micro-batch x accumulation), the study's
   folder (``studies/NAME`` and ``studies/.shipped``) against the model's, the user process's
   peak RSS during ``hf.tune``; then ``tuned.apply(trainer)`` and ``train()``.
3. ``adafactor``: the same SFTTrainer with ``optim="adafactor"``: what the study kept (the
   header's lines on the optimizer, training_args.yaml's ``optim``).
4. ``verify``: ``autotune verify`` on the study: the user's own ``SFTTrainer.train`` with and
   without the export, the realized speedup as a share of the study's.

    python -m benchmarks.finetune [--only ship,study,adafactor,verify] [--trials 8]
        [--hidden 256 --layers 4 --vocab 8192] [--rounds 5] [--out DIR] [--record]
    python -m benchmarks.finetune --smoke        # tiny settings: checks that it runs

Run from the repository's root, on an idle machine. ``--record`` puts the section at the top of
docs/benchmarks.md (machine, date, command, figures from the studies' own files).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.record import command, publish

#: Short windows for --smoke (the test suite's TINY_ARGS and a short confirmation).
SMOKE_WINDOW = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
                "window.min_measure_steps=2", "window.min_measure_seconds=1",
                "window.profile=false", "study.confirm_budget_s=20", "study.numerics_steps=0"]
SHIP_WAYS = ("pickle (as at eea20d3)", "by value (ship_weights=True)", "recipe")


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def _tree_bytes(path: Path, suffixes: tuple[str, ...] = ()) -> int:
    """Bytes of the files under ``path`` (only those ending in ``suffixes`` where given)."""
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*")
               if p.is_file() and (not suffixes or p.suffix in suffixes))


#: What a copy of a model's weights is written as (shipping writes tensors as safetensors; the
#: rest as torch and transformers save them): the study folder holds profiler traces and the
#: report too, and .shipped the pickled parts (the dataset, the tokenizer, the arguments), so
#: neither size alone says whether the weights are in it.
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM), where Linux allows it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss() -> dict[str, int]:
    """This process's RSS and peak RSS (VmRSS, VmHWM), in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    if "VmHWM" not in out:  # not Linux: the process's peak since it started
        out["VmHWM"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def _pickle_as_before(parts: dict[str, Any], folder: Path) -> Path:
    """autotune/core/shipping.ship as it was at eea20d3: each part cloudpickled (the model with
    its weights), the bytes joined into one payload, written."""
    import cloudpickle

    blobs = {key: cloudpickle.dumps(value) for key, value in parts.items()}
    payload = cloudpickle.dumps(blobs)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha1(payload).hexdigest()[:16]}.pkl"
    path.write_bytes(payload)
    return path


def probe(way: str, model_dir: str, folder: Path) -> dict[str, Any]:
    """One way of shipping, in this (fresh) process: the bytes written and the peak RSS above
    the RSS before it."""
    from autotune.adapters import hf
    from examples.hf_sft_lora import users_sft_trainer

    trainer = users_sft_trainer(model_dir, str(folder / "out"))
    import gc

    gc.collect()
    reset = _reset_peak()
    before = _rss()["VmRSS"]
    t0 = time.perf_counter()
    shipped = folder / "shipped"
    with contextlib.redirect_stdout(io.StringIO()) as said:
        if way.startswith("pickle"):
            _pickle_as_before(hf.trainer_parts(trainer, ship_weights=True).parts, shipped)
        else:
            hf.trainer_parts(trainer, ship_weights=way.startswith("by value")).spec(shipped)
    seconds = time.perf_counter() - t0
    peak = _rss()["VmHWM"]
    return {"way": way, "bytes": _tree_bytes(shipped), "peak_above": peak - before,
            "rss_before": before, "seconds": seconds, "peak_reset": reset,
            "said": said.getvalue().strip()}


def ship_section(model_dir: str, out: Path) -> list[dict[str, Any]]:
    """Each way in a fresh process (``--probe``): one process's peak says nothing of another's."""
    rows = []
    for i, way in enumerate(SHIP_WAYS):
        folder = out / f"probe-{i}"
        proc = subprocess.run([sys.executable, "-m", "benchmarks.finetune", "--probe", way,
                               "--model-dir", model_dir, "--out", str(folder)],
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode:
            raise SystemExit(f"probe {way!r} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


class _Tee(io.TextIOBase):
    """stdout to the terminal and to a buffer (the study's header, read afterwards)."""

    def __init__(self, out: Any):
        self.out, self.buffer_ = out, io.StringIO()

    def write(self, text: str) -> int:
        self.buffer_.write(text)
        return int(self.out.write(text))

    def flush(self) -> None:
        self.out.flush()


def study(name: str, model_dir: str, out: Path, trials: int, extra: list[str],
          train_steps: int, **sft: Any) -> dict[str, Any]:
    """``hf.tune`` on the user's SFTTrainer, then apply and train: what the section reports."""
    import autotune
    from autotune.adapters import hf
    from examples.hf_sft_lora import users_sft_trainer

    trainer = users_sft_trainer(model_dir, str(out / f"{name}-out"), n=1024, max_length=128, **sft)
    _reset_peak()
    before = _rss()["VmRSS"]
    t0 = time.time()
    tee = _Tee(sys.stdout)
    said = ""
    with contextlib.redirect_stdout(tee):
        try:
            tuned = hf.tune(trainer, extra, device="cpu", n_trials=trials, name=name,
                            out_dir=out / "studies")
        except autotune.CouldNotMeasure as exc:
            tuned, said = exc.tuned, str(exc)
    wall = time.time() - t0
    peak = _rss()["VmHWM"]
    folder = out / "studies" / name
    answers = {}
    for file in ("best.yaml", "best-same-training.yaml"):
        if (folder / file).exists():
            doc = yaml.safe_load((folder / file).read_text())
            args_file = folder / file.replace("best", "training_args", 1)
            fields = yaml.safe_load(args_file.read_text()) if args_file.exists() else {}
            answers[file] = {"doc": doc, "fields": fields}
    same = tuned.same_training()
    applied = hf.apply(trainer, same) if same is not None else trainer
    applied.args.max_steps = train_steps
    trained = applied.train().global_step
    return {"name": name, "answers": answers, "wall_s": wall, "said": said,
            "peak": peak, "rss_before": before,
            "study_bytes": _tree_bytes(folder), "shipped_bytes": _tree_bytes(out / "studies" / ".shipped"),
            "weight_bytes": _tree_bytes(folder, WEIGHT_FILES)
            + _tree_bytes(out / "studies" / ".shipped", WEIGHT_FILES),
            "header": [line for line in tee.buffer_.getvalue().splitlines()
                       if "optim" in line or "travels" in line],
            "trained_steps": trained, "applied": "best-same-training" if same is not None and
            same is not tuned.best else "best.yaml" if same is not None else "nothing (yours)"}


def _global(entry: dict[str, Any]) -> str:
    doc, fields = entry["doc"], entry["fields"]
    micro = fields.get("per_device_train_batch_size", doc["knobs"].get("batch_size"))
    accum = fields.get("gradient_accumulation_steps", doc.get("grad_accum", 1))
    return (f"{micro} x {accum} = {int(micro) * int(accum)} (best.yaml global_batch "
            f"{doc.get('global_batch', '-')})")


def section(a: argparse.Namespace, model_bytes: int, probes: list[dict[str, Any]],
            studies: list[dict[str, Any]], verified: dict[str, Any] | None) -> list[str]:
    import peft
    import torch
    import transformers
    import trl

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"## Fine-tuning a language model through hf.tune: SFTTrainer, LoRA, accumulation "
             f"({now}, {platform.node()}, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch "
             f"{torch.__version__}, transformers {transformers.__version__}, TRL "
             f"{trl.__version__}, PEFT {peft.__version__})", "", "```bash",
             command("benchmarks.finetune"), "```", "",
             f"A Llama of hidden {a.hidden}, {a.layers} layers, vocabulary {a.vocab}, saved with "
             f"save_pretrained ({_mb(model_bytes)} on disk) and loaded back by path; LoRA r=8 on "
             "q_proj and v_proj; SFTTrainer, per_device_train_batch_size=4, "
             "gradient_accumulation_steps=4 (global batch 16).", ""]
    if probes:
        lines += ["| sending the model to the trials | bytes written | peak RSS above the RSS "
                  "before | seconds |", "|---|---|---|---|"]
        lines += [f"| {p['way']} | {_mb(p['bytes'])} | {_mb(p['peak_above'])} | "
                  f"{p['seconds']:.2f} |" for p in probes]
        if not all(p["peak_reset"] for p in probes):
            lines.append("(this kernel would not reset the peak RSS: peaks are since the "
                         "process started)")
        lines.append("")
    for s in studies:
        lines += [f"### {s['name']}", ""]
        for file, entry in s["answers"].items():
            metrics = entry["doc"].get("metrics") or {}
            lines.append(f"- {file}: {metrics.get('unit')} "
                         f"{metrics.get('tokens_per_sec') or metrics.get('samples_per_sec')}, "
                         f"speedup {entry['doc'].get('speedup_text')}; global batch "
                         f"{_global(entry)}; optim {entry['fields'].get('optim')}")
        best = s["answers"].get("best.yaml", {}).get("doc", {})
        lines += [f"- both answers: {(best.get('training') or {}).get('words')}",
                  f"- study folder {_mb(s['study_bytes'])}, studies/.shipped "
                  f"{_mb(s['shipped_bytes'])}, against the model's {_mb(model_bytes)}; of "
                  f"them weight files ({', '.join(WEIGHT_FILES)}) "
                  f"{_mb(s.get('weight_bytes', 0))} (the rest: profiler traces, report.html, the pickled dataset and "
                  f"arguments)",
                  f"- the user process's peak RSS during hf.tune: {_mb(s['peak'])} "
                  f"({_mb(s['peak'] - s['rss_before'])} above the RSS before it)",
                  f"- applied {s['applied']}, then train(): {s['trained_steps']} optimizer "
                  f"steps; wall time of the study {s['wall_s']:.0f} s"]
        lines += [f"- the study said: `{line.strip()}`" for line in s["header"]]
        if s["said"]:
            lines.append(f"- {s['said']}")
        lines.append("")
    if verified:
        ratio = verified["ratio"]
        lines += ["### autotune verify on the SFTTrainer", "", f"- {verified['text']}",
                  f"- realized / study: {'-' if ratio is None else f'{ratio:.2f}'} "
                  f"({a.rounds} rounds)", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="ship,study,adafactor,verify")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--train-steps", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny settings: checks that it runs")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = a.out or Path(tempfile.mkdtemp(prefix="finetune-bench-"))
    if a.probe:
        print(json.dumps(probe(a.probe, a.model_dir, out)))
        return
    if a.smoke:
        a.trials, a.hidden, a.layers, a.vocab, a.rounds, a.train_steps = 2, 64, 2, 256, 1, 1
    window = SMOKE_WINDOW if a.smoke else []
    from examples.hf_sft_lora import save_llama

    model_dir = save_llama(out / "llama", a.hidden, a.layers, a.vocab)
    model_bytes = _tree_bytes(Path(model_dir))
    wanted = a.only.split(",")
    probes = ship_section(model_dir, out) if "ship" in wanted else []
    studies = []
    if "study" in wanted or "verify" in wanted:
        studies.append(study("sft-lora", model_dir, out, a.trials, window, a.train_steps))
    if "adafactor" in wanted:
        studies.append(study("sft-lora-adafactor", model_dir, out, a.trials, window,
                             a.train_steps, optim="adafactor"))
    verified = None
    if "verify" in wanted:
        import autotune

        steps = {"steps": 3, "warmup": 1} if a.smoke else {}
        result = autotune.verify(out / "studies" / "sft-lora", rounds=a.rounds, **steps)
        verified = {"text": result.text(), "ratio": result.ratio}
    publish(section(a, model_bytes, probes, studies, verified), a.record and not a.smoke)


if __name__ == "__main__":
    main()
