"""The knob registry: every setting autotune tunes, its domain on this device, and when it applies.

Each knob says which values are valid here (and why others are not), and which other knob
values it depends on. How a knob is *applied* lives in ``autotune/core/training.py``, the one place
used by both the trial window and a production run.
"""

from __future__ import annotations

import platform
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import optuna

from autotune.core.env import Env
from autotune.core.stages import split_points
from autotune.core.workload import Workload

#: A loader that waits on I/O may be given up to this many workers per usable core.
IO_WORKERS_PER_CORE = 8


class KnobError(ValueError):
    """A knob override names a value that is not valid on this device."""


@dataclass(frozen=True)
class Domain:
    values: list[Any]
    # Why the domain is narrower than the knob's full range here (e.g. "CUDA only").
    reason: str | None = None


@dataclass(frozen=True)
class Knob:
    name: str
    doc: str
    domain: Callable[[Env, Workload], Domain]
    # Given the values chosen so far, why this knob does not apply (None = it applies).
    inactive: Callable[[Mapping[str, Any]], str | None] = lambda p: None
    # The value the training code sees while the knob is inactive.
    off: Any = None
    # Ordered integers are searched with suggest_int so TPE models their order.
    ordinal: bool = False
    # Trial 0's value when the workload's defaults do not name the knob (default: ``off``).
    baseline: Callable[[Workload], Any] | None = None


def _cuda_only(values: list[Any], off: Any, why: str) -> Callable[[Env, Workload], Domain]:
    def domain(env: Env, wl: Workload) -> Domain:
        if env.device == "cuda":
            return Domain(values)
        return Domain([off], f"{why} (CUDA only)")

    return domain


def _workers(env: Env, wl: Workload) -> Domain:
    return Domain(list(range(0, max(1, env.cpu_count) + 1)))


