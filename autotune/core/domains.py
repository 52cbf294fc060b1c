"""Each knob's domain on this device and for this workload, and when a knob does not apply.

The knob registry (core/knobs.py) names these; they are kept apart so that the registry reads
as one table. A domain says which values are valid here and, where it is narrower than the
knob's full range, why (printed at the study's start and kept in best.yaml's ``fixed_knobs``).
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from autotune.core.batch import measure_shapes
from autotune.core.env import Env
from autotune.core.global_batch import accumulation, declared_accumulation, dividing_batches
from autotune.core.stages import split_points
from autotune.core.workload import Workload, WorkloadError


@dataclass(frozen=True)
class Domain:
    values: list[Any]
    # Why the domain is narrower than the knob's full range here (e.g. "CUDA only").
    reason: str | None = None
    # Given the knob values chosen before this knob, why one of its values cannot run with
    # them (None: it can). A value rule, where a knob's ``inactive`` rules out the whole knob:
    # the values it refuses are never suggested, so no trial is spent failing on them.
    refuses: Callable[[Mapping[str, Any], Any], str | None] | None = None
    # The knobs (earlier in the registry) whose values ``refuses`` reads.
    reads: tuple[str, ...] = ()
    # Values a user may list beyond ``values`` (an opt-in knob's other values that run here:
    # knobs.<name>=[...] searches them); its default alone is searched until then.
    offers: tuple[Any, ...] = ()


def cuda_only(values: list[Any], off: Any, why: str) -> Callable[[Env, Workload], Domain]:
    def domain(env: Env, wl: Workload) -> Domain:
        if env.device == "cuda":
            return Domain(values)
        return Domain([off], f"{why} (CUDA only)")

    return domain


def ranks_only(values: list[Any], off: Any, alone: str) -> Callable[[Env, Workload], Domain]:
    """A setting of launched ranks: searched when each trial runs as several ranks
    (launch.nproc_per_node or launch.nnodes above 1), else fixed at ``off`` because ``alone``."""
    def domain(env: Env, wl: Workload) -> Domain:
        if env.ranks > 1:
            return Domain(values)
        return Domain([off], f"one process: {alone} (launch.nproc_per_node=N runs every trial "
                      "as N ranks)")

    return domain


def ddp_only(values: list[Any], off: Any) -> Callable[[Env, Workload], Domain]:
    """A DDP argument: fixed at DDP's default in one process, where it is never applied."""
    return ranks_only(values, off, "no DistributedDataParallel")


def batched_grad_copy(env: Env, wl: Workload) -> Domain:
    """A DDP argument of torch 2.14 and later: searched with several ranks where torch has it."""
    from autotune.core.distributed import has_ddp_argument

    if not has_ddp_argument("batched_grad_copy"):
        return Domain([False], "this torch's DistributedDataParallel has no batched_grad_copy "
                      "(torch 2.14 and later)")
    return ddp_only([False, True], False)(env, wl)


def comm_hook(env: Env, wl: Workload) -> Domain:
    """DDP's all-reduce as is, unless the user lists compressed ones: an fp16 or bf16 hook
    sends half the bytes but sums the gradients in that precision, which changes training."""
    if env.ranks <= 1:
        return ddp_only(["none"], "none")(env, wl)
    return Domain(["none"], "gradients compressed to fp16 or bf16 for the all-reduce change "
                  "the numerics: list values to search them, e.g. knobs.comm_hook=[none,bf16]")


def workers(env: Env, wl: Workload) -> Domain:
    return Domain(list(range(0, max(1, env.cpu_count) + 1)))


def batch_size(env: Env, wl: Workload) -> Domain:
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
    accum = declared_accumulation(wl)
    if accum > 1:  # the micro-batches that keep the user's global batch are tried too
        values = sorted({*values, *dividing_batches(base * accum, values, lo)})
    return Domain(values)


def transfer_dtype(env: Env, wl: Workload) -> Domain:
    if wl.stages():
        return Domain(["float32"], "the workload declares input stages: transform_split decides "
                      "what crosses to the device")
    if wl.splits_transform:
        return Domain(["float32", "uint8"])
    return Domain(["float32"], "the workload does not split its input transform into host/device parts")


def transform_split(env: Env, wl: Workload) -> Domain:
    stages = wl.stages()
    if not stages:
        return Domain([0], "the workload declares no input stages (Workload.stages())")
    points = split_points(stages)
    if len(points) == 1:
        return Domain(points, f"the last stage ({stages[-1].name}) has no batched device version")
    return Domain(points)


