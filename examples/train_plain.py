"""A plain PyTorch training loop that trains with a study's best configuration.

    autotune workload=mlp device=cpu                     # writes studies/mlp-cpu/best.yaml
    python examples/train_plain.py studies/mlp-cpu/best.yaml --steps 200

The loop is ordinary PyTorch: its own dataset, model, optimizer and loss (the same shapes as
autotune's mlp workload). ``autotune.Runtime`` gives each of them the measured knobs through
the code the study's trials ran; ``Meter`` warns once if the run is more than 15% slower than
the study's confirmed samples/sec, and says why.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import TensorDataset

import autotune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("best", help="path to a study's best.yaml")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (the study's)")
    args = parser.parse_args()

    best = autotune.load_best(args.best)  # warns if this machine is not the measured one
    rt = autotune.Runtime(best, device=args.device)

    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(4096, 64, generator=g),
                            torch.randint(0, 10, (4096,), generator=g))
    loader = rt.dataloader(dataset, shuffle=True)  # workers, pinning, prefetch, batch size
    model = rt.model(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128),
                                   nn.ReLU(), nn.Linear(128, 10)))
    optimizer = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01, momentum=0.9)
    run = rt.wrap(model, optimizer, nn.functional.cross_entropy, loader=loader)
    meter = rt.meter()

    step = 0
    while step < args.steps:
        for inputs, targets in meter.wrap(loader):
            loss = run.step(*run.to_device(inputs, targets))
            meter.step(len(targets))
            step += 1
            if step % 50 == 0 or step == args.steps:
                print(f"step {step}: loss {loss.item():.4f}")  # a sync, every 50 steps only
            if step == args.steps:
                break
    if meter.samples_per_sec is not None:
        print(f"{meter.samples_per_sec:.1f} samples/s (study: {meter.expected:.1f})")


if __name__ == "__main__":
    main()
