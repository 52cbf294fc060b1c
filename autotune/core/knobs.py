"""The knob registry: every setting autotune tunes, its domain on this device, and when it applies.

Each knob says which values are valid here (and why others are not), and which other knob
values it depends on. How a knob is *applied* lives in ``autotune/core/training.py``, the one place
used by both the trial window and a production run. A study's search space, these domains on one
device narrowed by the user's overrides, is ``autotune/core/space.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.core import domains, llm_domains, shard_domains
from autotune.core.domains import Domain
from autotune.core.env import Env
from autotune.core.workload import Workload

#: A loader that waits on I/O may be given up to this many workers per usable core.
IO_WORKERS_PER_CORE = 8


class KnobError(ValueError):
    """A knob override names a value that is not valid on this device."""


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
    # Trial 0's value when the workload's defaults do not name the knob (default: ``off``);
    # also what a trial stored before the knob existed ran with (``Space.absent``).
    baseline: Callable[[Env, Workload], Any] | None = None
    # What a value other than the user's does to the training itself, beside its speed
    # (``effect``): why it changes what is trained (None: it does not). Required, so that no
    # knob joins the registry unclassed: a study's same-training answer rests on it.
    changes_training: str | None = field(kw_only=True)
    # Why it changes the arithmetic (a lower precision, other kernels' rounding by design,
    # other input arithmetic) while the samples, batches and optimizer steps stay the user's
    # (None: it does not, beyond the last bits any kernel choice moves).
    changes_numerics: str | None = field(default=None, kw_only=True)

    @property
    def effect(self) -> str:
        """The knob's class: ``training``, ``numerics`` or ``speed`` (EFFECTS)."""
        if self.changes_training:
            return "training"
        return "numerics" if self.changes_numerics else "speed"

    @property
    def effect_reason(self) -> str | None:
        return self.changes_training or self.changes_numerics


#: What each class of knob does to a user's training (the knob reference and the study's
#: two answers say these).
EFFECTS: dict[str, str] = {
    "speed": "changes only how fast: the same samples in the same batches, the same optimizer "
             "steps, the same precision (float sums may differ in their last bits, as with "
             "any change of kernel or thread count).",
    "numerics": "the same samples, batches and optimizer steps, computed with other "
                "arithmetic (a lower precision, or other rounding by design): the losses differ "
                "by rounding, and the numerics check (study.numerics_steps) refuses a "
                "configuration beyond its tolerance before it is exported. A "
                "same-training configuration may change these; pin them (knobs.amp=off) to "
                "keep your own arithmetic.",
    "training": "changes what is trained: how many optimizer steps an epoch takes, which "
                "samples share a batch, or what the model holds. A same-training "
                "configuration keeps these at your values.",
}


