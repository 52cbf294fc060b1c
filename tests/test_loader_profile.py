"""autotune.measure.loader_profile: real loaders, real cProfile, nothing mocked. Shares are
asserted by kind and order only where the work is lopsided by construction (a 5 ms sleep
against microseconds of bookkeeping), never as timings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset
from torchvision import datasets, transforms

from autotune.measure.loader_profile import hot_kind, profile_loader, summary_line
from autotune.workloads.jpeg_folder import write_random_jpegs


def _check_shape(profile: dict[str, Any]) -> None:
    """The invariants every profile keeps: disjoint frames whose shares add up to coverage."""
    json.dumps(profile)
    shares = [f["share"] for f in profile["frames"]]
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) == pytest.approx(profile["coverage"], abs=1e-6)
    assert profile["coverage"] <= 1.0 + 1e-6
    assert len(profile["frames"]) <= 12
    assert 0.0 <= profile["wait_share"] <= 1.0
    assert profile["hot"] == (profile["frames"][0]["name"] if profile["frames"] else None)
    assert hot_kind(profile) == (profile["frames"][0]["kind"] if profile["frames"] else None)


class Sleeper(Dataset):
    """I/O latency: each item waits 5 ms and computes nothing."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return torch.tensor(float(index))


class Computer(Dataset):
    """CPU work in the user's own Python: a loop of a few milliseconds per item."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        total = 0
        for j in range(30_000):
            total += (j * index) % 7
        return torch.tensor(float(total))


class BigTensors(Dataset):
    """Items that cost nothing to produce but much to batch: default_collate's stack copies
    8 x 3 MB per batch."""

    def __init__(self) -> None:
        self.image = torch.ones(3, 512, 512)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.image


def test_jpeg_folder_folds_to_decode_and_transforms(tmp_path: Path) -> None:
    root = tmp_path / "jpegs"
    write_random_jpegs(root, 64, classes=4)
    dataset = datasets.ImageFolder(str(root), transform=transforms.Compose([
        transforms.RandomResizedCrop(32, antialias=True),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor()]))

    profile = profile_loader(dataset, None, batch_size=8, batches=4)

    _check_shape(profile)
    assert profile["batches"] == 4 and profile["batch_size"] == 8
    by_name = {f["name"]: f for f in profile["frames"]}
    decode = [f for f in profile["frames"] if f["kind"] == "decode"]
    assert decode and decode[0]["share"] > 0 and "JPEG decode" in decode[0]["name"]
    assert "PIL/" in decode[0]["where"]
    crop = by_name["RandomResizedCrop"]
    assert crop["kind"] == "transform" and crop["share"] > 0 and crop["calls"] == 32
    assert "torchvision/transforms/transforms.py:" in crop["where"]
    assert "Compose" not in by_name  # a container is not a frame: its children are
    where, line = profile["getitem"]["where"].rsplit(":", 1)
    assert where.endswith("torchvision/datasets/folder.py") and line.isdigit()
    assert 0 < profile["getitem"]["share"] <= 1
    assert "decode" in summary_line(profile)


def test_sleeping_loader_waits_and_computing_loader_computes() -> None:
    sleeper = profile_loader(Sleeper(), None, batch_size=4, batches=2)
    computer = profile_loader(Computer(), None, batch_size=4, batches=2)

    for profile in (sleeper, computer):
        _check_shape(profile)
    assert sleeper["wait_share"] > 0.5
    assert "wait" in [f["kind"] for f in sleeper["frames"][:2]]
    sleep = next(f for f in sleeper["frames"] if f["kind"] == "wait")
    assert "time.sleep" in sleep["name"] and sleep["calls"] == 8
    assert f"test_loader_profile.py:{Sleeper.__getitem__.__code__.co_firstlineno}" in sleep["where"]
    assert re.search(r"; \d+% waiting", summary_line(sleeper)), summary_line(sleeper)

    assert computer["wait_share"] < 0.5
    assert all(f["kind"] != "wait" for f in computer["frames"][:2])
    user = [f for f in computer["frames"] if f["kind"] == "user"]
    line = Computer.__getitem__.__code__.co_firstlineno
    assert any(f"test_loader_profile.py:{line}" in f["where"] for f in user)
    assert any(f["name"].startswith("Computer.__getitem__") for f in user)
    assert computer["getitem"]["where"].endswith(f"test_loader_profile.py:{line}")


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(), reason="needs schedstat")
def test_a_computing_loader_beside_another_job_is_not_waiting_on_its_data() -> None:
    """Another process computing on the loader's only core: the loader gets about half of it.
    That half is its wait for a CPU (cpu_wait_share), said apart, not waiting on I/O: read as
    1 - CPU/wall it was ~50% "waiting", which sends a user to their files."""
    before = os.sched_getaffinity(0)
    core = min(before)
    hog = subprocess.Popen([sys.executable, "-c",
                            f"import os; os.sched_setaffinity(0, {{{core}}}); print(1, flush=True)\n"
                            "while True: pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "1"
        os.sched_setaffinity(0, {core})
        profile = profile_loader(Computer(), None, batch_size=4, batches=4)
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    _check_shape(profile)
    assert profile["cpu_wait_share"] > 0.25, profile
    assert profile["wait_share"] < 0.25, profile
    assert "waiting for a CPU other processes held" in summary_line(profile)


def test_default_collate_is_a_collate_frame() -> None:
    profile = profile_loader(BigTensors(), None, batch_size=8, batches=2)

    _check_shape(profile)
    collate = [f for f in profile["frames"] if f["kind"] == "collate"]
    assert collate and collate[0]["share"] > 0
    assert "default_collate" in collate[0]["name"]
    assert profile["hot"] == collate[0]["name"]


def test_given_collate_fn_owns_what_runs_inside_it() -> None:
    """A user's collate_fn is the collate frame, and the outermost frame wins: its sleep is
    collate, not a separate wait frame, nor user self time. A dataset shorter than the
    batches asked for yields what it has."""

    def slow_stack(items: list[torch.Tensor]) -> torch.Tensor:
        time.sleep(0.01)
        return torch.stack(items)

    profile = profile_loader(BigTensors(), slow_stack, batch_size=8, batches=50)

    _check_shape(profile)
    assert profile["batches"] == 2
    assert profile["hot"] == "collate (slow_stack)" and hot_kind(profile) == "collate"
    assert profile["frames"][0]["calls"] == 2
    assert all(f["kind"] not in ("wait", "user") for f in profile["frames"])


def test_a_slow_loader_is_profiled_on_fewer_batches_within_the_budget() -> None:
    """No batch starts after the budget: a loader at seconds per batch cannot hold its trial
    past the watchdog's stall limit (a sleep is a lower bound, so this cannot flake)."""

    class Slow(Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(0.05)
            return torch.zeros(2)

    prof = profile_loader(Slow(), None, batch_size=4, batches=8, budget_s=0.1)
    assert prof["batches"] == 1 and prof["frames"], prof
