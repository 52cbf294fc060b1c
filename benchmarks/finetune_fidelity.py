"""The fine-tuning set-up as the user wrote it reaches the study, through
``hf.tune`` on one Trainer that holds all three: a model whose checkpointing was switched on on
the model object (``model.gradient_checkpointing_enable()``, as PEFT's
``prepare_model_for_kbit_training`` does) while its arguments say
``gradient_checkpointing=False``; the Trainer's own optimizer
(``Trainer(optimizers=(SGD(...), None))``); and a global batch of 6 x 4 = 24
(``per_device_train_batch_size=6, gradient_accumulation_steps=4``).

The section says, from the study's own files: the batch domain the study searched (the
divisors of 24 beside other values, in the header's words), the baseline's checkpointing and
optimizer class as its trial built them, the trials measured without checkpointing and their
figures, what each answer (best.yaml, best-same-training.yaml) keeps (global batch,
checkpointing, the learning-rate rule it states), and what ``tuned.apply(trainer)`` leaves on
the Trainer (its SGD, in place).

    python -m benchmarks.finetune_fidelity [--trials 10] [--out DIR] [--record]

Run from the repository's root, on an idle machine (a GPT-2 of 4 layers of 128 from its
config, on the CPU: nothing is downloaded).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import torch
import yaml

from benchmarks.record import command, publish

GPT2 = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 2048, "n_positions": 128,
        "bos_token_id": 0, "eos_token_id": 0}
SEQ_LEN, N_SEQUENCES = 128, 960
WINDOW = ["window.warmup_steps=4", "window.measure_steps=24", "window.measure_seconds=6",
          "study.confirm_budget_s=90", "study.numerics_steps=8"]


def build_trainer(out: Path) -> Any:
    import transformers

    from examples.hf_tune import tokens

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2))
    model.gradient_checkpointing_enable()  # on the model object, not in the arguments
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=6, gradient_accumulation_steps=4,
        gradient_checkpointing=False, use_cpu=True, report_to="none", max_steps=10)
    return transformers.Trainer(model=model, args=args, optimizers=(sgd, None),
                                train_dataset=tokens(n=N_SEQUENCES, seq_len=SEQ_LEN,
                                                     vocab_size=GPT2["vocab_size"]),
                                data_collator=transformers.default_data_collator)


def batch_domain(trainer: Any, shipped: Path) -> list[int]:
    """The batch_size values a trial of this Trainer may take, as the study's space builds
    them (core/space.py) from the workload a trial builds."""
    from autotune.adapters import hf
    from autotune.core.env import probe
    from autotune.core.space import build_space
    from autotune.core.workload import build_workload

    wl = build_workload(hf.trainer_parts(trainer).spec(shipped))
    return sorted(int(v) for v in build_space(probe("cpu"), wl, {}).domains["batch_size"].values)


def _trials(folder: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{folder / 'study.db'}")
    return study.get_trials(deepcopy=False)


def _accumulation(micro: int, global_batch: int) -> str:
    """A micro-batch's accumulation steps: to the global batch where it divides it; any other
    micro-batch is a global batch of its own (core/global_batch.py)."""
    return str(global_batch // micro) if global_batch % micro == 0 else "1 (its own)"


def _row(t: optuna.trial.FrozenTrial, base_figure: float | None, global_batch: int) -> str:
    a = t.user_attrs
    k = a.get("knobs") or {}
    figure = t.value if t.value is not None else None
    shown = f"{figure:,.1f}" if figure else a.get("outcome", t.state.name.lower())
    x = f"{figure / base_figure:.2f}x" if figure and base_figure else ""
    micro = int(k.get("batch_size") or 0)
    return (f"| {t.number} | {a.get('source', '')} | {micro} x "
            f"{_accumulation(micro, global_batch)} | {k.get('activation_checkpointing')} | "
            f"{a.get('optimizer', '')} | {shown} | {x} |")


def _answer(path: Path) -> list[str]:
    if not path.exists():
        return [f"- `{path.name}`: not written (best.yaml's answer already trains the same "
                "model as yours, so it is both answers)."]
    doc = yaml.safe_load(path.read_text())
    k, this = doc["knobs"], (doc.get("training") or {}).get("this") or {}
    return [f"- `{path.name}`: trial {doc.get('best_trial')}, {doc.get('speedup_text')}; "
            f"micro-batch {k.get('batch_size')} x accumulation {doc.get('grad_accum')} = global "
            f"{doc.get('global_batch')}; "
            f"activation_checkpointing {k.get('activation_checkpointing')}; "
            f"changes: {this.get('changes') or 'none'}; learning rate: "
            f"{this.get('learning_rate') or 'unchanged (the global batch is kept)'}"]


def main() -> None:
    from autotune.adapters import hf

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--record", action="store_true")
    a = p.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="ft-fidelity-"))
    trainer = build_trainer(out / "trainer")
    sgd = trainer.optimizer
    domain = batch_domain(trainer, out / "space")
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    name = "fidelity"
    tuned = hf.tune(trainer, [*WINDOW, f"study.out_dir={out / 'studies'}"], device="cpu",
                    n_trials=a.trials, name=name)
    wall = time.monotonic() - t0
    folder = out / "studies" / name
    trials = _trials(folder, name)
    base = next(t for t in trials if t.user_attrs.get("source") == "baseline")
    header = [ln.strip() for ln in (folder / "autotune.log").read_text().splitlines()
              if "global batch:" in ln][:1]
    tuned.apply(trainer)
    kept = trainer.optimizer is sgd
    lines = [
        f"## The fine-tuning set-up as written reaches the study: checkpointing on the model, "
        f"the Trainer's SGD, 6 x 4 ({started:%Y-%m-%d %H:%M} UTC)",
        "",
        f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, CPU, "
        f"torch {torch.__version__}; idle. Command: `{command('benchmarks.finetune_fidelity')}` "
        f"({wall / 60:.1f} min). A GPT-2 of {GPT2['n_layer']} layers of {GPT2['n_embd']} built "
        f"from its config, {N_SEQUENCES} sequences of {SEQ_LEN} tokens; the Trainer: "
        "`model.gradient_checkpointing_enable()` with `gradient_checkpointing=False` in its "
        "arguments, `optimizers=(SGD(lr=0.05, momentum=0.9), None)`, "
        "`per_device_train_batch_size=6, gradient_accumulation_steps=4`.",
        "",
        f"The batch_size domain the study searched: {domain} (the divisors of 24 keep the "
        "global batch); the study's log says:",
        "",
        *[f"> {h}" for h in header],
        "",
        "| trial | source | micro-batch x accumulation | checkpointing | optimizer built | "
        "tokens/s | x baseline |",
        "|---:|---|---|---|---|---:|---:|",
        *[_row(t, base.value, 24) for t in trials],
        "",
        *_answer(folder / "best.yaml"),
        *_answer(folder / "best-same-training.yaml"),
        f"- `tuned.apply(trainer)`: the Trainer's optimizer is {'the same SGD instance' if kept else type(trainer.optimizer).__name__}"
        f" (foreach={trainer.optimizer.defaults.get('foreach')}); "
        f"`args.gradient_checkpointing` = {trainer.args.gradient_checkpointing}.",
    ]
    publish(lines, a.record)


if __name__ == "__main__":
    main()