def _batch_size(env: Env, wl: Workload) -> Domain:
    base = int(wl.defaults.get("batch_size", 32))
    up = 32 if env.device == "cuda" else 4  # CPU: batch 256 steps take seconds each on 2 cores
    lo = max(1, base // 4)
    values, b = [], 1
    while b <= base * up:
        if b >= lo:
            values.append(b)
        b *= 2
    if base not in values:
        values = sorted({*values, base})
    return Domain(values)


def _transfer_dtype(env: Env, wl: Workload) -> Domain:
    if wl.stages():
        return Domain(["float32"], "the workload declares input stages: transform_split decides "
                      "what crosses to the device")
    if wl.splits_transform:
        return Domain(["float32", "uint8"])
    return Domain(["float32"], "the workload does not split its input transform into host/device parts")


def _transform_split(env: Env, wl: Workload) -> Domain:
    stages = wl.stages()
    if not stages:
        return Domain([0], "the workload declares no input stages (Workload.stages())")
    points = split_points(stages)
    if len(points) == 1:
        return Domain(points, f"the last stage ({stages[-1].name}) has no batched device version")
    return Domain(points)


def _all_on_host(wl: Workload) -> int:
    """The staged workload's baseline: every stage on the host, as a plain DataLoader runs it."""
    return len(wl.stages())


def _amp(env: Env, wl: Workload) -> Domain:
    if env.device == "cuda":
        values = ["off", "fp16"] + (["bf16"] if env.bf16 else [])
        return Domain(values, None if env.bf16 else "bf16 not supported by this GPU")
    if env.bf16:
        return Domain(["off", "bf16"], "fp16 autocast is for CUDA; the CPU searches bf16 only")
    return Domain(["off"], "this CPU has no native bf16 (AVX512-BF16 or AMX): bf16 autocast "
                  "would be emulated, slower than fp32")


def _compile(env: Env, wl: Workload) -> Domain:
    if not env.compiler:
        return Domain(["off"], "no C/C++ compiler found for torch.compile's inductor backend")
    if env.device == "cuda":
        if not wl.static_shapes:
            return Domain(["off", "default"], "reduce-overhead and max-autotune replay CUDA "
                          "Graphs, which need static shapes; the workload's batches vary")
        return Domain(["off", "default", "reduce-overhead", "max-autotune"])
    return Domain(
        ["off"],
        "not searched on CPU by default: the inductor C++ compile it needs is not amortized "
        "within a short CPU window; pin knobs.compile=default (or a list) to search it",
    )


def _cuda_graphs(env: Env, wl: Workload) -> Domain:
    if env.device != "cuda":
        return Domain([False], "CUDA Graphs need a CUDA device")
    if not wl.static_shapes:
        return Domain([False], "the workload's batches do not have static shapes")
    return Domain([False, True])


def _channels_last(env: Env, wl: Workload) -> Domain:
    if wl.image_inputs:
        return Domain([False, True])
    return Domain([False], "the workload's inputs are not 4-D images")


def _tf32(env: Env, wl: Workload) -> Domain:
    if env.device != "cuda":
        return Domain([False], "TF32 is a CUDA (Ampere+) matmul mode")
    if (env.cuda_capability or (0, 0)) < (8, 0):
        return Domain([False], "TF32 needs compute capability 8.0+")
    return Domain([False, True])


def _optimizer_impl(env: Env, wl: Workload) -> Domain:
    if env.device == "cuda":
        # torch's optimizers pick foreach by default when every parameter is on a GPU: a
        # "foreach" trial would re-measure the "default" one.
        return Domain(["default", "fused"], "foreach is torch's default on CUDA")
    return Domain(["default", "foreach", "fused"])


def _host_allocator(env: Env, wl: Workload) -> Domain:
    if platform.libc_ver()[0] != "glibc":
        return Domain(["default"], "needs glibc's mallopt (Linux)")
    if env.device == "cuda":
        return Domain(["default"], "searched on CPU, where the step's tensors are host memory; "
                      "on CUDA they are in PyTorch's caching allocator (pin it to search it)")
    return Domain(["default", "retain"])


def _no_workers(p: Mapping[str, Any]) -> str | None:
    return "only with num_workers > 0" if p.get("num_workers", 0) == 0 else None


def _graphs_inactive(p: Mapping[str, Any]) -> str | None:
    if p.get("compile", "off") != "off":
        return "torch.compile is on (its reduce-overhead mode is the compiled route to graphs)"
    if p.get("amp") == "fp16":
        return "fp16's GradScaler synchronizes in step(), which cannot be captured"
    return None


def _graphed_step(p: Mapping[str, Any]) -> str | None:
    if p.get("cuda_graphs"):
        return "a captured step keeps its gradients in place"
    if p.get("compile") in ("reduce-overhead", "max-autotune"):
        # Both modes replay cudagraph trees: gradients kept across steps (zeroed in place)
        # live in the graph pool, which the next replay overwrites.
        return "compile's CUDA Graphs need gradients freed between steps"
    return None


KNOBS: list[Knob] = [
    Knob("num_workers", "DataLoader worker processes (0 = load in the training process).",
         _workers, off=0, ordinal=True),
    Knob("prefetch_factor", "Batches each worker loads ahead.",
         lambda env, wl: Domain([2, 4, 8]), inactive=_no_workers, off=None),
    Knob("persistent_workers", "Keep workers alive across epochs (no respawn at epoch start).",
         lambda env, wl: Domain([False, True]), inactive=_no_workers, off=False),
    Knob("pin_memory", "Page-locked host batches: faster, asynchronous host-to-device copies.",
         _cuda_only([False, True], False, "pinned memory speeds copies to a GPU"), off=False),
    Knob("non_blocking", "Asynchronous host-to-device copies: with pinned memory the host does "
         "not wait for the copy and goes on launching the step and loading the next batch.",
         _cuda_only([False, True], False, "asynchronous copies to a GPU"), off=False),
    Knob("batch_size", "Samples per step. Changes training dynamics: pin it if that matters.",
         _batch_size),
    Knob("transfer_dtype", "float32 = normalize on the host; uint8 = ship raw bytes, "
         "normalize on the device (4x fewer bytes over the bus).", _transfer_dtype, off="float32"),
    Knob("transform_split", "Input stages run on the host per sample before the copy; the "
         "rest run on the device on the whole batch (0 = all on the device). Device resize "
         "differs slightly from PIL's.", _transform_split, off=0, ordinal=True,
         baseline=_all_on_host),
    Knob("amp", "Automatic mixed precision: off, bf16, or fp16 with a GradScaler.", _amp, off="off"),
    Knob("compile", "torch.compile mode (off = eager).", _compile, off="off"),
    Knob("cuda_graphs", "Capture the whole training step once and replay it (CUDA Graphs).",
         _cuda_graphs, inactive=_graphs_inactive, off=False),
    Knob("channels_last", "NHWC memory format for the model and its inputs.",
         _channels_last, off=False),
    Knob("set_to_none", "optimizer.zero_grad(set_to_none=...): free grads instead of zeroing.",
         lambda env, wl: Domain([True, False]), inactive=_graphed_step, off=True),
    Knob("optimizer_impl", "Optimizer kernels: torch's default, foreach (batched) or fused.",
         _optimizer_impl, off="default"),
    Knob("tf32", "Allow TF32 for float32 matmuls (cuDNN convolutions use TF32 by PyTorch's "
         "default either way).", _tf32, off=False),
    Knob("cudnn_benchmark", "cudnn.benchmark: autotune convolution algorithms per shape.",
         _cuda_only([False, True], False, "cuDNN algorithm search"), off=False),
    Knob("host_allocator", "Host malloc: default (glibc returns big freed blocks to the OS) or "
         "retain (keep them for reuse: no page faults for the step's host tensors).",
         _host_allocator, off="default"),
]
BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}


