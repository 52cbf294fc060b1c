"""User-style workloads for the fail-fast and factory-argument tests: one whose own settings
crash in its loss (the traceback's last user frame is here), one taking an argument the
default workload (resnet18) also has."""

from __future__ import annotations

from typing import Any

import torch

from autotune.workloads.mlp import MLPWorkload


class CrashesEveryStep(MLPWorkload):
    """Every step raises, as a dict batch fed to ``.to()`` did before batches of any structure."""

    name = "crashes"

    def __init__(self, broken: bool = True, **kw: Any):
        super().__init__(**kw)
        self.broken = broken

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        if self.broken:
            return {"logits": outputs}.to(targets.device)  # type: ignore[attr-defined]
        return super().loss(outputs, targets)


class SizedMLP(MLPWorkload):
    """An MLP whose input width is ``image_size``: a name resnet18's config also has."""

    def __init__(self, image_size: int = 8, **kw: Any):
        super().__init__(in_features=image_size, **kw)
        self.image_size = image_size

    def describe(self) -> str:
        return f"sized-mlp image_size={self.image_size}"


class CountingMLP(MLPWorkload):
    """Writes, at every optimizer step, how many samples the model saw since the last one:
    the global batch the optimizer really trained on (one line per step, in ``log_file``)."""

    name = "counting-mlp"

    def __init__(self, log_file: str, **kw: Any):
        super().__init__(**kw)
        self.log_file = log_file
        self.seen = 0

    def model(self) -> torch.nn.Module:
        net = super().model()

        def count(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            self.seen += int(args[0].shape[0])

        net.register_forward_pre_hook(count)
        return net

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        workload = self

        class CountingSGD(torch.optim.SGD):
            def step(self, closure: Any = None) -> Any:
                with open(workload.log_file, "a") as f:
                    f.write(f"{workload.seen}\n")
                workload.seen = 0
                return super().step(closure)

        return CountingSGD(params, lr=self.lr, momentum=0.9, **impl)


class LayoutSensitiveNet(torch.nn.Module):
    """A small conv net whose loss scale depends on the input's memory layout, standing in for
    a model whose numerics a knob breaks; channels_last inputs also skip a 150 ms sleep (30 ms
    was too little on an AMD EPYC without AVX512, 2026-12-03: its channels_last steps took
    about 90 ms, the others 39 ms, and no finalist was left to refuse), so that
    the broken configuration is the fastest one."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 3)
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        cl = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        self.scale = 1.5 if cl else 1.0
        if not cl:
            time.sleep(0.15)
        return self.fc(self.conv(x).flatten(1))


class LayoutSensitive(MLPWorkload):
    """Image batches; its loss is 1.5x off when channels_last is on (the numerics check must
    refuse that configuration although it is the fastest)."""

    name = "layout-sensitive"
    image_inputs = True

    def dataset(self, transfer_dtype: str) -> Any:
        from torch.utils.data import TensorDataset

        g = torch.Generator().manual_seed(0)
        return TensorDataset(torch.randn(256, 3, 8, 8, generator=g),
                             torch.randint(0, 3, (256,), generator=g))

    def model(self) -> torch.nn.Module:
        self.net = LayoutSensitiveNet()
        return self.net

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(outputs, targets) * self.net.scale


class _ThreadsSeen(torch.utils.data.Dataset):
    """Each sample is the torch thread count of the process that loaded it, and its pid."""

    def __init__(self, n: int, width: int):
        self.n, self.width = n, width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import os

        info = torch.tensor([float(torch.get_num_threads()), float(os.getpid())])
        return torch.cat([info, torch.zeros(self.width - 2)]), torch.tensor(i % 10)


class ThreadsMLP(MLPWorkload):
    """Writes, as JSON lines to ``log_file``, the torch threads the training process steps with
    and those each DataLoader worker loaded its samples with (cpu_threads test)."""

    name = "threads-mlp"

    def __init__(self, log_file: str, **kw: Any):
        super().__init__(**kw)
        self.log_file = log_file

    def dataset(self, transfer_dtype: str) -> torch.utils.data.Dataset:
        return _ThreadsSeen(self.n_samples, self.in_features)

    def model(self) -> torch.nn.Module:
        import json
        import os

        net = super().model()

        def record(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0]
            loaders = sorted({(int(t), int(p)) for t, p in x[:, :2].tolist()})
            with open(self.log_file, "a") as f:
                f.write(json.dumps({"main": torch.get_num_threads(),
                                    "interop": torch.get_num_interop_threads(),
                                    "pid": os.getpid(), "loaders": loaders}) + "\n")

        net.register_forward_pre_hook(record)
        return net


class ConvHeavy(MLPWorkload):
    """Much arithmetic, few parameters: three 3x3 convolutions of 16 channels over 64 x 64
    images (about 5,000 parameters, tens of MFLOPs per sample), then a pooled classifier.
    Batches of 32 (a step near 180 ms on one core per rank): at 8 (50 ms) gloo's fixed cost
    on this project's VM, about 8 ms, was 13% of the step, too near the 25% verdict."""

    name = "conv-heavy"
    image_inputs = False  # keep channels_last out: the verdict, not the memory format, matters

    def __init__(self, **kw: Any):
        super().__init__(n_samples=512, batch_size=32, **kw)

    def dataset(self, transfer_dtype: str) -> Any:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.n_samples, 3, 64, 64, generator=g)
        y = torch.randint(0, self.classes, (self.n_samples,), generator=g)
        return torch.utils.data.TensorDataset(x, y)

    def model(self) -> torch.nn.Module:
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, self.classes))
