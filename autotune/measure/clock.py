"""CHILD side: marks on the device's timeline, the window's and the ceilings' one clock."""

from __future__ import annotations

import time
from typing import Any

import torch


class Clock:
    """Marks on the device's timeline. On CUDA: events (no sync per step, so copies and
    compute keep overlapping); elapsed times are read after the closing synchronize. On CPU
    work is synchronous, so the host clock is the device clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def done(self, mark: Any) -> bool:
        """Has the device reached this mark? Never waits (cudaEventQuery)."""
        return bool(mark.query()) if self.cuda else True

    def sync(self, device: torch.device) -> None:
        if self.cuda:
            torch.cuda.synchronize(device)
