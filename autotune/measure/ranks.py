"""CHILD side: a trial that runs as the production launch runs, N ranks per node.

The trial's process becomes the launcher: PyTorch's own elastic launcher (torchrun's engine,
``torch.distributed.launcher.api.elastic_launch``) starts the ranks, each in a process of its
own, gloo on CPU and NCCL on CUDA, with a c10d rendezvous on a free port (``localhost:0``, as
``torchrun --standalone``) under a run id of its own, so two studies at once never meet, no
restarts, and timeouts in seconds rather than torchrun's 900. Each rank pins itself to its
share of the node's cores (core/distributed.py), runs the window of autotune/measure/window.py
with the model in DDP and a DistributedSampler, and writes its own result; rank 0 writes the
heartbeat the driver's watchdog reads, the others theirs beside it (the runner names the rank a
stalled trial waits on). The launcher merges the ranks' results into the trial's.

What differs from the ``torchrun`` command, and is done here instead: ``elastic_launch`` does
not set ``OMP_NUM_THREADS`` (each rank sets it to its share); ranks are forked from this
process, so they stay in the trial's process group, which the runner kills as one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from autotune.core.config import LaunchConfig
from autotune.core.distributed import endpoint_taken
from autotune.core.files import atomic_write
from autotune.measure.contention import TRIAL_ROOT_ENV
from autotune.measure.protocol import (
    STACK_SIGNAL,
    TrialRequest,
    WindowResult,
    rank_path,
    spans_nodes,
)
from autotune.measure.rank_failure import failed, first_failure


def launch_config(req: TrialRequest, trial_dir: Path, host: bool | None = None) -> Any:
    """The elastic launcher's configuration for this window's ranks on this node. ``host``:
    whether this node's launcher hosts the c10d store (several nodes: the driver's node does,
    at launch.rdzv_endpoint, and the others join it)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig as ElasticLaunchConfig

    launch = req.launch or LaunchConfig()
    nproc, nnodes, timeout = launch.nproc_per_node, launch.nnodes, launch.rdzv_timeout_s
    configs: dict[str, Any] = {"timeout": timeout, "join_timeout": timeout,
                               "last_call_timeout": 1}
    if host is not None:
        configs["is_host"] = host
    with _nvml_device_check():
        return ElasticLaunchConfig(
        min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=nproc,
        run_id=req.run_id or f"autotune-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d", rdzv_endpoint=launch.rdzv_endpoint or "localhost:0",
        rdzv_configs=configs, max_restarts=0, monitor_interval=0.1, start_method="fork",
        logs_specs=DefaultLogsSpecs(log_dir=str(trial_dir / "ranks"), redirects=Std.ALL),
        )


