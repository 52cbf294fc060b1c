"""What else the machine was doing while a window measured (CHILD side): CPU time used by
processes outside the trial's own tree, the runqueue wait of the trial's threads, steal time,
the container's CPU throttling, and on a GPU what NVML says (measure/nvml.py).

Why per window: on a shared machine a figure is only as good as the quiet it was taken in. A
trial beside one CPU hog on a 2-core VM read 8.6 samples/s where the quiet machine gives 100,
and nothing said so. Each window now states its load, and a window over the thresholds
(diagnose/thresholds.py) is ``contended``: the driver measures it again after a short wait
and never prunes on it.

All readings are cumulative counters taken at two moments; their differences are the window's.
Linux only (/proc); elsewhere every figure is None and no window is ever called contended.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from autotune.core.env import usable_cpus
from autotune.diagnose.thresholds import (
    CONTENDED_OTHER_SHARE,
    CONTENDED_STEAL_SHARE,
    CONTENDED_THROTTLED_SHARE,
    CONTENDED_WAIT_SHARE,
)

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Snapshot:
    """Cumulative counters at one moment."""

    at: float
    busy_s: float | None = None  # all CPUs' non-idle time, steal excluded (/proc/stat)
    steal_s: float | None = None
    total_s: float | None = None  # all CPUs' time, idle and steal included
    own_cpu_s: float = 0.0  # the trial's process tree: this process, its children, reaped ones
    own_run_s: float = 0.0  # schedstat: time the tree's threads ran ...
    own_wait_s: float = 0.0  # ... and waited runnable for a CPU
    throttled_s: float | None = None  # cgroup v2 cpu.stat throttled_usec
    gpu: dict[str, Any] = field(default_factory=dict)


def snapshot(gpu: Any = None) -> Snapshot:
    """Read every counter now (a few small /proc reads: cheap enough for each chunk edge)."""
    snap = Snapshot(at=time.monotonic())
    stat = _proc_stat()
    if stat is not None:
        snap.busy_s, snap.steal_s, snap.total_s = stat
    snap.own_cpu_s, snap.own_run_s, snap.own_wait_s = _own_tree()
    snap.throttled_s = _cgroup_throttled_s()
    if gpu is not None:
        snap.gpu = gpu.read()
    return snap


def _proc_stat() -> tuple[float, float, float] | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    busy = user + nice + system + irq + softirq  # guest time is inside user already
    return busy / _HZ, steal / _HZ, (busy + idle + iowait + steal) / _HZ


#: Set by a trial that launches ranks (measure/ranks.py) to its own pid: each rank's tree is
#: then the whole trial's (the launcher, every rank, their loader workers), so a rank does not
#: count its sibling ranks as other processes loading the machine.
TRIAL_ROOT_ENV = "AUTOTUNE_TRIAL_ROOT"


def tree_root() -> int:
    """The process whose tree is the measured run's own: the trial that launched ranks
    (TRIAL_ROOT_ENV); a rank of a run under torchrun, its launcher (torch's elastic agent,
    whose children the local ranks are), so that a production run's meter does not read its
    sibling ranks as another job; else this process."""
    if os.environ.get(TRIAL_ROOT_ENV):
        return int(os.environ[TRIAL_ROOT_ENV])
    if os.environ.get("TORCHELASTIC_RUN_ID") and int(os.environ.get("LOCAL_WORLD_SIZE") or 1) > 1:
        return os.getppid()
    return os.getpid()


def _own_tree() -> tuple[float, float, float]:
    """CPU time of the trial's process tree (live processes per thread from schedstat,
    reaped ones from the kernel's children totals), and the live threads' run and wait."""
    root = tree_root()
    if root == os.getpid():
        t = os.times()
        cpu = t.user + t.system + t.children_user + t.children_system
        top = psutil.Process()
    else:
        try:
            top = psutil.Process(root)
            ct = top.cpu_times()
            cpu = ct.user + ct.system + ct.children_user + ct.children_system
        except psutil.Error:  # the launcher is gone: this rank is about to be
            return 0.0, 0.0, 0.0
    run = wait = 0.0
    pids = [root]
    try:
        kids = top.children(recursive=True)
    except psutil.Error:
        kids = []
    for kid in kids:
        try:
            ct = kid.cpu_times()
            cpu += ct.user + ct.system
            pids.append(kid.pid)
        except psutil.Error:
            pass
    for pid in pids:
        r, w = _schedstat_tree(pid)
        run, wait = run + r, wait + w
    return cpu, run, wait


def _schedstat_tree(pid: int) -> tuple[float, float]:
    run = wait = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0, 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                fields = f.read().split()
            run, wait = run + int(fields[0]) / 1e9, wait + int(fields[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return run, wait


def _cgroup_throttled_s() -> float | None:
    """Seconds this cgroup was held back by its CPU quota (cgroup v2), None where unknown."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        if rel is None:
            return None
        with open(f"/sys/fs/cgroup{rel}/cpu.stat") as f:
            for line in f:
                if line.startswith("throttled_usec"):
                    return int(line.split()[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cpu_set() -> list[int] | None:
    """The cores this process may run on (a worker's or a rank's share), where the OS says."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None


def between(a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """The load between two snapshots, and whether it makes the window ``contended``:
    other processes used at least CONTENDED_OTHER_SHARE of the CPUs *and* the trial's threads
    waited for a CPU for at least CONTENDED_WAIT_SHARE of their demand (load elsewhere that
    did not delay the trial is named, not held against it); or steal or the container's quota
    took CONTENDED_STEAL_SHARE / CONTENDED_THROTTLED_SHARE of the time; or the GPU had other
    processes or throttled for heat or power brake (measure/nvml.py)."""
    elapsed = max(b.at - a.at, 1e-9)
    n = usable_cpus()  # its affinity: a container or taskset may allow fewer than the machine has
    out: dict[str, Any] = {"seconds": round(elapsed, 3), "cpus": n, "cpu_set": _cpu_set()}
    reasons: list[str] = []
    if a.busy_s is not None and b.busy_s is not None and b.total_s and a.total_s is not None:
        machine = os.cpu_count() or n
        out["machine_cpus"] = machine  # what other_cpu_cores is a share of (a rank has fewer)
        own = max(0.0, b.own_cpu_s - a.own_cpu_s)
        other = max(0.0, (b.busy_s - a.busy_s) - own) / elapsed  # cores
        out["other_cpu_cores"] = round(other, 2)
        out["own_cpu_cores"] = round(own / elapsed, 2)
        total = max(b.total_s - a.total_s, 1e-9)
        out["steal_share"] = round(max(0.0, (b.steal_s or 0) - (a.steal_s or 0)) / total, 3)
        run, wait = b.own_run_s - a.own_run_s, b.own_wait_s - a.own_wait_s
        out["runqueue_wait_share"] = round(wait / (run + wait), 3) if run + wait > 0 else 0.0
        if other / machine >= CONTENDED_OTHER_SHARE and out["runqueue_wait_share"] >= CONTENDED_WAIT_SHARE:
            reasons.append(f"other processes used {other:.1f} of {machine} cores and the trial "
                           f"waited for a CPU {100 * out['runqueue_wait_share']:.0f}% of the time "
                           "it wanted one")
        if out["steal_share"] >= CONTENDED_STEAL_SHARE:
            reasons.append(f"the hypervisor took {100 * out['steal_share']:.0f}% of the CPU time (steal)")
    if a.throttled_s is not None and b.throttled_s is not None:
        share = max(0.0, b.throttled_s - a.throttled_s) / elapsed
        out["throttled_share"] = round(share, 3)
        if share >= CONTENDED_THROTTLED_SHARE:
            reasons.append(f"the container's CPU quota held the trial back {100 * share:.0f}% of the time")
    if b.gpu:
        from autotune.measure.nvml import gpu_between

        gpu, why = gpu_between(a.gpu, b.gpu, elapsed)
        out["gpu"] = gpu
        reasons += why
    out["contended"] = bool(reasons)
    if reasons:
        out["reasons"] = reasons
    return out
