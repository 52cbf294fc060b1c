"""What transform_split moves off the loader: resnet18's loader alone per split, and the moved
stages' cost on the device (Training.prepare on one batch), one thread each.

    PYTHONPATH=. python benchmarks/transform_split.py [--sizes 64 224] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.core.env import probe  # noqa: E402
from autotune.core.knobs import build_space  # noqa: E402
from autotune.core.training import Training, build_loader  # noqa: E402
from autotune.workloads.resnet18 import ResNet18Workload  # noqa: E402


def loader_rate(wl: ResNet18Workload, knobs: dict, batches: int = 20) -> tuple[float, torch.Tensor]:
    """Samples/s of the in-process loader (num_workers=0), batches discarded."""
    it = iter(build_loader(wl, knobs))
    x, _ = next(it)
    start = time.perf_counter()
    for _ in range(batches):
        x, _ = next(it)
    return batches * x.shape[0] / (time.perf_counter() - start), x


def prepare_ms(wl: ResNet18Workload, knobs: dict, device: str, reps: int = 20) -> float:
    """Milliseconds of Training.prepare (the device stages) on one batch already on the device."""
    run = Training(wl, knobs, device)
    x, y = next(iter(run.loader))
    x, _ = run.to_device(x, y)
    run.prepare(x)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        run.prepare(x)
    if device == "cuda":
        torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 224])
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(1)
    env = probe(a.device)
    for size in a.sizes:
        wl = ResNet18Workload(image_size=size, n_images=2048)
        base = build_space(env, wl, {}).baseline
        for split in (3, 1, 0):
            knobs = {**base, "transform_split": split}
            rate, x = loader_rate(wl, knobs)
            ms = prepare_ms(wl, knobs, a.device)
            print(f"image_size={size} transform_split={split}: loader {rate:,.0f} samples/s, "
                  f"batch {tuple(x.shape)} {x.dtype} {x.element_size() * x.nelement() / 1e6:.2f} MB; "
                  f"device stages {ms:.2f} ms/batch", flush=True)


if __name__ == "__main__":
    main()