@contextlib.contextmanager
def _nvml_device_check() -> Iterator[None]:
    """torch's LaunchConfig asks ``torch.accelerator.is_available()`` and ``device_count()``
    (for its NUMA binding default, torch 2.8 and later), which initialize the CUDA driver in
    this process unless the check goes through NVML; the ranks it then forks cannot use CUDA
    (every NCCL rank exited with code 1 before writing a result: one H200, torch 2.11,
    2026-11-28). NVML answers the same question without touching the driver."""
    key = "PYTORCH_NVML_BASED_CUDA_CHECK"
    old = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def launch_window(req: TrialRequest, request_path: Path, result_path: Path) -> int:
    """Launch the ranks, wait for them, write the trial's merged result. Never raises for a
    rank's failure: it becomes the trial's outcome, naming the rank."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    launch = req.launch or LaunchConfig()
    world = launch.nproc_per_node * launch.nnodes
    config = launch_config(req, result_path.parent, host=True if spans_nodes(launch) else None)
    os.environ[TRIAL_ROOT_ENV] = str(os.getpid())  # the ranks' load is the trial's own
    failure, first = "", None
    taken = launch.rdzv_endpoint and endpoint_taken(str(launch.rdzv_endpoint))
    try:
        if taken:  # taken since the study began: fail now, not at the stall limit
            raise RuntimeError(f"the rendezvous endpoint {taken}")
        elastic_launch(config, rank_main)(str(request_path), str(result_path))
    except ChildFailedError as exc:
        first, how = first_failure(exc)
        failure = f"rank {first} {how}"
    except Exception as exc:  # noqa: BLE001 - a rendezvous that never formed, a port taken
        failure = f"the launcher failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
        if spans_nodes(launch) and "Rendezvous" in type(exc).__name__:
            failure = (f"the {launch.nnodes} nodes' launchers did not all meet at "
                       f"{launch.rdzv_endpoint} within {launch.rdzv_timeout_s} s: "
                       "is `autotune follow <the study's directory>` running on every other "
                       f"node? (docs/cluster.md; {type(exc).__name__})")
    ranks_ran = not failure or first is not None  # not a launcher that never started them
    if spans_nodes(launch) and ranks_ran:
        _await_other_nodes(result_path, world)
    result = merge(req, result_path, world, failure, first)
    atomic_write(result_path, result.to_json(), durable=False)
    return 0


#: Seconds the driver's node waits for the other nodes' ranks to write their results after
#: its own ranks are done (a shared filesystem may show a file late; a rank that died writes
#: none, and merge names it).
OTHER_NODES_WAIT_S = 10.0


def _await_other_nodes(result_path: Path, world: int) -> None:
    deadline = time.monotonic() + OTHER_NODES_WAIT_S
    while time.monotonic() < deadline:
        if all(rank_path(result_path, r).exists() for r in range(world)):
            return
        time.sleep(0.05)


def node_main(request_path: str) -> int:
    """Another node's share of a window of several nodes (measure/nodes.py starts it there):
    this node's ranks, joined to the driver's node's rendezvous under the window's run id.
    Their results go beside the request, where the driver's node merges them; their failure
    is theirs to write, so nothing here decides the trial's outcome."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    path = Path(request_path)
    req = TrialRequest.read(path)
    os.environ[TRIAL_ROOT_ENV] = str(os.getpid())
    try:
        elastic_launch(launch_config(req, path.parent, host=False), rank_main)(
            str(path), str(path.with_name("result.json")))
    except ChildFailedError as exc:
        rank, how = first_failure(exc)
        print(f"autotune: this node's rank {rank} {how}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the rendezvous never formed: the driver's node says why
        print(f"autotune: this node's launcher failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    return 0


def rank_main(request_path: str, result_path: str) -> None:
    """One rank: its share of the cores, its process group, its window, its result. A rank
    whose window failed exits non-zero, so the launcher stops the others at once instead of
    leaving them waiting in a collective."""
    import torch
    import torch.distributed as dist

    from autotune.core.distributed import pin_rank
    from autotune.measure import window
    from autotune.measure.script_trial import is_script

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    _stacks_on_request(Path(result_path).parent, rank)
    pin_rank(local, local_world)
    req = TrialRequest.read(Path(request_path))
    cuda = req.device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local)
    script = is_script(req)  # the user's own command: it makes its process group itself
    if not script:
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            timeout=timedelta(seconds=(req.launch or LaunchConfig()).collective_timeout_s))
    mine = dataclasses.replace(
        req, device=f"cuda:{local}" if cuda else req.device,
        progress_path=req.progress_path if rank == 0 else str(rank_path(req.progress_path or "", rank)),
        trace_path=(req.trace_path if rank == 0 or not req.trace_path
                    else str(rank_path(req.trace_path, rank))),
        ceilings={**req.ceilings, "compute": False})
    out = rank_path(result_path, rank)
    if script:  # ends this rank's process at its window's end; returns where the script did
        from autotune.measure.script_trial import run as run_script

        run_script(mine, out, rank=True)
    else:
        window.run(mine, out)
    done = WindowResult.read(out)
    if done.outcome not in ("ok", "compile_fallback"):
        raise RankFailed(f"rank {rank}: {done.outcome}: {done.error}")
    if dist.is_initialized():
        dist.destroy_process_group()


_stack_file: Any = None


