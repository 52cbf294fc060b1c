"""NVML readings of the trial's GPU at a window's edges (CHILD side): other processes on the
device and their memory, utilization, SM clock against its maximum, clock-event (throttle)
reasons, and energy over the window where the device reports it.

Why: on a GPU node another job on the same device, or a GPU slowed for heat or a power brake,
changes a figure as much as any knob. ``pynvml`` (nvidia-ml-py) is a core dependency; where the
library or the driver is missing, every reading is a plain "not available" and nothing else
changes.
"""

from __future__ import annotations

from typing import Any

#: Clock-event reasons that mean the GPU was slowed by something other than the trial's own
#: load. SW power cap is left out: a GPU under full load at its power limit is normal running.
_SLOWDOWN = {
    "HwSlowdown": 0x8, "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
}
_NAMED = {"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, **_SLOWDOWN,
          "SyncBoost": 0x10, "DisplayClockSetting": 0x100}


class GpuReader:
    """One device's NVML handle, opened once per trial process. ``available`` is False with a
    ``reason`` where NVML cannot be used (no library, no driver, no such device)."""

    def __init__(self, device_index: int = 0):
        self.available, self.reason, self.handle = False, "", None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = self._handle(device_index)
            self.available = True
        except Exception as exc:  # noqa: BLE001 - NVML missing or broken is "not available"
            self.reason = f"NVML not available: {type(exc).__name__}: {exc}"[:200]

    def _handle(self, index: int) -> Any:
        """The NVML handle of torch's device ``index``: by UUID, because NVML numbers the
        physical devices and CUDA_VISIBLE_DEVICES renumbers them for torch."""
        import torch

        nv = self.nvml
        try:
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:  # noqa: BLE001 - older torch without .uuid: the first visible one
            return nv.nvmlDeviceGetHandleByIndex(index)

    def read(self) -> dict[str, Any]:
        if not self.available:
            return {"available": False, "reason": self.reason}
        nv, h = self.nvml, self.handle
        out: dict[str, Any] = {"available": True}
        own = _own_pids()
        for key, call in (
            ("utilization_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            ("sm_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            ("clock_events", lambda: int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))),
            ("energy_mj", lambda: int(nv.nvmlDeviceGetTotalEnergyConsumption(h))),
            ("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            ("others", lambda: _others(nv, h, own)),
        ):
            try:
                out[key] = call()
            except Exception:  # noqa: BLE001 - a field this device or driver does not report
                out[key] = None
        return out


def _own_pids() -> set[int]:
    """The trial's own tree and the processes it descends from: the study's driver is the
    user's process when they tune a live object (a Hugging Face Trainer places its model on
    the GPU when it is built), idle on the GPU while the trial runs; counted as another
    process it made every window of an LM study on one H200 read as contended (2026-11-28)."""
    import psutil

    me = psutil.Process()
    try:
        return ({me.pid} | {p.pid for p in me.children(recursive=True)}
                | {p.pid for p in me.parents()})
    except psutil.Error:
        return {me.pid}


def _others(nv: Any, handle: Any, own: set[int]) -> dict[str, Any]:
    """Processes on the device outside the trial's tree and the memory they hold. Inside a
    container NVML may see no PIDs at all: then the memory in use beyond our own is the tell."""
    procs = list(nv.nvmlDeviceGetComputeRunningProcesses(handle))
    procs += list(nv.nvmlDeviceGetGraphicsRunningProcesses(handle))
    others = [p for p in procs if p.pid not in own]
    used = sum(int(p.usedGpuMemory or 0) for p in others)
    return {"count": len(others), "memory_gb": round(used / 2**30, 3)}


def gpu_between(a: dict[str, Any], b: dict[str, Any], elapsed_s: float) -> tuple[dict[str, Any], list[str]]:
    """The window's GPU figures and the reasons (if any) that make it contended."""
    if not b.get("available"):
        return {"available": False, "reason": b.get("reason", "NVML not available")}, []
    out: dict[str, Any] = {k: b.get(k) for k in ("utilization_pct", "sm_clock_mhz",
                                                  "sm_clock_max_mhz", "temperature_c")}
    if a.get("energy_mj") is not None and b.get("energy_mj") is not None and elapsed_s > 0:
        out["energy_j"] = round((b["energy_mj"] - a["energy_mj"]) / 1e3, 1)
        out["power_w"] = round(out["energy_j"] / elapsed_s, 1)
    events = (a.get("clock_events") or 0) | (b.get("clock_events") or 0)
    out["clock_events"] = [n for n, bit in _NAMED.items() if events & bit]
    reasons = []
    slowed = [n for n, bit in _SLOWDOWN.items() if events & bit]
    if slowed:
        reasons.append(f"the GPU slowed its clocks ({', '.join(slowed)})")
    others = b.get("others") or {}
    out["other_processes"] = others.get("count")
    out["other_memory_gb"] = others.get("memory_gb")
    if others.get("count"):
        reasons.append(f"{others['count']} other process(es) on the GPU holding "
                       f"{others.get('memory_gb', 0):.1f} GB")
    return out, reasons

