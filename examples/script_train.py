"""A plain PyTorch training script that autotune tunes as it is launched:

    autotune -- python examples/script_train.py --epochs 3          # the study: studies/script_train-cpu/
    python examples/script_train.py --epochs 3                       # your own settings, as written
    AUTOTUNE_BEST=studies/script_train-cpu/best.yaml python examples/script_train.py --epochs 3

Its settings (batch size, workers, precision) are written once, in its own lines: each
``rt`` call returns the value the script passes it when no study has run, the trial's knobs
inside a study, and the measured ones with a best.yaml. Its evaluation and checkpoint at the
end never run in a trial: a trial ends once its window is measured.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import autotune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("-b", "--batch-size", type=int, default=32)
    parser.add_argument("-j", "--workers", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--out", default="checkpoints")
    args = parser.parse_args()

    torch.manual_seed(0)
    rt = autotune.Runtime()  # before the DataLoader: threads and allocator are process-wide
    x = torch.randn(4096, 64)
    y = (x @ torch.randn(64, 10)).argmax(1)
    loader = DataLoader(TensorDataset(x, y), shuffle=True, drop_last=True,
                        **rt.loader_kwargs(batch_size=args.batch_size, num_workers=args.workers))
    model = rt.model(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256),
                                   nn.ReLU(), nn.Linear(256, 10)))
    forward = rt.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                                **rt.optimizer_kwargs())
    meter = rt.meter()

    for epoch in range(args.epochs):
        for inputs, targets in meter.wrap(loader):
            inputs, targets = rt.to_device(inputs, targets)
            with rt.autocast():
                loss = nn.functional.cross_entropy(forward(inputs), targets)
            loss.backward()
            optimizer.step()
            rt.zero_grad(optimizer)
            meter.step(len(targets), loss=loss)
        print(f"epoch {epoch}: loss {loss.item():.3f}")

    Path(args.out).mkdir(exist_ok=True)  # never reached in a trial
    torch.save(model.state_dict(), Path(args.out) / "model.pt")


if __name__ == "__main__":
    main()
