"""The study of the tutorial's GPT (docs/guide/nanogpt.md): the model, data, optimizer and
per-step work of ``train.py`` as an ``autotune.Workload``, and the command that tunes it.

    python examples/nanogpt/workload.py [OVERRIDE ...]       # studies/nanogpt/best.yaml

``--quick``: windows of a few steps, two trials and compile left off, for a smoke test only
(the test suite's, tests/test_nanogpt_tutorial.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
from model import GPT, GPTConfig
from prepare import prepare
from torch import nn
from torch.utils.data import Dataset

import autotune


# --8<-- [start:workload]
class Slices(Dataset):
    """Each window of ``block_size`` tokens of a memmap and the same window one token on: a
    shuffled loader draws random slices, as train.py's ``get_batch`` does."""

    def __init__(self, path: Path, block_size: int):
        self.path, self.block_size = str(path), block_size
        self.n = len(np.memmap(self.path, dtype=np.uint16, mode="r")) - block_size
        self.data: Any = None  # opened in the process that reads it (a trial's)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.data is None:
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        chunk = torch.from_numpy(self.data[i:i + self.block_size + 1].astype(np.int64))
        return {"idx": chunk[:-1], "targets": chunk[1:]}  # called as model(idx=, targets=)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "data": None}  # a trial opens its own memmap


class NanoGPTWorkload(autotune.Workload):
    name = "nanogpt"
    # The model calls scaled_dot_product_attention itself: SDPA's backend becomes a knob,
    # which train.py's ctx = rt.autocast() applies.
    attention_choices = ("sdpa",)
    # get_batch makes each batch in the training loop's own process: no DataLoader workers.
    knob_limits = {"num_workers": ([0], "train.py's get_batch makes each batch in the "
                                   "training loop's process, as no DataLoader worker")}
    # train.py's grad_clip: the trials clip after unscaling, before each optimizer step.
    max_grad_norm = 1.0

    def __init__(self, batch_size: int = 16, block_size: int = 64):
        self.block_size = block_size
        self.defaults = {"batch_size": batch_size, "num_workers": 0}  # train_original.py's
        self.data = prepare().resolve()

    def dataset(self, transfer_dtype: str) -> Slices:
        return Slices(self.data / "train.bin", self.block_size)

    def model(self) -> nn.Module:
        return GPT(GPTConfig(block_size=self.block_size))

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return outputs[1]  # GPT(idx, targets) returns (logits, loss)

    def optimizer(self, params: Any, model: GPT, **impl: Any) -> torch.optim.Optimizer:
        # The model builds its optimizer (two parameter groups); **impl goes into every group.
        device_type = next(model.parameters()).device.type
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), device_type)
        return autotune.apply_optimizer_impl(opt, **impl)
# --8<-- [end:workload]


def main() -> None:
    ap = argparse.ArgumentParser(description="tune the tutorial's GPT")
    ap.add_argument("--quick", action="store_true", help="tiny windows, 2 trials: a smoke test")
    ap.add_argument("overrides", nargs="*", help="autotune overrides, e.g. study.n_trials=8")
    a = ap.parse_args()
    overrides = ["study.name=nanogpt", *a.overrides]
    if a.quick:  # a smoke test's windows: for a real study, leave these out
        overrides += ["study.n_trials=2", "knobs.compile=off", "window.warmup_steps=2",
                      "window.measure_steps=6", "window.measure_seconds=2",
                      "window.min_measure_steps=2", "window.min_measure_seconds=1",
                      "window.profile=false", "study.confirm_budget_s=0"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        best = autotune.tune(overrides, workload=NanoGPTWorkload(), device=device)
    except autotune.CouldNotMeasure as exc:  # a busy machine: best.yaml keeps what is sure
        print(exc)
        best = exc.best
    print(best.document["speedup_text"], "-> studies/nanogpt/best.yaml")


if __name__ == "__main__":
    main()
