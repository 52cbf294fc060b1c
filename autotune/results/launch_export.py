"""best.yaml's ``launch`` section and ``ddp_kwargs``: how the production run is launched, as
the study's trials were (measure/ranks.py), and the DDP arguments it measured.

The command is ``torchrun``'s, for the user's own script: every rank of the run gets the
measured ``OMP_NUM_THREADS`` (torchrun sets 1 for several ranks; the trial's rank set its share
of the cores, and ``autotune.Runtime`` pins each rank to that share again); the script builds
its model with ``rt.ddp(rt.model(...))`` and its loader with ``rt.dataloader`` (a
DistributedSampler per rank), as examples/ddp_train.py does.
"""

from __future__ import annotations

from typing import Any

from autotune.core.distributed import COMM_HOOKS, ddp_kwargs

#: The placeholder a user replaces with their training script (and its arguments).
SCRIPT = "your_train.py"


def launch_section(launch: dict[str, Any] | None, knobs: dict[str, Any],
                   device: dict[str, Any]) -> dict[str, Any] | None:
    """None for a study of one process."""
    if not launch:
        return None
    nproc = int(launch["nproc_per_node"])
    cores = int(device.get("cpu_count") or 1)  # one rank's share (cli/app.ranked)
    threads = int(knobs.get("cpu_threads") or 0) or max(1, cores - int(knobs.get("num_workers") or 0))
    env = {"OMP_NUM_THREADS": str(threads)}
    nnodes = int(launch.get("nnodes", 1))
    # One node: a rendezvous of its own (--standalone). Several: the same command on every
    # node, meeting at one endpoint under one job id, as the study's trials met.
    meet = ("--standalone" if nnodes == 1 else
            f"--rdzv-backend=c10d --rdzv-endpoint={launch.get('rdzv_endpoint') or 'HOST:PORT'}"
            " --rdzv-id=$JOB_ID")
    command = (" ".join(f"{k}={v}" for k, v in env.items())
               + f" torchrun {meet} --nnodes={nnodes} --nproc_per_node={nproc} {SCRIPT}")
    return {"nproc_per_node": nproc, "nnodes": int(launch.get("nnodes", 1)),
            "backend": launch.get("backend"), "cores_per_rank": cores,
            "environment": env, "torchrun": command}


def ddp_section(launch: dict[str, Any] | None, knobs: dict[str, Any],
                torch_version: str | None,
                comm: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """DistributedDataParallel's arguments as the measured torch names them, with the
    ``find_unused_parameters`` the best trial's ranks ran with (``comm``: its measurement; a
    framework's rule, Workload.ddp_arguments; DDP's default False otherwise)."""
    if not launch:
        return None
    return {**ddp_kwargs(knobs, torch_version),
            "find_unused_parameters": bool((comm or {}).get("find_unused_parameters", False))}


def ddp_step_section(knobs: dict[str, Any]) -> dict[str, Any]:
    """What the DDP step does beyond the wrapper's arguments, for a script without
    ``rt.ddp``/``rt.wrap`` (which apply both): the communication hook to register on the
    wrapper (null: DDP's own all-reduce), and whether the micro-batches of an accumulation
    cycle but its last run under ``model.no_sync()``."""
    hook = knobs.get("comm_hook") or "none"
    return {"comm_hook": COMM_HOOKS.get(hook),
            "register": f"model.register_comm_hook(None, {COMM_HOOKS[hook].rpartition('.')[2]})"
            if hook in COMM_HOOKS else None,
            "accumulation_no_sync": bool(knobs.get("accumulation_no_sync", False))}
