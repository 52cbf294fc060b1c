"""Workloads for the launched trials' tests: real models shaped for what a test measures."""

from __future__ import annotations

from typing import Any

from torch import nn

from autotune.workloads.mlp import MLPWorkload


class AffinityWideMLP(MLPWorkload):
    """A wide MLP (3 layers of 1024: 3.2M parameters, 13 MB all-reduced a step) at a small
    batch: little compute for its gradient communication, so DDP's all-reduce is most of its
    step. Each rank writes the cores it may run on (its own ``sched_getaffinity``, read when
    its model is built, after the rank pinned itself) to ``<report_dir>/affinity.rank<N>``."""

    name = "affinity-wide-mlp"

    def __init__(self, report_dir: str = "", **kw: Any):
        super().__init__(**{"hidden": 1024, "depth": 3, "batch_size": 4, **kw})
        self.report_dir = report_dir

    def model(self) -> nn.Module:
        import os

        if self.report_dir:
            rank = os.environ.get("RANK", "0")
            with open(os.path.join(self.report_dir, f"affinity.rank{rank}"), "w") as f:
                f.write(",".join(map(str, sorted(os.sched_getaffinity(0)))))
        return super().model()
