"""The ResNet-18 training step alone on this CPU, per knob setting: samples/sec and page faults.

Each configuration runs in its own process (host_allocator is process-wide), through
autotune.Training on one cached batch (the compute ceiling's mock loader), so the figures isolate what
the step's knobs do: amp, channels_last, batch size, torch.compile, host_allocator.

    python benchmarks/cpu_step.py --image-size 64 --steps 6
    python benchmarks/cpu_step.py --configs "batch_size=128,amp=bf16,channels_last=True,compile=default"
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIGS = [
    "batch_size=32",
    "batch_size=32,host_allocator=retain",
    "batch_size=128,amp=bf16,channels_last=True",
    "batch_size=128,amp=bf16,channels_last=True,host_allocator=retain",
    "batch_size=256,amp=bf16,channels_last=True",
    "batch_size=256,amp=bf16,channels_last=True,host_allocator=retain",
]


def parse(config: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, config.split(",")):
        key, _, value = item.partition("=")
        out[key] = {"True": True, "False": False}.get(value, int(value) if value.isdigit() else value)
    return out


def measure(pins: dict[str, Any], image_size: int, steps: int) -> dict[str, Any]:
    """In this process: warm up (compile included), then time ``steps`` steps on one batch."""
    sys.path.insert(0, str(ROOT))
    from autotune.core.env import probe
    from autotune.core.knobs import build_space
    from autotune.core.training import Training
    from autotune.workloads.resnet18 import ResNet18Workload

    wl = ResNet18Workload(image_size=image_size, n_images=512)
    knobs = {**build_space(probe("cpu"), wl, {}).baseline, **pins}
    run = Training(wl, knobs, "cpu")
    inputs, targets = run.to_device(*next(iter(run.loader)))
    t0 = time.perf_counter()
    run.step(inputs, targets)
    first = time.perf_counter() - t0
    for _ in range(2):
        run.step(inputs, targets)
    times, f0 = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        t = time.perf_counter()
        run.step(inputs, targets)
        times.append(time.perf_counter() - t)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
    b = int(knobs["batch_size"])
    return {"samples_per_sec": b / statistics.median(times), "min": b / max(times),
            "max": b / min(times), "faults_per_step": faults, "first_step_s": first}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                    help="comma-separated knob pins, one configuration each")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(measure(parse(a.child), a.image_size, a.steps)))
        return
    print("| knobs (rest: resnet18 defaults) | samples/s (min..max) | page faults/step | first step |")
    print("|---|---|---|---|")
    for config in a.configs:
        proc = subprocess.run([sys.executable, __file__, "--child", config, "--image-size",
                               str(a.image_size), "--steps", str(a.steps)],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"| {config} | {r['samples_per_sec']:.1f} ({r['min']:.0f}..{r['max']:.0f}) | "
              f"{r['faults_per_step']:,.0f} | {r['first_step_s']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
