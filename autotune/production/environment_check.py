"""Is this machine the one a best.yaml was measured on?

A configuration's speed belongs to the device and the libraries that measured it: another
GPU model, another torch or CUDA, even another CPU (the loader's workers run on it) can make
the best configuration slower than a rejected one. ``load_best`` calls
``warn_if_environment_changed``: one ``EnvironmentChanged`` warning naming every difference.
Fields a best.yaml lacks (one written before they were recorded) are not compared.
"""

from __future__ import annotations

import warnings
from typing import Any

from autotune.core.env import cpu_model


class EnvironmentChanged(UserWarning):
    """best.yaml was measured on another device or with other library versions."""


def current_environment(device_type: str | None) -> dict[str, Any]:
    """This process's torch, CUDA build, host CPU, and the name of the device of the measured
    type (the first GPU for CUDA; the host CPU for CPU). Touches CUDA only for a CUDA
    best.yaml, in the user's own training process."""
    import torch

    cpu = cpu_model()
    name: str | None
    if device_type == "cuda":
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    else:
        name = cpu
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "name": name, "cpu": cpu}


def differences(document: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """``what: measured X, here Y`` for each recorded field that differs."""
    measured = document.get("device") or {}
    here = here if here is not None else current_environment(measured.get("type"))
    labels = {"name": "device" if measured.get("type") == "cuda" else "CPU",
              "torch": "torch", "cuda": "CUDA (torch build)", "cpu": "host CPU"}
    out = []
    for key, label in labels.items():
        if key == "cpu" and measured.get("type") != "cuda":
            continue  # on a CPU study the device name is the CPU model already
        if key in measured and measured[key] is not None and measured[key] != here.get(key):
            out.append(f"{label}: measured {measured[key]}, here {here.get(key)}")
    return out


def warn_if_environment_changed(document: dict[str, Any], source: str) -> list[str]:
    """One warning listing every difference (none when the environment matches)."""
    diffs = differences(document)
    if diffs:
        warnings.warn(
            f"autotune: {source} was measured elsewhere ({'; '.join(diffs)}). Its knobs still "
            "apply, but their speed is not the measured one and another configuration may now "
            "be faster: re-run the study on this machine to be sure.",
            EnvironmentChanged, stacklevel=3)
    return diffs
