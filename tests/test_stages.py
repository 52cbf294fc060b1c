"""Input pipelines in stages: the transform_split knob moves the tail of a workload's input
pipeline from the loader (per sample) to the device (per batch, after the copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

from autotune.core.env import Env
from autotune.core.knobs import KnobError
from autotune.core.space import build_space
from autotune.core.stages import Stage
from autotune.core.training import Training
from autotune.core.workload import Workload
from autotune.diagnose.verdicts import diagnose
from autotune.search.loop.agent import candidate
from autotune.workloads.jpeg_folder import JPEGFolderWorkload, write_random_jpegs
from autotune.workloads.mlp import MLPWorkload
from autotune.workloads.resnet18 import ResNet18Workload

SIZE = 48
# The device resize (torchvision, bilinear, antialias) against the host's PIL bilinear resize:
# they agree to within one grey level (of 255) per pixel, i.e. 2/255 after Normalize(0.5, 0.5).
RESIZE_ATOL = 2 / 255 + 1e-6


def small_resnet(image_size: int = SIZE) -> ResNet18Workload:
    return ResNet18Workload(image_size=image_size, n_images=32, batch_size=8)


def knobs(env: Env, wl: Workload, **pins: Any) -> dict[str, Any]:
    return {**build_space(env, wl, {}).baseline, **pins}


def first_batch(env: Env, wl: Workload, split: int, device: str = "cpu") -> tuple[Any, Any]:
    """The loader's first batch (what reaches the copy) and the model's input after prepare."""
    run = Training(wl, knobs(env, wl, transform_split=split), device)
    inputs, targets = next(iter(run.loader))
    moved, _ = run.to_device(inputs, targets)
    return inputs, run.prepare(moved)


def test_resnet18_declares_its_split_points_all_host_is_the_baseline(cpu_env: Env) -> None:
    wl = small_resnet()
    space = build_space(cpu_env, wl, {})
    assert space.domains["transform_split"].values == [0, 1, 2, 3]
    assert space.baseline["transform_split"] == 3  # the tutorial: every transform on the host
    assert space.domains["transfer_dtype"].values == ["float32"]  # superseded by the stages


@pytest.mark.parametrize("image_size", [SIZE, 24])  # upsampling, and downsampling (antialias)
@pytest.mark.parametrize("split", [0, 1, 2])
def test_every_split_gives_the_all_host_tensors(cpu_env: Env, split: int, image_size: int) -> None:
    wl = small_resnet(image_size)
    _, host = first_batch(cpu_env, wl, 3)
    _, mixed = first_batch(cpu_env, wl, split)
    assert mixed.dtype == host.dtype == torch.float32 and mixed.shape == host.shape
    atol = RESIZE_ATOL if split == 0 else 1e-6  # only the resize differs, and only a little
    torch.testing.assert_close(mixed, host, atol=atol, rtol=0)


@pytest.mark.parametrize("split,dtype,side", [(0, torch.uint8, 32), (1, torch.uint8, SIZE),
                                              (2, torch.float32, SIZE), (3, torch.float32, SIZE)])
def test_the_loader_yields_the_host_part_output(cpu_env: Env, split: int, dtype: torch.dtype,
                                                side: int) -> None:
    """What reaches the copy is the output of the first ``split`` stages: at 0 the raw 32x32
    uint8 images cross, resized only on the device."""
    loaded, prepared = first_batch(cpu_env, small_resnet(), split)
    assert loaded.dtype == dtype and tuple(loaded.shape) == (8, 3, side, side)
    assert prepared.dtype == torch.float32 and tuple(prepared.shape) == (8, 3, SIZE, SIZE)


def test_a_training_step_runs_at_every_split_with_workers(cpu_env: Env) -> None:
    wl = small_resnet(32)
    for split in (0, 3):
        run = Training(wl, knobs(cpu_env, wl, transform_split=split, num_workers=1,
                                 prefetch_factor=2, channels_last=True), "cpu")
        loss = run.step(*run.to_device(*next(iter(run.loader))))
        assert torch.isfinite(loss)


class _AugmentedInTheMiddle(Workload):
    """A host-only random augmentation (no batched version) before two batched stages."""

    def model(self) -> torch.nn.Module:
        return torch.nn.Linear(4, 2)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1, **impl)

    def raw_dataset(self) -> TensorDataset:
        return TensorDataset(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long))

    def stages(self) -> list[Stage]:
        return [Stage("decode", lambda x: x, lambda b: b),
                Stage("jitter", lambda x: x + torch.rand_like(x)),  # per sample, host only
                Stage("scale", lambda x: x * 2, lambda b: b * 2),
                Stage("shift", lambda x: x - 1, lambda b: b - 1)]


def test_host_only_stages_stay_on_the_host_and_bad_splits_name_the_valid_ones(cpu_env: Env) -> None:
    wl = _AugmentedInTheMiddle()
    space = build_space(cpu_env, wl, {})
    assert space.domains["transform_split"].values == [2, 3, 4]
    assert space.baseline["transform_split"] == 4
    with pytest.raises(KnobError, match=r"transform_split=1 .*not in \[2, 3, 4\]"):
        build_space(cpu_env, wl, {"transform_split": 1})
    with pytest.raises(ValueError, match=r"\[decode, jitter, scale, shift\].*one of \[2, 3, 4\]"):
        Training(wl, {**space.baseline, "transform_split": 0}, "cpu")


class _TwoWaySplit(Workload):
    """The older contract: splits_transform + dataset(transfer_dtype) + device_transform."""

    splits_transform = True

    def dataset(self, transfer_dtype: str) -> TensorDataset:
        raw = torch.arange(32 * 4, dtype=torch.uint8).view(32, 4)
        inputs = raw if transfer_dtype == "uint8" else raw.float() / 255.0
        return TensorDataset(inputs, torch.zeros(32, dtype=torch.long))

    def device_transform(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.float() / 255.0

    def model(self) -> torch.nn.Module:
        return torch.nn.Linear(4, 2)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1, **impl)


def test_the_two_way_split_contract_still_works(cpu_env: Env) -> None:
    wl = _TwoWaySplit()
    space = build_space(cpu_env, wl, {})
    assert space.domains["transfer_dtype"].values == ["float32", "uint8"]
    assert space.domains["transform_split"].values == [0]
    out = {}
    for dtype in ("uint8", "float32"):
        run = Training(wl, {**space.baseline, "batch_size": 8, "transfer_dtype": dtype}, "cpu")
        inputs, targets = next(iter(run.loader))
        assert inputs.dtype == getattr(torch, dtype)
        out[dtype] = run.prepare(run.to_device(inputs, targets)[0])
    torch.testing.assert_close(out["uint8"], out["float32"])


def test_a_workload_without_stages_has_the_knob_fixed_with_a_reason(cpu_env: Env) -> None:
    dom = build_space(cpu_env, MLPWorkload(n_samples=64), {}).domains["transform_split"]
    assert dom.values == [0] and "no input stages" in (dom.reason or "")


def test_an_input_bound_diagnosis_moves_the_stages_and_the_agent_lands_on_a_valid_split(
        cpu_env: Env) -> None:
    wl = _AugmentedInTheMiddle()
    space = build_space(cpu_env, wl, {})
    base = space.baseline
    result = {"outcome": "ok", "samples_per_sec": 100.0, "peak_memory_gb": 0.1,
              "timers": {"data_wait": 0.6, "h2d": 0.0, "compute": 0.4, "optimizer": 0.0}}
    fixes = diagnose(result, base, "cpu", 8.0)["fixes"]
    fix = next(f for f in fixes if f["knob"] == "transform_split")
    assert fix["value"] == 0
    # The jitter stage has no batched version: 0 is capped at the nearest valid split, 2.
    from autotune.search.loop.agent import _within
    value = _within(space, fix, base["transform_split"])
    proposed = candidate(space, base, {**fix, "value": value})
    assert proposed is not None and proposed["transform_split"] == 2


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpegs") / "folder"
    write_random_jpegs(root, 16, classes=2)
    return root


def test_jpeg_folder_decodes_as_a_stage_on_the_cpu(cpu_env: Env, jpegs: Path) -> None:
    """split 0: the encoded bytes (each its own length) cross as a list and are decoded after
    the copy; the model sees exactly what the all-host ImageFolder pipeline gives."""
    wl = JPEGFolderWorkload(str(jpegs), image_size=32, batch_size=4)
    assert build_space(cpu_env, wl, {}).domains["transform_split"].values == [0, 1, 2, 3, 4]
    loaded, prepared = first_batch(cpu_env, wl, 0)
    assert isinstance(loaded, list) and len(loaded) == 4
    assert all(x.dtype == torch.uint8 and x.dim() == 1 for x in loaded)
    assert all(bytes(x[:2].tolist()) == b"\xff\xd8" for x in loaded)  # JPEG SOI marker
    loaded_decoded, from_decoded = first_batch(cpu_env, wl, 1)
    assert isinstance(loaded_decoded, list) and len({x.shape for x in loaded_decoded}) > 1
    _, host = first_batch(cpu_env, wl, 4)
    assert tuple(host.shape) == (4, 3, 32, 32)
    torch.testing.assert_close(prepared, host, atol=1e-5, rtol=0)
    torch.testing.assert_close(from_decoded, host, atol=1e-5, rtol=0)
    run = Training(wl, knobs(cpu_env, wl, transform_split=0), "cpu")
    assert torch.isfinite(run.step(*run.to_device(*next(iter(run.loader)))))


def test_jpeg_folder_names_a_bad_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ImageFolder layout"):
        JPEGFolderWorkload(str(tmp_path / "missing")).raw_dataset()


@pytest.mark.gpu
def test_jpeg_decode_stage_runs_on_cuda(cpu_env: Env, jpegs: Path) -> None:
    """decode_jpeg(device=cuda): the host bytes go straight to nvJPEG (no copy of the list
    first) and the decoded batch matches the CPU decoder's to within JPEG's IDCT rounding."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    wl = JPEGFolderWorkload(str(jpegs), image_size=32, batch_size=4)
    loaded, on_gpu = first_batch(cpu_env, wl, 0, device="cuda")
    assert all(x.device.type == "cpu" for x in loaded)
    assert on_gpu.device.type == "cuda" and tuple(on_gpu.shape) == (4, 3, 32, 32)
    _, on_cpu = first_batch(cpu_env, wl, 4)
    assert (on_gpu.cpu() - on_cpu).abs().mean() < 0.05  # nvJPEG vs libjpeg: a few levels