@dataclass(frozen=True)
class Space:
    """The search space for one study: each knob's domain here, narrowed by user overrides."""

    domains: dict[str, Domain]
    baseline: dict[str, Any]
    #: Knobs the user pinned or narrowed (``knobs.<name>=``): proposals stay inside those.
    overridden: frozenset[str] = frozenset()
    #: What the training code ran for each knob before the knob existed (``Knob.baseline``,
    #: else ``off``): a trial stored by an older autotune lacks the knob and ran this.
    absent: dict[str, Any] = field(default_factory=dict)

    @property
    def fixed(self) -> dict[str, tuple[Any, str]]:
        """Knobs with a single value, and why (shown in the study and the report)."""
        return {
            n: (d.values[0], d.reason or "pinned")
            for n, d in self.domains.items()
            if len(d.values) == 1
        }

    @property
    def narrowed(self) -> dict[str, tuple[list[Any], str]]:
        """Searched knobs this device or workload keeps to part of their values, and why
        (compile without the CUDA Graph modes for variable-shape batches)."""
        return {n: (d.values, d.reason) for n, d in self.domains.items()
                if len(d.values) > 1 and d.reason and n not in self.overridden}

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Define-by-run: a knob is only suggested where it applies, so TPE never sees
        meaningless combinations (prefetch_factor without workers, graphs with fp16)."""
        with warnings.catch_warnings():  # an enqueued value past the range (see ``beyond``)
            warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
            return self._suggest(trial)

    def _suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for knob in KNOBS:
            dom = self.domains[knob.name]
            if knob.inactive(values) is not None:
                values[knob.name] = knob.off
            elif len(dom.values) == 1:
                values[knob.name] = dom.values[0]
            elif knob.ordinal and _is_int_range(dom.values):
                values[knob.name] = trial.suggest_int(knob.name, dom.values[0], dom.values[-1])
            else:
                values[knob.name] = trial.suggest_categorical(knob.name, dom.values)
        return values

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Fill every knob from searched params (e.g. a stored trial's) the way suggest would.
        A searched knob the params lack (a study resumed from before the knob existed) gets
        the value its trials really ran under (``absent``: all input stages on the host for
        ``transform_split``), not the domain's first value."""
        values: dict[str, Any] = {}
        for knob in KNOBS:
            dom = self.domains[knob.name]
            if knob.inactive(values) is not None:
                values[knob.name] = knob.off
            elif knob.name in params:
                values[knob.name] = params[knob.name]
            else:
                old = self.absent.get(knob.name, dom.values[0])
                values[knob.name] = old if old in dom.values else dom.values[0]
        return values

    def searched(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna params for a full knob assignment (for enqueue_trial). A value past an
        ordinal domain's end is kept where the knob allows it (see ``beyond``)."""
        out: dict[str, Any] = {}
        for knob in KNOBS:
            dom = self.domains[knob.name]
            if knob.inactive(knobs) is None and len(dom.values) > 1 and knob.name in knobs:
                value = knobs[knob.name]  # absent: stored before the knob existed
                if value in dom.values or value in self.beyond(knob.name):
                    out[knob.name] = value
        return out

    def beyond(self, name: str) -> range:
        """Values past the end of a searched integer range that a proposal may still use:
        more DataLoader workers than cores (up to IO_WORKERS_PER_CORE per core) for a loader
        measured waiting on I/O. Optuna runs such an enqueued value as given (with a warning,
        silenced in ``suggest``); the sampler itself keeps to the range."""
        values = self.domains[name].values
        if name != "num_workers" or name in self.overridden or not _is_int_range(values):
            return range(0)
        top = values[-1]
        return range(top + 1, IO_WORKERS_PER_CORE * max(1, top) + 1)


def fix_text(fix: Mapping[str, Any]) -> str:
    """A diagnosis fix as ``knob=value [+ knob=value]``."""
    changes = {fix["knob"]: fix["value"], **(fix.get("with") or {})}
    return " + ".join(f"{k}={v}" for k, v in changes.items())


def _is_int_range(values: list[Any]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values) and values == list(
        range(values[0], values[-1] + 1)
    )


def build_space(env: Env, wl: Workload, overrides: Mapping[str, Any]) -> Space:
    """Domains on this device, narrowed by ``knobs.<name>=`` overrides (a value pins, a list
    narrows). An override outside the valid domain is an error that names the valid values."""
    domains: dict[str, Domain] = {}
    for knob in KNOBS:
        dom = _limited(knob.domain(env, wl), wl.knob_limits.get(knob.name))
        want = overrides.get(knob.name)
        if want is not None:
            asked = list(want) if isinstance(want, (list, tuple)) else [want]
            bad = [v for v in asked if not _valid(knob, dom, v)]
            if bad:
                why = f" ({dom.reason})" if dom.reason else ""
                raise KnobError(
                    f"knobs.{knob.name}={want!r} is not valid on {env.device}: "
                    f"{', '.join(map(repr, bad))} not in {dom.values!r}{why}. "
                    f"{knob.doc}"
                )
            dom = Domain(asked, "pinned by knobs override" if len(asked) == 1 else "narrowed by knobs override")
        domains[knob.name] = dom
    baseline = _baseline(domains, wl)
    absent = {k.name: k.baseline(wl) if k.baseline else k.off for k in KNOBS}
    return Space(domains, baseline, frozenset(k for k, v in overrides.items() if v is not None),
                 absent)


def _limited(dom: Domain, limit: tuple[list[Any], str] | None) -> Domain:
    """The domain narrowed by the workload's ``knob_limits`` entry (its framework's reach)."""
    if limit is None:
        return dom
    allowed, why = limit
    kept = [v for v in dom.values if v in allowed]
    return Domain(kept, why) if kept and kept != dom.values else dom


#: study.keep_global_batch: the smallest micro-batch is the global batch / 2**this.
MAX_ACCUM_LOG2 = 3


def keep_global_batch(space: Space, global_batch: int) -> Space:
    """The space under ``study.keep_global_batch``: batch_size is the micro-batch, searched over
    the powers-of-two fractions of the global batch (G, G/2, ... G/8 where they divide it);
    the gradient accumulation G / batch_size makes every trial train with G samples per
    optimizer step. A user's narrowing of batch_size must divide G."""
    g = int(global_batch)
    dom = space.domains["batch_size"]
    if "batch_size" in space.overridden:
        bad = [v for v in dom.values if v > g or g % v]
        if bad:
            raise KnobError(
                f"knobs.batch_size={dom.values!r} with study.keep_global_batch=true: "
                f"{', '.join(map(str, bad))} do not divide the global batch {g} (the "
                "workload's batch_size); the micro-batch must be the global batch divided by "
                "a whole number of accumulation steps.")
        values = list(dom.values)
    else:
        values = sorted({g // 2**k for k in range(MAX_ACCUM_LOG2 + 1) if g % 2**k == 0})
    why = (f"study.keep_global_batch: micro-batches of the global batch {g}, with "
           f"{g} / batch_size gradient-accumulation steps")
    return replace(space, domains={**space.domains, "batch_size": Domain(values, why)},
                   baseline={**space.baseline, "batch_size": g if g in values else values[-1]})


def _valid(knob: Knob, dom: Domain, value: Any) -> bool:
    if value in dom.values:
        return True
    # Integers beyond the default range are the user's call (e.g. more workers than cores,
    # a batch size that is not a power of two); other types must be in the domain.
    if knob.name in ("num_workers", "batch_size", "prefetch_factor"):
        return isinstance(value, int) and not isinstance(value, bool) and value >= (
            0 if knob.name == "num_workers" else 1
        )
    if knob.name == "host_allocator":
        return value in ("default", "retain") and "glibc" not in (dom.reason or "")
    if knob.name == "compile":
        return value in ("off", "default", "reduce-overhead", "max-autotune") and (
            len(dom.values) > 1 or "no C/C++ compiler" not in (dom.reason or "")
        ) and not (value in ("reduce-overhead", "max-autotune") and "static shapes" in (dom.reason or ""))
    return False


def _baseline(domains: Mapping[str, Domain], wl: Workload) -> dict[str, Any]:
    """Trial 0: the workload's own defaults (its user's current setup), where valid here."""
    values: dict[str, Any] = {}
    for knob in KNOBS:
        dom = domains[knob.name]
        if knob.inactive(values) is not None:
            values[knob.name] = knob.off
            continue
        fallback = knob.baseline(wl) if knob.baseline else knob.off
        default = wl.defaults.get(knob.name, fallback)
        values[knob.name] = default if default in dom.values else dom.values[0]
    return values
