"""The strategy benchmark's presets: a workload, a device, a stated reduced space (knob ->
values; one value pins it), the trial window and the budgets (see benchmarks/strategies.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.core.env import usable_cpus

__all__ = ["PRESETS", "Preset"]


@dataclasses.dataclass
class Preset:
    """A benchmark configuration: the workload, the reduced space (knob -> values; one value
    pins it), the trial window and budgets."""

    workload: dict[str, Any]
    device: str
    space: dict[str, list[Any]]
    window: dict[str, Any]  # window.* keys set; the others the schema's, sized for the device
    budget: int
    seeds: list[int]
    top: int = 5
    ab_rounds: int = 2
    long_factor: int = 10
    spread: int = 5  # fidelity also over this many configurations below the top (see strategies)
    fidelity_rounds: int = 2  # short/long pairs per configuration
    grid_rounds: int = 1  # windows of every grid point (the first is the one searchers see)
    note: str = ""


#: Knobs the CPU presets keep fixed; cpu_threads at the usable cores (torch's own default on
#: these machines), as every window ran before the knob existed, so the spaces stay comparable.
_PINNED_CPU: dict[str, list[Any]] = {"prefetch_factor": [2], "persistent_workers": [True],
                                     "set_to_none": [True], "optimizer_impl": ["default"],
                                     "host_allocator": ["default"], "cpu_threads": [usable_cpus()]}
PRESETS: dict[str, Preset] = {
    # Seconds: a 4-point space on an input-bound toy (10 ms sleeps per batch of 8), to check
    # the harness end to end. Not a benchmark.
    "smoke": Preset(
        workload={"_target_": "tests.workloads_diag.SleepyLoaderWorkload", "sleep_ms": 1.0},
        device="cpu", space={**_PINNED_CPU, "num_workers": [0, 2], "batch_size": [8, 16],
                             "amp": ["off"]},
        window={"warmup_steps": 2, "measure_steps": 8, "measure_seconds": 1.0,
                "min_measure_steps": 4, "min_measure_seconds": 0.3, "profile_steps": 2},
        budget=4, seeds=[0, 1], top=3, ab_rounds=1, long_factor=3, spread=1),
    # Under 25 minutes on a 2-core machine (see docs/benchmarks.md for the measured time):
    # ResNet-18 at 32 px, 48 configurations, each measured 3 times (one window can read far
    # low on a shared VM), autotune's CPU window, 12 trials x 5 seeds.
    "cpu": Preset(
        workload={"_target_": "autotune.workloads.resnet18.ResNet18Workload", "image_size": 32,
                  "n_images": 2048, "batch_size": 32},
        device="cpu",
        space={**_PINNED_CPU, "num_workers": [0, 2], "batch_size": [32, 64, 128],
               "transform_split": [1, 3], "amp": ["off", "bf16"],
               "channels_last": [False, True]},
        window={}, budget=12, seeds=[0, 1, 2, 3, 4], grid_rounds=3,
        ab_rounds=1, spread=3),
    # One H100/H200, est. under 20 minutes (not run yet): ResNet-18 at 224 px (the profiler tutorial's), 64
    # configurations. Workers 8/16, not 0: a window of the in-process PIL loader at 224 px
    # (the defaults row measures it) would take ~25 s of the budget per grid point.
    "gpu": Preset(
        workload={"_target_": "autotune.workloads.resnet18.ResNet18Workload", "image_size": 224,
                  "n_images": 10000, "batch_size": 32},
        device="cuda",
        space={"num_workers": [8, 16], "prefetch_factor": [2], "persistent_workers": [True],
               "pin_memory": [False, True], "non_blocking": [True], "batch_size": [32, 256],
               "transform_split": [1, 3], "amp": ["off", "bf16"],
               "compile": ["off"], "cuda_graphs": [False], "channels_last": [False, True],
               "set_to_none": [True], "optimizer_impl": ["default"], "tf32": [True],
               "cudnn_benchmark": [True], "expandable_segments": [False]},
        window={"warmup_steps": 10, "measure_steps": 40, "measure_seconds": 5.0},
        budget=16, seeds=[0, 1, 2, 3, 4],
        note="compile is searched by no strategy here (a cold compile costs ~1 min a window); "
             "the recipe alone compiles"),
    # One H100/H200, est. under 20 minutes (not run yet): the GPT workload, 64 configurations.
    "gpu-gpt": Preset(
        workload={"_target_": "autotune.workloads.gpt.GPTWorkload"}, device="cuda",
        space={"num_workers": [0, 4], "prefetch_factor": [2], "persistent_workers": [True],
               "pin_memory": [False, True], "non_blocking": [True], "batch_size": [16, 32, 64, 128],
               "transfer_dtype": ["float32"], "amp": ["off", "bf16"], "compile": ["off"],
               "cuda_graphs": [False], "set_to_none": [True],
               "optimizer_impl": ["default", "fused"], "tf32": [True], "cudnn_benchmark": [False],
               "expandable_segments": [False], "attention": ["sdpa"],
               "activation_checkpointing": [False]},
        window={"warmup_steps": 10, "measure_steps": 40, "measure_seconds": 5.0},
        budget=16, seeds=[0, 1, 2, 3, 4],
        note="compile is searched by no strategy here; the recipe alone compiles"),
}
