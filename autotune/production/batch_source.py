"""Batches that no DataLoader makes: a function the loop calls for each batch, such as
nanoGPT's ``get_batch`` (random slices of a memmap, pinned and copied by the function itself).

The study's trials always read a DataLoader, so of its knobs some reach such a loop and some
cannot: the workers and what only workers do (``prefetch_factor``, ``persistent_workers``) and
the collating knobs are a DataLoader's arguments, while the batch size applies where the
function reads it (``rt.batch_size``), pinning and the non-blocking copy apply to the CPU
tensors the function returns (``rt.batches`` pins and copies them as measured), and the rest
(amp, compile, the optimizer's implementation, zero_grad, threads) through their own calls.
``Runtime.batches`` says which once, when the loop sets up, and times each call for the
meter, so that a slower run can be told apart as a slower batch or a slower step.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from autotune.core import batch as tree

#: A DataLoader's own knobs, with the value a function called in the loop's process amounts
#: to: no workers (so no prefetching or persistent workers) and none of the collating knobs.
LOADER_ONLY = {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
               "length_grouping": False, "padding_free": False, "pad_to_multiple_of": None}


class _Runtime(Protocol):
    """What the wrapper needs of the Runtime: the run's meter (None until ``rt.meter()``)
    and the measured copy."""

    _meter: Any

    def _batch_to_device(self, batch: Any) -> Any: ...


def not_applied(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The measured DataLoader-only knobs whose value a function cannot reproduce (set to
    another value than a function called in the loop amounts to; what only workers do counts
    only where workers were measured)."""
    workers = int(knobs.get("num_workers") or 0)
    return {k: knobs[k] for k, off in LOADER_ONLY.items()
            if k in knobs and knobs[k] != off
            and (workers or k not in ("prefetch_factor", "persistent_workers"))}


def notice(name: str, knobs: Mapping[str, Any], device: torch.device,
           samples_per_sec: Any) -> tuple[bool, str]:
    """What applies to batches from the function ``name`` and what does not: ``(lost,
    text)``, ``lost`` when a measured knob cannot apply (then the run may fall short of the
    study's figure, and the text says how to tune for what the function can apply)."""
    lost = not_applied(knobs)
    copy = ", ".join(f"{k}={knobs[k]!r}" for k in ("pin_memory", "non_blocking") if k in knobs)
    applies = (f"batch_size={knobs.get('batch_size')!r} applies where the function reads "
               "rt.batch_size; " + (f"{copy} apply to the CPU tensors it returns (tensors it "
                                    f"already put on {device.type} pass as they are); "
                                    if copy else "")
               + "amp, compile, the attention backend, optimizer_impl, set_to_none and the "
               "threads apply through their own calls.")
    head = f"autotune: batches from {name}(), a function rather than a DataLoader: "
    if not lost:
        return False, head + "no loader knob of the study is lost (" \
            + ", ".join(f"{k}={knobs.get(k)!r}" for k in ("num_workers",) if k in knobs) \
            + "); " + applies
    said = ", ".join(f"{k}={v!r}" for k, v in lost.items())
    return True, (head + f"the measured {said} are a DataLoader's arguments and do not apply "
                  "(the function makes each batch in the loop's own process), so this run "
                  f"may not reach the study's {samples_per_sec} samples/s. For a study of what "
                  "such a loop can apply, narrow the loader knobs (knobs.num_workers=0, or "
                  "the workload's knob_limits). What does apply: " + applies)


class BatchFunction:
    """``rt.batches(get_batch)``: the function, called as it was; each call is timed as the
    loop's wait for its batch (the run's ``rt.meter()``, where it has one) and its CPU
    tensors pinned and copied to the device as measured."""

    def __init__(self, fn: Callable[..., Any], runtime: _Runtime):
        self._fn, self._rt = fn, runtime
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        meter = self._rt._meter
        with meter.wait() if meter is not None else contextlib.nullcontext():
            return self._rt._batch_to_device(self._fn(*args, **kwargs))


def pin_host_tensors(batch: Any) -> Any:
    """Every CPU tensor of ``batch`` page-locked (a tensor already on a device, or pinned,
    as it is)."""
    return tree.tree_map(lambda t: t.pin_memory() if t.device.type == "cpu"
                         and not t.is_pinned() else t, batch)