def all_on_host(env: Env, wl: Workload) -> int:
    """The staged workload's baseline: every stage on the host, as a plain DataLoader runs it."""
    return len(wl.stages())


def amp(env: Env, wl: Workload) -> Domain:
    if env.device == "cuda":
        values = ["off", "fp16"] + (["bf16"] if env.bf16 else [])
        return Domain(values, None if env.bf16 else "bf16 not supported by this GPU")
    if env.bf16:
        return Domain(["off", "bf16"], "fp16 autocast is for CUDA; the CPU searches bf16 only")
    return Domain(["off"], "this CPU has no native bf16 (AVX512-BF16 or AMX): bf16 autocast "
                  "would be emulated, slower than fp32")


def compile(env: Env, wl: Workload) -> Domain:
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


def cuda_graphs(env: Env, wl: Workload) -> Domain:
    if env.device != "cuda":
        return Domain([False], "CUDA Graphs need a CUDA device")
    if not wl.static_shapes:
        return Domain([False], "the workload's batches do not have static shapes")
    if env.ranks > 1:
        return Domain([False], "a captured step cannot hold DDP's all-reduce hooks as autotune "
                      "captures it (whole-step capture of one process)")
    accum = declared_accumulation(wl)
    if accum > 1:
        return whole_steps(Domain([False, True]), int(wl.defaults.get("batch_size", 32)) * accum)
    return Domain([False, True])


@dataclass(frozen=True)
class GraphsAccumulate:
    """cuda_graphs' value rule in a study that accumulates to ``global_batch``: a captured step
    is a whole optimizer step (forward, backward, step), so a micro-batch that accumulates
    cannot be captured (core/training.py refuses it) and is never given ``cuda_graphs=True``;
    a trial would only fail to capture. A class, not a closure: the space pickles."""

    global_batch: int

    def __call__(self, chosen: Mapping[str, Any], value: Any) -> str | None:
        b = int(chosen.get("batch_size") or 0)
        steps = accumulation(self.global_batch, b)
        if value and steps > 1:
            return (f"a captured step is a whole optimizer step, and batch_size {b} accumulates "
                    f"{steps} micro-batches to the global batch {self.global_batch}")
        return None


def whole_steps(dom: Domain, global_batch: int) -> Domain:
    """The cuda_graphs domain with ``GraphsAccumulate``'s rule, where it offers True."""
    if True not in dom.values:
        return dom
    return replace(dom, refuses=GraphsAccumulate(int(global_batch)), reads=("batch_size",))


def channels_last(env: Env, wl: Workload) -> Domain:
    if wl.image_inputs:
        return Domain([False, True])
    return Domain([False], "the workload's inputs are not 4-D images")


def tf32(env: Env, wl: Workload) -> Domain:
    if env.device != "cuda":
        return Domain([False], "TF32 is a CUDA (Ampere+) matmul mode")
    if (env.cuda_capability or (0, 0)) < (8, 0):
        return Domain([False], "TF32 needs compute capability 8.0+")
    return Domain([False, True])


def optimizer_impl(env: Env, wl: Workload) -> Domain:
    ruled = env.ranks > 1 and _optimizer_is_sgd(wl)
    refuses, reads = (fused_sgd_sharded, ("sharding",)) if ruled else (None, ())
    if env.device == "cuda":
        # torch's optimizers pick foreach by default when every parameter is on a GPU: a
        # "foreach" trial would re-measure the "default" one.
        return Domain(["default", "fused"], "foreach is torch's default on CUDA", refuses, reads)
    return Domain(["default", "foreach", "fused"], None, refuses, reads)


def fused_sgd_sharded(chosen: Mapping[str, Any], value: Any) -> str | None:
    """torch's fused SGD kernel has no DTensor sharding rule: a sharded step fails with
    "aten._fused_sgd_.default does not have a sharding strategy registered" (torch 2.14; fused
    Adam/AdamW and foreach SGD have one), so that pair is never tried."""
    if value == "fused" and chosen.get("sharding", "no_shard") != "no_shard":
        return "fused SGD has no sharding rule for FSDP2's DTensor parameters"
    return None


def _optimizer_is_sgd(wl: Workload) -> bool:
    """Whether the workload's optimizer is an SGD, built over one placeholder parameter (a
    workload whose optimizer cannot be built so is not ruled)."""
    import torch

    try:
        return isinstance(wl.optimizer([torch.nn.Parameter(torch.zeros(1))]), torch.optim.SGD)
    except Exception:
        return False


