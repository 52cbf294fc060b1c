"""Verdicts name the loader's hot spot (issue 22): a JPEG ImageFolder pipeline's baseline
window profiles its loader and the verdict names the decode, the crop and the dataset's
__getitem__; a decode-bound staged pipeline is sent to the device first."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import psutil

from autotune.core.space import build_space
from autotune.diagnose import diagnose
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.search.loop.agent import candidate
from autotune.workloads.jpeg_folder import write_random_jpegs
from tests.conftest import TINY_WINDOW
from tests.workloads_augment import AugmentedJPEGs, TinyJPEGFolder
from tests.workloads_diag import baseline_knobs, spec

HOST_GB = psutil.virtual_memory().total / 2**30


def test_imagefolder_baseline_verdict_names_decode_crop_and_getitem(tmp_path: Path) -> None:
    root = str(tmp_path / "jpegs")
    knobs = baseline_knobs(AugmentedJPEGs(root))
    req = TrialRequest(workload=spec(AugmentedJPEGs, root=root), knobs=knobs, device="cpu",
                       window=TINY_WINDOW, loader_profile=True)
    res = run_window(req, tmp_path / "trial")
    assert res.ok, res.stderr_tail[-2000:]
    prof = res.loader_profile
    names = {f["name"]: f for f in prof["frames"]}
    assert any(f["kind"] == "decode" for f in prof["frames"]), prof["frames"]
    assert "RandomResizedCrop" in names, prof["frames"]
    assert sum(f["share"] for f in prof["frames"]) <= prof["coverage"] + 1e-6 <= 1.0 + 1e-6
    assert "torchvision/datasets/folder.py:" in prof["getitem"]["where"]
    d = diagnose(dataclasses.asdict(res), knobs, "cpu", HOST_GB)
    assert d["bottleneck"] == "input_pipeline", d["summary"]
    assert "decode" in d["summary"] and "RandomResizedCrop" in d["summary"]
    assert "__getitem__ is torchvision/datasets/folder.py:" in d["summary"]


def test_a_decode_bound_staged_loader_is_sent_to_the_device_first(tmp_path: Path,
                                                                 cpu_env: object) -> None:
    """The shipped JPEG workload declares stages: where the profile's hot frame is the decode
    or a transform, transform_split comes before more workers, and the agent proposes it."""
    write_random_jpegs(tmp_path / "jpegs", 128)
    wl = TinyJPEGFolder(root=str(tmp_path / "jpegs"), image_size=64, n_images=128)
    space = build_space(cpu_env, wl, {})  # type: ignore[arg-type]
    knobs = dict(space.baseline)
    req = TrialRequest(workload=spec(TinyJPEGFolder, root=str(tmp_path / "jpegs"), image_size=64,
                                     n_images=128), knobs=knobs, device="cpu",
                       window=TINY_WINDOW, loader_profile=True)
    res = run_window(req, tmp_path / "trial")
    assert res.ok, res.stderr_tail[-2000:]
    assert res.loader_profile.get("frames"), (res.loader_profile, res.timers)
    hot = res.loader_profile["frames"][0]
    d = diagnose(dataclasses.asdict(res), knobs, "cpu", HOST_GB, domains=space.domains)
    assert d["bottleneck"] == "input_pipeline", d["summary"]
    if hot["kind"] in ("decode", "transform"):
        assert d["fixes"][0]["knob"] == "transform_split", (hot, d["fixes"])
        assert hot["name"] in d["fixes"][0]["why"]
        nxt = candidate(space, knobs, d["fixes"][0])
        assert nxt is not None and nxt["transform_split"] < knobs["transform_split"]
    else:  # the profile found another hot spot: the fix is not the device split first
        assert d["fixes"][0]["knob"] != "transform_split", (hot, d["fixes"])
