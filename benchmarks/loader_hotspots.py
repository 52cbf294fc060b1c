"""The input-pipeline verdict with its loader profile, on two JPEG pipelines: an
ImageFolder with RandomResizedCrop + flip, and the shipped JPEG workload's input stages feeding a
tiny model. Prints each baseline window's verdict and first fix.

    PYTHONPATH=. python benchmarks/loader_hotspots.py
"""
import dataclasses
import json
import tempfile
from pathlib import Path

import psutil

from autotune.core.env import probe
from autotune.core.knobs import build_space
from autotune.diagnose import diagnose
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.workloads.jpeg_folder import write_random_jpegs
from tests.conftest import TINY_WINDOW
from tests.workloads_augment import AugmentedJPEGs, TinyJPEGFolder
from tests.workloads_diag import baseline_knobs, spec

HOST_GB = psutil.virtual_memory().total / 2**30


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    env = probe("cpu")
    write_random_jpegs(tmp / "j", 128)
    wl = TinyJPEGFolder(root=str(tmp / "j"), image_size=64, n_images=128)
    space = build_space(env, wl, {})
    k = dict(space.baseline)
    r = run_window(TrialRequest(workload=spec(TinyJPEGFolder, root=str(tmp / "j"), image_size=64, n_images=128), knobs=k, device="cpu", window=TINY_WINDOW, loader_profile=True), tmp / "t1")
    d = diagnose(dataclasses.asdict(r), k, "cpu", HOST_GB, domains=space.domains)
    print("staged:", json.dumps(r.loader_profile["frames"][:4], indent=0))
    print(d["summary"])
    print("first fix:", d["fixes"][0])
    k2 = baseline_knobs(AugmentedJPEGs(str(tmp / "a")))
    r2 = run_window(TrialRequest(workload=spec(AugmentedJPEGs, root=str(tmp / "a")), knobs=k2, device="cpu", window=TINY_WINDOW, loader_profile=True), tmp / "t2")
    d2 = diagnose(dataclasses.asdict(r2), k2, "cpu", HOST_GB)
    print("ImageFolder:", d2["summary"])
    print("first fix:", d2["fixes"][0]["knob"], d2["fixes"][0]["value"])


if __name__ == "__main__":
    main()
