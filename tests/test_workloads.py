"""One contract test over every shipped workload: it builds, trains a step with every knob that
applies on the CPU, its loss is finite, and its CPU-sized copy is smaller and still works."""

from __future__ import annotations

import pytest
import torch

from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.core.workload import Workload, WorkloadError, build_workload, workload_name

SHIPPED = {
    "mlp": {"_target_": "autotune.workloads.mlp.MLPWorkload", "n_samples": 128},
    "resnet18": {"_target_": "autotune.workloads.resnet18.ResNet18Workload", "image_size": 32, "n_images": 64,
                 "batch_size": 8},
    "gpt": {"_target_": "autotune.workloads.gpt.GPTWorkload", "vocab": 256, "seq_len": 32, "d_model": 64,
            "n_layer": 2, "n_head": 4, "n_sequences": 64, "batch_size": 4},
    "jpeg_folder": {"_target_": "autotune.workloads.jpeg_folder.JPEGFolderWorkload", "image_size": 32,
                    "n_images": 16, "batch_size": 4},
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_workload_contract(cpu_env: Env, name: str) -> None:
    wl = build_workload(SHIPPED[name])
    assert isinstance(wl, Workload) and workload_name(SHIPPED[name]) == name
    assert "batch_size" in wl.defaults
    space = build_space(cpu_env, wl, {})
    # The baseline and a configuration with every CPU-valid knob switched on both train.
    on = {**space.baseline, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": True,
          "set_to_none": False, "optimizer_impl": "foreach",
          "transfer_dtype": space.domains["transfer_dtype"].values[-1],
          "transform_split": space.domains["transform_split"].values[0],
          "channels_last": space.domains["channels_last"].values[-1]}
    for knobs in (space.baseline, on):
        run = Training(wl, knobs, "cpu")
        batches = iter(run.loader)
        losses = [run.step(*run.to_device(*next(batches))) for _ in range(2)]
        assert all(torch.isfinite(loss) for loss in losses), (name, knobs)


@pytest.mark.parametrize("name", ["resnet18", "gpt"])
def test_cpu_sized_copy_is_smaller(name: str) -> None:
    spec = {k: v for k, v in SHIPPED[name].items() if k in ("_target_",)}
    wl = build_workload(spec)
    small = wl.cpu_sized()
    assert small is not wl and small.describe() != wl.describe()
    assert sum(p.numel() for p in small.model().parameters()) <= sum(
        p.numel() for p in wl.model().parameters())


def test_gpt_rejects_bad_heads() -> None:
    with pytest.raises(WorkloadError, match="divisible"):
        build_workload({"_target_": "autotune.workloads.gpt.GPTWorkload", "d_model": 100, "n_head": 3})
