"""A production run's ranks under torchrun: the placed model in DDP or sharded with FSDP2 as the
study's ranks held it, and each rank pinned to its share of the node's cores (mixed into
``Runtime``, which sets the attributes: autotune/production/runtime.py)."""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Sequence
from typing import Any

from torch import nn

from autotune.core import distributed, sharding
from autotune.production.best import BestConfig
from autotune.production.settings import Source


class Ranks:
    """``rt.ddp``, ``rt.shard``, ``rt.parallel``: the model across the run's ranks."""

    knobs: dict[str, Any]
    device: Any
    best: BestConfig
    source: Source

    def _override(self, knob: str, have: Any, want: Any, where: str) -> None:
        raise NotImplementedError  # Runtime's: one KnobOverridden warning per knob

    def _pin_rank(self) -> list[int]:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
        if not self.best.document.get("launch") or local_world <= 1:
            return []
        return distributed.pin_rank(int(os.environ.get("LOCAL_RANK") or 0), local_world)

    def ddp(self, model: nn.Module) -> nn.Module:
        """The placed model (``rt.model``) in DistributedDataParallel with the measured DDP
        arguments (best.yaml ``ddp_kwargs``) and communication hook (``ddp_step``), on this
        rank's device; the process group must be initialized
        (``torch.distributed.init_process_group``). Pass the returned module to ``wrap``: the
        step then runs through DDP as the trial's ranks did (``accumulation_no_sync`` too).
        Where the study measured a sharded model, DDP is used as asked, with a warning:
        ``rt.parallel`` applies whichever was measured."""
        self._launched("rt.ddp()")
        for knob in DDP_KNOBS:  # DDP's own defaults are a script's own values
            self.source.setting(knob, self.source.neutral(knob))
        if sharding.sharded(self.knobs):
            self._override("sharding", "no_shard (rt.ddp)", self.knobs["sharding"],
                           "the script's rt.ddp() call")
        return distributed.ddp(model, self.knobs, self.device)

    def shard(self, model: nn.Module, layers: Sequence[type] = ()) -> nn.Module:
        """The placed model (``rt.model``) sharded with FSDP2 as measured (best.yaml
        ``sharding`` and ``fsdp_kwargs``): ``fully_shard`` on each of its blocks, grouped and
        prefetched as the trials did, then on the root, over this run's device mesh.
        ``layers``: the block types (default: a Hugging Face model's ``_no_split_modules``).
        Build the optimizer from the returned model's parameters (``rt.optimizer``): they are
        the shards. Then ``wrap`` it: accumulation micro-steps skip the reduce-scatter as
        measured. A study that measured DDP faster (``sharding: no_shard``) is refused here:
        ``rt.parallel`` applies whichever was measured."""
        self._launched("rt.shard()")
        if not sharding.sharded(self.knobs):
            raise ValueError("rt.shard(): the study measured sharding=no_shard (DDP) for this "
                             "configuration: call rt.ddp(model), or rt.parallel(model), which "
                             "applies whichever sharding the study measured.")
        return distributed.wrap(model, self.knobs, self.device, layers=layers)

    def parallel(self, model: nn.Module, layers: Sequence[type] = ()) -> nn.Module:
        """The placed model as the study's ranks held it: sharded with FSDP2 (``rt.shard``)
        or in DDP (``rt.ddp``), as best.yaml's ``sharding`` says. Build the optimizer from the
        returned model's parameters."""
        self._launched("rt.parallel()")
        return distributed.wrap(model, self.knobs, self.device, layers=layers)

    def _launched(self, call: str) -> None:
        if distributed.world_size() <= 1 and self.source.discover is None:  # (a discovery
            # run is one rank of its own: autotune -- python train.py reads its calls)
            raise ValueError(f"{call}: no process group of several ranks is initialized: "
                             "launch with torchrun and call torch.distributed."
                             "init_process_group() first (best.yaml's launch.torchrun)")
        atexit.unregister(_let_gloo_threads_finish)
        atexit.register(_let_gloo_threads_finish)


#: The DistributedDataParallel knobs ``rt.ddp`` applies (core/distributed.ddp).
DDP_KNOBS = ("bucket_cap_mb", "gradient_as_bucket_view", "batched_grad_copy", "static_graph",
             "broadcast_buffers", "comm_hook", "accumulation_no_sync")


def _let_gloo_threads_finish() -> None:
    """At exit, before the interpreter's teardown: give gloo's worker threads the GIL. Such a
    thread drops its last reference to a finished collective (a barrier's) after the rank has
    moved on, and that needs the GIL; when the main thread is already tearing the interpreter
    down, the thread aborts the rank ("terminate called without an active exception",
    SIGABRT): torch 2.14.1's gloo, a plain DDP script (no autotune) in 2 of 20, 2 of 30 and 1
    of 30 torchruns on this project's 2-core VM, examples/ddp_train.py in 5 of 25 and autotune
    verify of it in 4 of 12, 2026-11-27; torch 2.11 in none of 30. The process group itself outlives this
    (its worker threads were still alive after a collection here), so what helps is the pause:
    with it, 0 of 30 torchruns of examples/ddp_train.py and 0 of 12 verify runs aborted."""
    time.sleep(0.05)
