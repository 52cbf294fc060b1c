"""What this machine offers, learnt in a throw-away subprocess.

The driver process never initializes CUDA: a CUDA context poisoned by an illegal access or an
OOM dies with the process that made it, so only children (this probe, trial windows) touch it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any


class DeviceError(RuntimeError):
    """The requested device is not available here."""


@dataclass(frozen=True)
class Env:
    device: str  # "cpu" | "cuda"
    device_name: str
    total_memory_gb: float
    cpu_count: int
    cuda_capability: tuple[int, int] | None
    bf16: bool
    compiler: bool
    torch_version: str
    cuda_version: str | None
    gpu_count: int
    #: The host's processor (loaders run on it, on CUDA too); None in studies made before it.
    cpu_model: str | None = None
    #: torch's intra-op threads in a fresh process here (its default, or OMP_NUM_THREADS):
    #: what the user's training runs with today (the cpu_threads knob's baseline).
    torch_threads: int | None = None
    #: Ranks each trial runs as (launch.nproc_per_node x launch.nnodes); > 1: cpu_count is one
    #: local rank's share of the node's cores (core/distributed.py) and the DDP knobs apply.
    ranks: int = 1
    #: Nodes the ranks span (launch.nnodes): hybrid sharding needs more than one.
    nodes: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cuda_capability"] = list(self.cuda_capability) if self.cuda_capability else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Env:
        cap = d.get("cuda_capability")
        return cls(**{**d, "cuda_capability": tuple(cap) if cap else None})


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _probe_here(requested: str) -> dict[str, Any]:
    import psutil
    import torch

    cuda = torch.cuda.is_available()
    if requested == "cuda" and not cuda:
        raise DeviceError(
            "device=cuda was requested but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}). "
            "Valid here: device=cpu or device=auto."
        )
    device = "cuda" if (requested == "cuda" or (requested == "auto" and cuda)) else "cpu"
    common = {
        "cpu_count": usable_cpus(),
        "compiler": shutil.which(os.environ.get("CXX", "g++")) is not None
        or shutil.which("clang++") is not None,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "cpu_model": cpu_model(),
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return {
            "device": "cuda",
            "device_name": props.name,
            "total_memory_gb": props.total_memory / 2**30,
            "cuda_capability": [props.major, props.minor],
            "bf16": _cuda_has_native_bf16(torch),
            **common,
        }
    import platform

    return {
        "device": "cpu",
        "device_name": cpu_model() or platform.processor() or platform.machine() or "cpu",
        "total_memory_gb": psutil.virtual_memory().total / 2**30,
        "cuda_capability": None,
        "bf16": _cpu_has_native_bf16(),
        **common,
    }


def _cuda_has_native_bf16(torch: Any) -> bool:
    """bf16 in hardware (Ampere+), not emulated: by default is_bf16_supported() also says yes
    on a V100 or T4, where bf16 runs slower than fp16."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch without the argument: capability 8.0+ is native bf16
        return torch.cuda.get_device_capability(0) >= (8, 0)


def cpu_model() -> str | None:
    """The processor's model name (/proc/cpuinfo): CPU figures differ by vendor and
    generation (AVX-512, AMX), so a study's device must say which one measured them."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _cpu_has_native_bf16() -> bool:
    """oneDNN runs bf16 fast only with AVX512-BF16 or AMX; elsewhere it is emulated."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


def probe(requested: str, timeout_s: float = 120.0) -> Env:
    """Resolve ``device=cpu|cuda|auto`` and describe the device, in a subprocess."""
    if requested not in ("cpu", "cuda", "auto"):
        raise DeviceError(f"device={requested!r} is not valid. Valid: cpu, cuda, auto.")
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.core.env", requested],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=child_environ(),
    )
    if proc.returncode == 3:
        raise DeviceError(proc.stderr.strip().splitlines()[-1])
    if proc.returncode != 0:
        raise DeviceError(
            f"probing device={requested} failed (exit {proc.returncode}): "
            + "\n".join(proc.stderr.strip().splitlines()[-5:])
        )
    return Env.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))


#: Set on a script's discovery run (workloads/script.py): where the script's ``autotune.Runtime``
#: writes the settings its calls passed and the knobs they reach (production/settings.py).
DISCOVER_ENV = "AUTOTUNE_DISCOVER"


def child_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: our import path, so user workloads found by the driver
    (installed, on PYTHONPATH, or in the working directory) are found by the child too."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p]
    if "" in sys.path or os.getcwd() not in paths:
        paths.insert(0, os.getcwd())
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


if __name__ == "__main__":
    try:
        print(json.dumps(_probe_here(sys.argv[1])))
    except DeviceError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(3)