def host_allocator(env: Env, wl: Workload) -> Domain:
    if platform.libc_ver()[0] != "glibc":
        return Domain(["default"], "needs glibc's mallopt (Linux)")
    if env.device == "cuda":
        return Domain(["default"], "searched on CPU, where the step's tensors are host memory; "
                      "on CUDA they are in PyTorch's caching allocator (pin it to search it)")
    if env.ranks > 1:  # a rank's peak is its memory limit's reading: see the knob's doc
        return Domain(["default", "retain", "release"])
    return Domain(["default", "retain"])


def cpu_threads(env: Env, wl: Workload) -> Domain:
    """Thread counts for the training process: every count up to the usable cores on a small
    machine, powers of two (and the core count) on a large one."""
    if env.device == "cuda":
        return Domain([0], "on CUDA the training process's host threads are capped at the cores "
                      "its DataLoader workers leave free (0: cores - num_workers, at least 1): "
                      "the GPU does the arithmetic and more host threads only compete with the "
                      "workers (pin a count to search it)")
    n = max(1, env.cpu_count)
    if n == 1:  # a 2-rank study on 2 cores said "fixed cpu_threads=1: pinned" (2026-11-28)
        return Domain([1], f"each of the {env.ranks} ranks is pinned to one core of the node"
                      if env.ranks > 1 else "this process can use one core")
    if n <= 8:
        return Domain(list(range(1, n + 1)))
    return Domain(sorted({2**k for k in range(n.bit_length()) if 2**k <= n} | {n}))


def allocator_env(env: Env, wl: Workload) -> bool:
    """expandable_segments' baseline: on where the user's environment already sets it (then the
    baseline measures what their training runs with today)."""
    from autotune.core.host import expandable_in_env

    return env.device == "cuda" and expandable_in_env()


def torch_default_threads(env: Env, wl: Workload) -> int:
    """The baseline: the threads torch starts with here, as the user's training does today
    (one of the domain's values: the largest not above it)."""
    want = env.torch_threads or env.cpu_count
    values = cpu_threads(env, wl).values
    return max([v for v in values if v <= want] or values[:1])


def padded(wl: Workload) -> bool:
    """Whether the workload's batches are padded sequences: as it states (the adapters read
    their batches when built), else read from 8 batches drawn through its collate function and
    remembered. Without a collate function there is nothing to read: PyTorch's
    ``default_collate`` stacks samples of one shape, so a batch's padding is the samples' own
    and no sampler or packing of batches changes it."""
    if wl.pads_batches is None:
        collate = None if wl.stages() else wl.collate_fn()
        wl.pads_batches = collate is not None and _padded_batches(wl, collate) > 0
    return bool(wl.pads_batches)


def _padded_batches(wl: Workload, collate: Callable[[list[Any]], Any]) -> int:
    try:
        data = wl.dataset("float32")
        return int(measure_shapes(data, collate, int(wl.defaults.get("batch_size", 8)))["padded"])
    except Exception as exc:  # noqa: BLE001 - any failure is the user's code: named, not hidden
        raise WorkloadError(
            f"workload {wl.name}: drawing a few batches through its collate_fn() to see whether "
            f"they are padded raised {type(exc).__name__}: {exc}. Fix the dataset or collate "
            "function, or state it on the workload (pads_batches = True or False).") from exc


def pads_to_multiple(wl: Workload) -> bool:
    """Whether the workload's collate function takes a ``pad_to_multiple_of`` setting (looked
    through the Trainer's column-removing wrapper)."""
    if wl.pads_to_multiple is None:
        from autotune.core.sequences import unwrapped

        wl.pads_to_multiple = hasattr(unwrapped(wl.collate_fn()), "pad_to_multiple_of")
    return bool(wl.pads_to_multiple)


def pad_to_multiple_of(env: Env, wl: Workload) -> Domain:
    """A padding collator's multiple: the user's own unless they list values to search, since
    another multiple changes how many (masked) tokens each step processes. Offered only where
    the collator takes the setting (a plain function that pads has none to set)."""
    own = wl.defaults.get("pad_to_multiple_of")
    if not pads_to_multiple(wl):
        return Domain([None], "the workload's collator takes no pad_to_multiple_of setting")
    return Domain([own], "padding each batch to a multiple (8 for tensor cores, 64 for fewer "
                  "distinct shapes to compile) changes the tokens a step processes: list values "
                  "to search them, e.g. knobs.pad_to_multiple_of=[null,8,64]")


def no_workers(p: Mapping[str, Any]) -> str | None:
    return "only with num_workers > 0" if p.get("num_workers", 0) == 0 else None