def _stacks_on_request(trial_dir: Path, rank: int) -> None:
    """On STACK_SIGNAL, write this rank's stack to stack.rank<N>.txt: a stalled trial's ranks
    all stop beating (the others wait on the stuck one in a collective), and only their stacks
    tell which one is stuck, and where (protocol.stalled_ranks reads them for the runner)."""
    global _stack_file
    _stack_file = open(trial_dir / f"stack.rank{rank}.txt", "w")  # noqa: SIM115 - kept open
    _stack_file.write(f"pid {os.getpid()}\n")  # a rank that never answers: was it alive?
    _stack_file.flush()
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=False)


class RankFailed(RuntimeError):
    """A rank's window failed (its result says how): the launcher then stops the others."""


def merge(req: TrialRequest, result_path: Path, world: int, failure: str,
          first: int | None = None) -> WindowResult:
    """The trial's result from its ranks'. Every rank steps in lockstep (DDP's all-reduce each
    step), so the run's pace is its slowest rank's: that rank's result, whose samples/s counts
    every rank's samples over its own synchronized window, is the trial's; the others are
    listed. A failed rank's own result (its exception) is the trial's outcome, named, and the
    ranks that ended because of it named as such (measure/rank_failure.py)."""
    results = {r: _read(rank_path(result_path, r)) for r in range(world)}
    if failure and all(res is None for res in results.values()) and first is None:
        return WindowResult(outcome="crash", error=failure)  # no rank started: the launcher's
    bad = [(r, res) for r, res in results.items()
           if res is not None and res.outcome not in ("ok", "compile_fallback")]
    if bad or failure or any(res is None for res in results.values()):
        missing = [r for r, res in results.items() if res is None]
        return failed(bad, failure, first, missing, result_path.parent)
    done = {r: res for r, res in results.items() if res is not None}
    if req.numerics_steps:
        # Rank 0's losses on its shard: both sides of the comparison ran the same seed, so the
        # same shard, and DDP keeps every rank's parameters the same.
        return done[0]
    slowest = min(done, key=lambda r: done[r].samples_per_sec)
    out = done[slowest]
    out.ranks = sorted(({"rank": r, "samples_per_sec": res.samples_per_sec,
                         "step_ms": (res.step_ms or {}).get("median"),
                         "data_wait": (res.timers or {}).get("data_wait"),
                         "peak_memory_gb": res.peak_memory_gb}
                        for r, res in done.items()), key=lambda d: d["samples_per_sec"])
    # The memory limit holds per rank: the run needs what its fullest rank holds.
    out.peak_memory_gb = max(res.peak_memory_gb for res in done.values())
    _sum_tokens(out, list(done.values()))
    shares = [float(res.comm.get("exposed_share", 0.0)) for res in done.values() if res.comm]
    if shares:
        lows = [float(res.comm.get("exposed_share_low", 0.0)) for res in done.values() if res.comm]
        out.comm = {**out.comm, "slowest_rank": slowest, "exposed_share": max(shares),
                    "exposed_share_low": max(lows), "rank_shares": shares}
        traced = {"rank0": done[0].trace.get("comm"), "slowest": done[slowest].trace.get("comm")}
        if any(traced.values()):
            # Each rank profiled its own steps (the trial's result keeps the slowest's trace
            # summary): rank 0's all-reduce ranges beside the slowest's, which the others
            # waited on (diagnose/comm_trace.py).
            out.comm["trace"] = traced
    return out


def _sum_tokens(out: WindowResult, done: list[WindowResult]) -> None:
    """Tokens as samples are counted: every rank's, over the slowest rank's window. Each rank
    counted only its own batches (they differ in length), so the run's real tokens are the sum
    of the ranks' counts, not one rank's times the ranks."""
    if out.unit != "tokens/s":
        return
    out.tokens = sum(res.tokens for res in done)
    out.tokens_computed = sum(res.tokens_computed for res in done)
    out.tokens_per_sec = out.tokens / out.measure_s if out.measure_s > 0 else 0.0
    out.padding_share = 1 - out.tokens / out.tokens_computed if out.tokens_computed else 0.0


def _read(path: Path) -> WindowResult | None:
    try:
        return WindowResult.read(path)
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    sys.exit(node_main(sys.argv[1]))
