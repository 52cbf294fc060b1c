"""A trial's window of an accumulating run spans whole accumulation cycles (issue 70 item 4):
the warm-up takes at least one cycle (its optimizer step, which allocates the optimizer's
state, is not timed) and ends on a cycle's edge, and the measured steps end on one, so each
cycle's optimizer step is counted once per ``grad_accum`` micro-batches, never a share more
or less. In process, on the trials' own warm-up and measured loop."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autotune.core.config import WindowConfig
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.measure.batches import Batches
from autotune.measure.clock import Clock
from autotune.measure.contention import snapshot
from autotune.measure.loop import measured_loop
from autotune.measure.protocol import WindowResult
from autotune.measure.readings import Progress
from autotune.measure.window import warm_up
from autotune.workloads.mlp import MLPWorkload


@pytest.mark.parametrize("accum", [1, 3, 4])
def test_the_window_spans_whole_accumulation_cycles(cpu_env: Env, accum: int) -> None:
    workload = MLPWorkload()
    knobs: dict[str, Any] = {**build_space(cpu_env, workload, {}).baseline, "num_workers": 0}
    run = Training(workload, knobs, "cpu", grad_accum=accum)
    stepped = []
    step = run.optimizer.step

    def counted(*args: Any, **kwargs: Any) -> Any:
        stepped.append(len(stepped))
        return step(*args, **kwargs)

    run.optimizer.step = counted  # type: ignore[method-assign]
    batches, clock = Batches(run), Clock(torch.device("cpu"))
    # Windows whose step counts are no multiple of the cycle: 1 warm-up step, 5 measured.
    win = WindowConfig(warmup_steps=1, measure_steps=5, min_measure_steps=5,
                       measure_seconds=0.01, min_measure_seconds=0.0, profile=False)
    warm_up(run, batches, clock, win, Progress(None), WindowResult())
    assert run.at_cycle_edge and len(stepped) >= 1  # a whole cycle and its optimizer step
    warm = len(stepped)
    loop = measured_loop(run, batches, clock, win, Progress(None),
                         int(knobs["batch_size"]), snapshot())
    assert len(loop.marks) >= 5 and len(loop.marks) % accum == 0, len(loop.marks)
    assert len(stepped) - warm == len(loop.marks) // accum and run.at_cycle_edge
