"""How a trial's process is started: forked from a fork server that has torch preloaded.

Every trial still gets a fresh process of its own (own session and process group, own CUDA
context), but it starts in milliseconds instead of re-importing torch (seconds per trial). The
server imports modules only: it never runs a torch op or touches CUDA, so forking from it is
safe. If the driver dies, the trial notices within a second and kills its own process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext
from typing import Any

#: What every trial would otherwise import after its fork: its window's code, torchvision, and
#: what the framework adapters' and the Python API's workloads import (production's best.yaml
#: reader and Runtime: 0.35 s a trial on 2 cores, once here). ``import autotune`` alone no
#: longer imports them (autotune/__init__.py).
PRELOAD = ["autotune.measure.entry", "autotune.measure.window", "torchvision",
           "autotune.production.runtime", "autotune.adapters",
           "autotune.measure.server_exit"]  # last: its exit handler runs first
PROCESS_NAME = b"autotune-trial"  # what ps/psutil show for a trial (Linux comm, <= 15 bytes)
#: The cores a trial may run on ("0,1"), for the trials of one of several workers on a node.
CPUS_ENV = "AUTOTUNE_CPUS"

_context: ForkServerContext | None = None
_MAIN_LOCK = threading.RLock()
_starting: threading.Thread | None = None  # start_server_soon's thread, once started


def context() -> ForkServerContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([m for m in PRELOAD if _importable(m)])
        _context = ctx
    return _context


def start_server() -> None:
    """Start the fork server now (it imports torch: seconds), so that cost is the study's
    start-up and not the first trial's wall time, which pruning statistics compare with."""
    probe = context().Process(target=_noop, daemon=True)  # returns once the server forked it
    with _main_left_alone():  # or the child runs an unguarded script's study again
        probe.start()
    probe.join()


def _noop() -> None:
    pass


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _prctl(option: int, arg: Any) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the next driver reaps lost trials instead
        pass


def _follow_driver(driver_pid: int, interval_s: float = 1.0) -> None:
    """If the driver is killed (even by SIGKILL), end this trial's whole process group.

    The fork server cannot do it for us: Python hands every forked child the server's
    keep-alive pipe, so the server outlives the driver for as long as a trial runs."""
    while True:
        time.sleep(interval_s)
        if not _alive(driver_pid):
            os.killpg(0, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running, not merely an unreaped zombie."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except ProcessLookupError:
        return False
    except OSError:  # no /proc: existence is all we can tell
        return True


def _trial_entry(request: str, result: str, log: str, env: dict[str, str],
                 driver_pid: int) -> None:
    """In the new process: its own process group (so the runner can kill it and its
    DataLoader workers as one), die with the driver, log to a file.

    A process group, not a session: with the kernel's autogroup scheduling (on by default on
    desktop and cloud kernels, /proc/sys/kernel/sched_autogroup_enabled) every session is a
    scheduling group that gets an equal share of the CPUs. A trial in a session of its own,
    beside one CPU hog elsewhere, got one of two cores for its two intra-op threads: a
    ResNet-18 step took 2,984-3,316 ms where the same loop in the driver's session took
    620-641 ms (2026-11-25, docs/benchmarks.md "Busy machines"). In the driver's session a trial
    competes for the CPUs as the user's own training, started from the same shell, would."""
    os.setpgid(0, 0)
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the fork server too
    threading.Thread(target=_follow_driver, args=(driver_pid,), daemon=True).start()
    _prctl(15, ctypes.c_char_p(PROCESS_NAME))  # PR_SET_NAME
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.environ.update(env)  # e.g. CUDA_VISIBLE_DEVICES: read when CUDA initializes, later
    if env.get(CPUS_ENV):  # one of several workers' trials: its own cores
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {int(c) for c in env[CPUS_ENV].split(",")})
    # A fork-server child inherits "forkserver" as its start method, so its DataLoader workers
    # would start through a second, empty fork server that re-imports torch: seconds per worker
    # start (at every epoch without persistent_workers), and semaphores left to the driver's
    # resource tracker. Production starts them with the interpreter's default; so do trials.
    multiprocessing.set_start_method(None, force=True)
    from autotune.measure.entry import main

    code = main(request, result)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


@contextlib.contextmanager
def _main_left_alone() -> Iterator[None]:
    """Start a process without multiprocessing re-running the caller's ``__main__`` in it.

    multiprocessing prepares a forkserver child by importing the parent's main module again
    (as ``__mp_main__``), so that functions defined there can be unpickled. A trial needs
    nothing from it (its target is ``_trial_entry``; the user's own objects travel in their
    shipped file, autotune/core/shipping.py), and a script that calls ``autotune.tune`` at
    its top level, without an ``if __name__ == "__main__"`` guard as notebook code is written,
    would run its whole study again inside every trial. So the main module's file and spec
    are hidden for the moment the child's preparation data is taken."""
    with _MAIN_LOCK:  # the fork server may be starting in a thread (start_server_soon)
        main = sys.modules.get("__main__")
        if main is None:
            yield
            return
        saved: dict[str, Any] = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__")
                                 if k in main.__dict__}
        main.__spec__ = None  # read unguarded by multiprocessing.spawn.get_preparation_data
        try:
            yield
        finally:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


class TrialProcess:
    """A started trial: a Popen-like view of a fork-server child."""

    def __init__(self, request: str, result: str, log: str, env: dict[str, str]):
        self._proc = context().Process(target=_trial_entry,
                                       args=(request, result, log, env, os.getpid()), daemon=False)
        with _main_left_alone():
            self._proc.start()
        assert self._proc.pid is not None  # set by start()
        self.pid: int = self._proc.pid  # also its session and process-group id

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int | None:
        self._proc.join(timeout)
        return self._proc.exitcode

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode


def start_server_soon() -> threading.Thread:
    """Start the fork server in the background: its imports (torch, torchvision: seconds)
    overlap the driver's own imports, configuration, storage and workload setup instead of
    following them. ``start_server`` and ``probe_env`` wait for it (multiprocessing's fork
    server starts once, under its own lock). Called again, it returns the first call's thread:
    the command line starts it before composing, the study's run where ``autotune.tune``
    enters."""
    global _starting
    with _MAIN_LOCK:
        if _starting is None:
            _starting = threading.Thread(target=start_server, name="autotune-forkserver",
                                         daemon=True)
            _starting.start()
        return _starting


def probe_env(requested: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """The device probe (core/env._probe_here) in a child of the fork server: torch is imported
    there already, so it takes milliseconds where core.env.probe's fresh interpreter spent
    seconds importing torch again, before the fork server's own start (benchmarks/
    cli_overhead.py). As there, the probe's CUDA context dies with its process, never the
    driver's.
    Raises core.env.DeviceError as core.env.probe does, RuntimeError where the probe's
    process died without saying why."""
    from autotune.core.env import DeviceError

    ctx = context()
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_entry, args=(requested, writer), daemon=True)
    with _main_left_alone():
        proc.start()
    writer.close()
    try:
        if not reader.poll(timeout_s):
            raise DeviceError(f"probing device={requested} took more than {timeout_s:.0f} s")
        kind, value = reader.recv()
    except EOFError:  # it died without a word: the caller probes in a fresh interpreter
        raise RuntimeError(f"the probe's process died (exit {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if kind == "error":
        raise DeviceError(value)
    return dict(value)


def _probe_entry(requested: str, writer: Any) -> None:
    from autotune.core.env import DeviceError, _probe_here

    try:
        writer.send(("ok", _probe_here(requested)))
    except DeviceError as exc:
        writer.send(("error", str(exc)))
    finally:
        writer.close()
