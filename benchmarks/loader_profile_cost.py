"""What the loader profile costs: the same in-process loader pass timed plain and
under the profiler (autotune/measure/loader_profile.py), alternated, on an ImageFolder
pipeline with RandomResizedCrop + flip (JPEG files written here), and what it finds.

    PYTHONPATH=. python benchmarks/loader_profile_cost.py [--rounds 5] [--batches 8]

Prints a markdown table for docs/benchmarks.md."""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import ImageFolder

from autotune.measure.loader_profile import profile_loader, summary_line
from autotune.workloads.jpeg_folder import write_random_jpegs


def plain_pass(dataset: ImageFolder, batch_size: int, batches: int) -> float:
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    for _ in itertools.islice(loader, batches):
        pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp()) / "jpegs"
    write_random_jpegs(root, 512, classes=4)
    dataset = ImageFolder(str(root), transform=transforms.Compose([
        transforms.RandomResizedCrop(64, antialias=True), transforms.RandomHorizontalFlip(),
        transforms.ToTensor()]))
    torch.set_num_threads(1)
    plain_pass(dataset, args.batch_size, 2)  # warm: imports, page cache
    plain, profiled, fold = [], [], []
    last = {}
    for _ in range(args.rounds):  # alternated, so a drift of the machine hits both
        plain.append(plain_pass(dataset, args.batch_size, args.batches))
        t0 = time.perf_counter()
        last = profile_loader(dataset, None, args.batch_size, args.batches)
        fold.append(time.perf_counter() - t0 - last["total_s"])
        profiled.append(last["total_s"])
    p, q = statistics.median(plain), statistics.median(profiled)
    n = args.batches * args.batch_size
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"1 intra-op thread, {args.rounds} alternated rounds of {args.batches} batches x "
          f"{args.batch_size}")
    print("| pass | median s | samples/s | range s |")
    print("|---|---|---|---|")
    print(f"| plain | {p:.3f} | {n / p:,.0f} | {min(plain):.3f}-{max(plain):.3f} |")
    print(f"| under cProfile | {q:.3f} | {n / q:,.0f} | {min(profiled):.3f}-{max(profiled):.3f} |")
    print(f"| folding the profile (after the pass) | {statistics.median(fold):.3f} | | |")
    print(f"\noverhead: the profiled pass takes {q / p:.2f}x the plain pass; what it found: "
          f"{summary_line(last)}; coverage {last['coverage']:.2f}; __getitem__ at "
          f"{last['getitem']['where']}")


if __name__ == "__main__":
    main()