def graphs_inactive(p: Mapping[str, Any]) -> str | None:
    if p.get("compile", "off") != "off":
        return "torch.compile is on (its reduce-overhead mode is the compiled route to graphs)"
    if p.get("amp") == "fp16":
        return "fp16's GradScaler synchronizes in step(), which cannot be captured"
    return None


def graphed_step(p: Mapping[str, Any]) -> str | None:
    if p.get("cuda_graphs"):
        return "a captured step keeps its gradients in place"
    if p.get("compile") in ("reduce-overhead", "max-autotune"):
        # Both modes replay cudagraph trees: gradients kept across steps (zeroed in place)
        # live in the graph pool, which the next replay overwrites.
        return "compile's CUDA Graphs need gradients freed between steps"
    return None




def attention(env: Env, wl: Workload) -> Domain:
    """The attention implementations the model supports, with SDPA's backends that run here.
    CPU flash attention refuses attention dropout, so with dropout it is out."""
    from autotune.core import sequences

    if not wl.attention_choices:
        return Domain(["default"], "the workload's model does not declare a switchable "
                      "attention (a Hugging Face model, or Workload.attention_choices)")
    values: list[str] = []
    out: list[str] = []
    for impl in wl.attention_choices:
        if impl == "sdpa":
            values.append("sdpa")
            for backend in sequences.sdpa_backends(env.device):
                if backend == "sdpa_flash" and env.device != "cuda" and wl.attention_dropout > 0:
                    out.append(f"sdpa_flash (CPU flash attention refuses the model's attention "
                               f"dropout {wl.attention_dropout:g})")
                else:
                    values.append(backend)
        elif impl == "flash_attention_2":
            if env.device == "cuda" and sequences.flash_attention_2_installed():
                values.append(impl)
            else:
                out.append("flash_attention_2 (needs CUDA and the flash-attn package)")
        else:
            values.append(impl)
    if env.device != "cuda":
        out.append("sdpa_efficient and sdpa_cudnn (CUDA kernels only)")
    why = "not here: " + "; ".join(out) if out else ""
    if env.device != "cuda":
        return Domain(values, why)
    return Domain(values, why, refuses=half_precision_attention, reads=("amp",))


#: Attention kernels that CUDA runs in fp16 or bf16 only: pinned to one of them, an fp32
#: forward fails with "No available kernel" (torch's SDPA dispatch; the flash-attn package
#: raises likewise), so without autocast the trial would only fail.
HALF_PRECISION_ATTENTION = ("sdpa_flash", "sdpa_cudnn", "flash_attention_2")


def half_precision_attention(p: Mapping[str, Any], value: Any) -> str | None:
    """The attention value rule on CUDA: flash and cuDNN kernels need amp=bf16 or fp16 (SDPA
    is on autocast's lower-precision list, so under amp its inputs arrive in half precision)."""
    if value in HALF_PRECISION_ATTENTION and p.get("amp", "off") == "off":
        return f"{value} runs in fp16/bf16 only on CUDA: only with amp=bf16 or amp=fp16"
    return None


def activation_checkpointing(env: Env, wl: Workload) -> Domain:
    if wl.checkpointable or wl.checkpoint_layers:
        return Domain([False, True])
    return Domain([False], "the workload's model has no checkpointing switch (a Hugging Face "
                  "model that supports it, or Workload.checkpoint_layers)")


def length_grouping(env: Env, wl: Workload) -> Domain:
    """Opt-in: grouping by length changes which samples share a batch."""
    if env.ranks > 1:
        return Domain([False], "under several ranks each rank's sampler is DistributedSampler")
    if not padded(wl):
        return Domain([False], "the workload's batches hold no padding (no attention_mask "
                      "zeros, no labels -100 on trailing padding, in 8 batches drawn)")
    own = bool(wl.defaults.get("length_grouping", False))
    return Domain([own], "grouping samples of similar length changes which samples share a "
                  "batch: list values to search it, knobs.length_grouping=[false,true]")


def padding_free(env: Env, wl: Workload) -> Domain:
    """Opt-in: packing changes the batch's layout (one row, no padding)."""
    if not (wl.packs_sequences and padded(wl)):
        return Domain([False], "needs a padding collator and a Hugging Face model whose "
                      "attention keeps packed samples apart (transformers >= 4.53)")
    own = bool(wl.defaults.get("padding_free", False))
    return Domain([own], "packing a batch's samples into one row without padding changes its "
                  "layout: list values to search it, knobs.padding_free=[false,true]")


def packed(p: Mapping[str, Any]) -> str | None:
    return "padding-free batches are not padded" if p.get("padding_free") else None