KNOBS: list[Knob] = [
    Knob("num_workers", "DataLoader worker processes (0 = load in the training process). "
         "Searched up to the usable cores; the agent goes past them, up to "
         f"{IO_WORKERS_PER_CORE} per core, for a loader it measured waiting on I/O.",
         domains.workers, off=0, ordinal=True,
         changes_training=None),
    Knob("prefetch_factor", "Batches each worker loads ahead.",
         lambda env, wl: Domain([2, 4, 8]), inactive=domains.no_workers, off=None,
         changes_training=None),
    Knob("persistent_workers", "Keep workers alive across epochs (no respawn at epoch start).",
         lambda env, wl: Domain([False, True]), inactive=domains.no_workers, off=False,
         changes_training=None),
    Knob("pin_memory", "Page-locked host batches: faster, asynchronous host-to-device copies.",
         domains.cuda_only([False, True], False, "pinned memory speeds copies to a GPU"), off=False,
         changes_training=None),
    Knob("non_blocking", "Asynchronous host-to-device copies: with pinned memory the host does "
         "not wait for the copy and goes on launching the step and loading the next batch.",
         domains.cuda_only([False, True], False, "asynchronous copies to a GPU"), off=False,
         changes_training=None),
    Knob("batch_size", "Samples per step. Changes training dynamics: pin it if that matters.",
         domains.batch_size,
         changes_training=("a larger batch takes fewer optimizer steps per epoch at the same "
                           "learning rate (a smaller one more): the training dynamics change "
                           "unless the learning rate follows; a micro-batch that gradient "
                           "accumulation carries to the same global batch (the workload's own "
                           "accumulation, or study.keep_global_batch) changes nothing")),
    Knob("transfer_dtype", "float32 = normalize on the host; uint8 = ship raw bytes, "
         "normalize on the device (4x fewer bytes over the bus).", domains.transfer_dtype, off="float32",
         changes_training=None),
    Knob("transform_split", "Input stages run on the host per sample before the copy; the "
         "rest run on the device on the whole batch (0 = all on the device). The device "
         "resize (torchvision, bilinear, antialias) differs from PIL's by at most one grey "
         "level per pixel (tests/test_stages.py).", domains.transform_split, off=0, ordinal=True,
         baseline=domains.all_on_host,
         changes_training=None,
         changes_numerics=("input stages on the device compute other pixels (the device resize "
                           "is within one grey level of PIL's) and draw random augmentations "
                           "from the device's generator")),
    Knob("amp", "Automatic mixed precision: off, bf16, or fp16 with a GradScaler.", domains.amp, off="off",
         changes_training=None,
         changes_numerics=("activations in bf16 (8 mantissa bits) or fp16 (10, with loss "
                           "scaling) instead of float32")),
    Knob("compile", "torch.compile mode (off = eager).", domains.compile, off="off",
         changes_training=None,
         changes_numerics=("generated kernels fuse operations and keep fused intermediates at "
                           "another precision than eager (Inductor computes low-precision "
                           "pointwise ops in float32)")),
    Knob("cuda_graphs", "Capture the whole training step once and replay it (CUDA Graphs).",
         domains.cuda_graphs, inactive=domains.graphs_inactive, off=False,
         changes_training=None),
    Knob("channels_last", "NHWC memory format for the model and its inputs.",
         domains.channels_last, off=False,
         changes_training=None),
    Knob("set_to_none", "optimizer.zero_grad(set_to_none=...): free grads instead of zeroing "
         "(a parameter that gets no gradient in a step is then skipped by the optimizer "
         "rather than decayed; the same for a model that uses every parameter each step).",
         lambda env, wl: Domain([True, False]), inactive=domains.graphed_step, off=True,
         changes_training=None),
    Knob("sharding", "How the ranks hold the model: no_shard (DDP: a whole copy per rank), "
         "full_shard (FSDP2: each rank holds a shard of the parameters, gradients and optimizer "
         "state; each block's parameters are all-gathered for its forward and again for its "
         "backward, ZeRO-3), shard_grad_op (FSDP2 keeping them from forward to backward: one "
         "all-gather less a step, more memory) or hybrid_shard (sharded within a node, "
         "replicated across nodes). Searched when the trials run as ranks.",
         shard_domains.sharding, off="no_shard",
         changes_training=None),
    Knob("optimizer", "The optimizer as a Hugging Face TrainingArguments.optim names it (the "
         "user's, built as the Trainer builds it; adamw_torch is torch's AdamW, plain or fused "
         "by optimizer_impl). Kept as it is, or searched over bitsandbytes' forms of the same "
         "update (adamw_bnb_8bit, paged_adamw_32bit, paged_adamw_8bit; Lion's and AdEMAMix's) "
         "where listed: opt-in, CUDA only. null: the workload's own optimizer.",
         llm_domains.optimizer, off=None,
         changes_training=None,
         changes_numerics=("bitsandbytes' 8-bit forms keep the optimizer's states quantized "
                           "block-wise to 8 bits, so each update rounds them; its 32-bit and "
                           "paged forms compute the same update in their own kernels")),
    Knob("optimizer_impl", "Optimizer kernels: torch's default, foreach (batched) or fused.",
         llm_domains.optimizer_impl, inactive=llm_domains.one_implementation, off="default",
         changes_training=None),
    Knob("tf32", "Allow TF32 for float32 matmuls (cuDNN convolutions use TF32 by PyTorch's "
         "default either way).", domains.tf32, off=False,
         changes_training=None,
         changes_numerics="float32 matrix multiplications with 10-bit mantissa inputs"),
    Knob("cudnn_benchmark", "cudnn.benchmark: autotune convolution algorithms per shape.",
         domains.cuda_only([False, True], False, "cuDNN algorithm search"), off=False,
         changes_training=None),
    Knob("expandable_segments", "The CUDA caching allocator's expandable segments "
         "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): one segment grows in place instead "
         "of new blocks per size, so batches of varying shape fragment less and the peak "
         "reserved memory (what the memory limit reads) drops.",
         domains.cuda_only([False, True], False, "the CUDA caching allocator's setting"),
         off=False, baseline=domains.allocator_env, changes_training=None),
    Knob("host_allocator", "Host malloc: default (glibc returns big freed blocks to the OS, "
         "past a threshold that rises up to 32 MiB as blocks are freed), retain (keep them for "
         "reuse: no page faults for the step's host tensors) or release (every freed block "
         "above 64 KiB back to the OS at once: a process's resident memory is then what it "
         "uses, at the cost of page faults; under ranks, where the per-rank memory limit reads "
         "that resident memory).", domains.host_allocator, off="default",
         changes_training=None),
    Knob("cpu_threads", "torch intra-op (and, where not yet started, inter-op) threads of the "
         "training process; each DataLoader worker gets its share of the cores, at most as "
         "many (0 = the cores the workers leave free; CUDA's setting).",
         domains.cpu_threads, off=None, ordinal=True, baseline=domains.torch_default_threads,
         changes_training=None),
    Knob("bucket_cap_mb", "DDP: MiB of gradients per all-reduce bucket (25 by default): "
         "smaller buckets start communicating earlier in backward, larger ones send fewer "
         "messages.", domains.ddp_only([1, 5, 25, 100], 25), inactive=shard_domains.is_sharded, off=25,
         ordinal=True, changes_training=None),
    Knob("gradient_as_bucket_view", "DDP: gradients are views into the all-reduce buckets (no "
         "copy into them, less memory).", domains.ddp_only([False, True], False),
         inactive=shard_domains.is_sharded, off=False, changes_training=None),
    Knob("batched_grad_copy", "DDP: copy each bucket's gradients into it in one batched copy "
         "and one division when the bucket is ready, instead of per parameter (fewer kernels "
         "for models of many small parameters; torch 2.14 and later).",
         domains.batched_grad_copy, inactive=shard_domains.is_sharded, off=False,
         changes_training=None),
    Knob("static_graph", "DDP: the model uses the same parameters every step, so DDP can skip "
         "its per-step graph checks and reorder buckets.",
         domains.ddp_only([False, True], False), inactive=shard_domains.is_sharded, off=False,
         changes_training=None),
    Knob("broadcast_buffers", "DDP: copy rank 0's buffers (BatchNorm's running statistics) to "
         "every rank before each forward (forward_sync_buffers from torch 2.14). Off: each rank "
         "keeps its own running statistics.", domains.ddp_only([True, False], True),
         inactive=shard_domains.is_sharded, off=True,
         changes_training=("off: each rank keeps its own buffers (BatchNorm's running "
                           "statistics) instead of rank 0's: a model that reads its buffers in "
                           "training, or is evaluated or saved on a rank other than 0, holds "
                           "other values")),
    Knob("comm_hook", "DDP: the gradients' all-reduce as is (none) or compressed to fp16 or bf16 "
         "(half the bytes, summed in that precision). Opt-in: it changes the numerics.",
         domains.comm_hook, inactive=shard_domains.is_sharded, off="none",
         changes_training=None,
         changes_numerics="gradients summed across ranks in fp16 or bf16 instead of float32"),
    Knob("accumulation_no_sync", "Ranks with gradient accumulation (the workload's own, or "
         "study.keep_global_batch): "
         "skip the gradient communication on each micro-batch but the cycle's last, one "
         "all-reduce (DDP's no_sync) or reduce-scatter per optimizer step instead of one per "
         "micro-batch, as the Hugging Face Trainer and Lightning do; a sharded model also keeps "
         "its gathered parameters and unreduced gradients over the cycle (more memory, no "
         "all-gather again).", domains.ddp_only([False, True], False), off=False,
         changes_training=None),
    Knob("fsdp_wrap_blocks", "FSDP2: blocks per fully_shard group, each group one all-gather "
         "and one reduce-scatter (1: every block, PyTorch's recipe; more: fewer, larger "
         "collectives, more parameters gathered at once).",
         shard_domains.fsdp_wrap_blocks, inactive=shard_domains.not_sharded, off=1, changes_training=None),
    Knob("fsdp_param_dtype", "FSDP2: the dtype parameters are gathered and computed in "
         "(MixedPrecisionPolicy.param_dtype); the shards and the optimizer stay fp32, the "
         "reduction fp32 unless fsdp_reduce_dtype says bf16.",
         shard_domains.fsdp_param_dtype, inactive=shard_domains.not_sharded, off="fp32",
         changes_training=None,
         changes_numerics="forward and backward computed with bf16 parameters (8 mantissa bits)"),
    Knob("fsdp_reduce_dtype", "FSDP2: the dtype gradients are reduce-scattered in "
         "(MixedPrecisionPolicy.reduce_dtype): bf16 halves the bytes and rounds the sum. "
         "Opt-in: it changes the numerics.",
         shard_domains.fsdp_reduce_dtype, inactive=shard_domains.not_sharded, off="fp32",
         changes_training=None,
         changes_numerics="gradients summed across ranks in bf16 instead of float32"),
    Knob("fsdp_prefetch", "FSDP2: groups all-gathered ahead of their turn, in forward and "
         "backward (0: FSDP2's own, one group ahead in backward only).",
         shard_domains.sharded_only([0, 1, 2], 0), inactive=shard_domains.not_sharded, off=0, ordinal=True,
         changes_training=None),
    Knob("fsdp_cpu_offload", "FSDP2: shards, gradients and the optimizer step in host memory "
         "(CPUOffloadPolicy): GPU memory for speed. Opt-in, CUDA only.",
         shard_domains.fsdp_cpu_offload, inactive=shard_domains.not_sharded, off=False,
         changes_training=None),
    Knob("attention", "The attention implementation (a Hugging Face model's attn_implementation: "
         "eager, sdpa, flash_attention_2) or SDPA with one backend pinned around the forward "
         "and backward (sdpa_math, sdpa_flash, sdpa_efficient, sdpa_cudnn; sdpa lets torch choose).",
         domains.attention, off="default",
         changes_training=None),
    Knob("liger_kernel", "Liger's Triton kernels in a Hugging Face model (the Trainer's "
         "use_liger_kernel): fused RMSNorm, RoPE, SwiGLU and cross-entropy (the logits never "
         "held whole: less memory). CUDA only, with the liger-kernel package.",
         llm_domains.liger_kernel, off=False,
         changes_training=None,
         changes_numerics=("fused kernels compute the norms, activations and the loss in "
                           "another order and precision (the cross-entropy in chunks, "
                           "without the whole logits)")),
    Knob("activation_checkpointing", "Recompute each layer's activations in backward instead of "
         "keeping them (non-reentrant): slower steps, less memory, room for a bigger batch.",
         domains.activation_checkpointing, off=False,
         changes_training=None),
    Knob("checkpoint_reentrant", "Activation checkpointing's implementation: torch's "
         "reentrant checkpoint (use_reentrant=True) or the non-reentrant one (False, PyTorch's "
         "recommendation and transformers 5's default). The user's is kept unless both are "
         "listed.", llm_domains.checkpoint_reentrant, inactive=llm_domains.not_checkpointing,
         off=False, changes_training=None),
    Knob("length_grouping", "Batch samples of similar length together (the Trainer's "
         "group_by_length sampler): less padding. Opt-in: it changes which samples share a batch.",
         domains.length_grouping, off=False,
         changes_training=("samples of similar length share a batch instead of a random mix: "
                           "other batches, so other gradients in every step")),
    Knob("padding_free", "Pack each batch's samples into one row with positions restarting per "
         "sample (DataCollatorWithFlattening): no padding computed. Opt-in.",
         domains.padding_free, off=False,
         changes_training=None,
         changes_numerics=("the same samples and the same predicted tokens, packed in one row "
                           "(positions restart per sample): other kernels' shapes and rounding")),
    Knob("pad_to_multiple_of", "A padding collator pads each batch's sequences to a multiple of "
         "this (null: to the longest): 8 for tensor cores, larger for fewer distinct shapes.",
         domains.pad_to_multiple_of, inactive=domains.packed, off=None,
         changes_training=None),
]
BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}


def fix_text(fix: Mapping[str, Any]) -> str:
    """A diagnosis fix as ``knob=value [+ knob=value]``."""
    changes = {fix["knob"]: fix["value"], **(fix.get("with") or {})}
    return " + ".join(f"{k}={v}" for k, v in changes.items())
