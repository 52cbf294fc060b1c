"""The diagnosis's thresholds, each with the rule of thumb or measurement it comes from, so
that a verdict can be traced to a number (used by ``autotune/diagnose/verdicts.py`` and
``autotune/diagnose/fixes.py``)."""

#: Host waits on the DataLoader for this share of the step: input-bound. The loader
#: wait (t2-t1) "should be much smaller" than the training time (t3-t2).
DATA_WAIT_SHARE = 0.20
#: The loader's processes spent less than this share of their time on a CPU: they wait on
#: I/O (storage, network, a remote service), and more workers than cores can still help.
#: Profiling rule of thumb: "GPU idle, CPU idle" is a wait, not a computation.
IO_BOUND_CPU_SHARE = 0.5
#: With workers, the training process was busy (on a CPU or runnable) at least this share of
#: its wait for batches: it was receiving them (unpickling each batch, taking over its shared
#: memory), the workers were ahead, and more of them cannot help. The mlp workload's
#: in-memory TensorDataset with 1 or 2 persistent workers (prefetch 8) on this project's 2-core
#: VM read 100% here at batch 32 and 128, two workers on a CPU 34-46% of the time, and no
#: workers ran 1.9-3.0x as fast (2026-11-28, benchmarks/loader_receive.py,
#: docs/benchmarks.md); a loader that sleeps 40 ms an item, with one worker, reads under it.
RECEIVE_SHARE = 0.5
#: The share of the loader wait spent starting epochs (non-persistent workers shut down and
#: start again) above which the wait is worker start-up, neither I/O nor loading work: the gpt
#: run's 9-worker loader read as "waiting on I/O" at 7% worker CPU while its workers were
#: restarted every 32 steps.
EPOCH_START_SHARE_OF_WAIT = 0.5
#: The share of the window its epoch starts cost (their first batches' waits and the steps
#: slower than the median while new workers started and refilled their prefetch) at or above
#: which non-persistent workers are the bottleneck, whatever the loader wait: the README's
#: ResNet-18 at batch 128 with one worker waited 2% of its window on the loader, its one epoch
#: start cost 17%, and persistent workers ran 1.18x (95% CI 1.14-1.21x); the same window with
#: them read 0.7% (this project's 2-core VM, 2026-11-27).
EPOCH_START_COST_SHARE = 0.10
#: The optimizer's share of the step above which its per-parameter work is worth a fused
#: implementation (one kernel, or one vectorized loop, for all parameters).
OPTIMIZER_SHARE = 0.25
#: On a compute-bound step, a loader wait this large is still worth one more worker.
DATA_WAIT_NOTABLE = 0.05
#: Minor page faults per step in the training process (4 KiB each: 1,000 is 4 MiB of memory
#: mapped and zeroed anew every step). On CPU a step that allocates its activations afresh.
PAGE_FAULTS_PER_STEP = 1000
#: Host-to-device copies take this share of the step: copy-bound. Chaim Rand's ResNet-18
#: ("PyTorch Model Performance Analysis and Optimization", 2023) spent 10 of 37 ms copying.
H2D_SHARE = 0.20
#: GPU busy (kernels + copies) at or above this: compute-bound. Rule of thumb: ">90% GPU utilization".
GPU_BUSY_HIGH_PCT = 90.0
#: GPU busy below this: starved by the host. Rule of thumb: "GPU utilization < 80%".
GPU_STARVED_PCT = 80.0
#: Kernels shorter than this are launch-dominated. Rule of thumb: "Many tiny GPU kernels (< 10 us)".
SHORT_KERNEL_US = 10.0
#: ...and launch overhead needs at least this share of them to be tiny,
SHORT_KERNEL_SHARE = 0.5
#: ...and at least this many launches (or kernels) per step (a replayed graph launches once).
MIN_LAUNCHES_PER_STEP = 20
#: Host-device synchronizations per step outside the input copy. A per-step loss.item() for
#: logging is 1, fp16's GradScaler 1: four or more is a pattern (the "post-processing" pattern of
#: interleaved small device ops and host reads).
SYNCS_PER_STEP = 4
#: Peak memory at or above this share of the limit: memory-bound (no headroom, allocator
#: retries, OOM risk).
MEMORY_HIGH_SHARE = 0.90
#: A bigger batch is suggested only below this share of the limit (doubling the batch roughly
#: doubles activation memory). Rand's ResNet-18 (2023): 1 of 16 GB used -> batch size up.
BATCH_HEADROOM_SHARE = 0.50

# -- confirmation ---------------------------------------------------------------------------
#: A configuration whose search window read within this share of the fastest is a finalist
#: too (beyond study.confirm_top, up to twice as many): on this project's idle 2-core VM,
#: windows of one configuration differ by 6-11% (coefficient of variation over confirmation
#: rounds, 2026-11-25, docs/benchmarks.md), and in an earlier run that day one study's true
#: best (batch 64) read 9% below a batch-32 window in its search and was left out of the top
#: three.
FINALIST_BAND = 0.15

# -- contention: a window measured while the machine was busy (measure/contention.py) -----------
#: Other processes used at least this share of the machine's cores during the window ...
#: (on a 2-core VM, half a core: one `stress-ng --cpu 1` reads ~1.0 core, a quiet machine with
#: the driver polling reads under 0.1; tests/test_contention.py).
CONTENDED_OTHER_SHARE = 0.25
#: ... and the trial's threads waited runnable for a CPU this share of the time they wanted one
#: (schedstat). Load elsewhere that did not delay the trial is named but not held against it;
#: a trial that waits only on its own oversubscription (more workers than cores) is not
#: contended either, it is slow.
CONTENDED_WAIT_SHARE = 0.10
#: Steal time (a hypervisor serving other guests) above this share of all CPU time. pyperf
#: warns when a benchmark's deviation passes 10% of its mean; 5% steal alone is half of that.
CONTENDED_STEAL_SHARE = 0.05
#: The container's CPU quota (cgroup v2 cpu.stat throttled_usec) held the trial back this share
#: of the window.
CONTENDED_THROTTLED_SHARE = 0.05
#: Wait this long before re-measuring a contended window (study.remeasure_contended times at
#: most: bounded, so a machine that stays busy is reported as such and the study goes on).
CONTENDED_WAIT_S = 5.0
#: A confirmation that ends on its budget, not on its precision, says that the study could not
#: measure (results/trust.py, exit code 4) when at least this share of the study's windows were
#: contended, or when its rounds left the winner's speedup known only to more than
#: IMPRECISE_FACTOR times study.confirm_precision: paired rounds cancel a noisy machine's drift,
#: so the interval, not the windows' own spread, says whether configurations could be ranked.
#: Three times: on this project's idle 2-core VM (windows varying 6-12%) budget-bound
#: confirmations left the winner known to +-5% and +-8% (docs/benchmarks.md, busy machines)
#: and, in an earlier unrecorded run the same day, +-11% at 1.75x: speedups the data support,
#: not ones they could not measure.
#: NOISY_WINDOWS_CV (pyperf warns above 10%) is stated beside it as the reason.
CONTENDED_WINDOWS_SHARE = 0.5
IMPRECISE_FACTOR = 3.0
NOISY_WINDOWS_CV = 0.10

#: Communication-bound (a trial of several ranks): the gradient all-reduce adds at least this
#: share of the window's median step, measured as the same step on one cached batch with and
#: without DDP's all-reduce, in adjacent pairs (measure/comm.py), and read at the lower bound
#: of the pairs' median (COMM_LOWER_ALPHA there), not the median itself: a noisy median
#: called a compute-heavy model communication-bound. Fixed before any DDP figure was seen: a quarter
#: of the step is where the usual DDP fixes (bucket size, gradient views, a bigger per-rank
#: batch) can pay for a trial, and below it the all-reduce is mostly hidden behind backward.
COMM_EXPOSED_SHARE = 0.25
#: A phase other than the verdict's that takes at least this share of the step is named
#: beside it (diagnose/phases.py): the input-bound verdict's own threshold (DATA_WAIT_SHARE),
#: a fifth of the step, where a fix of that phase alone would be worth a trial. A 2-rank DDP
#: study's all-reduce added 25.8% of the step (lower bound 24.2%, under COMM_EXPOSED_SHARE)
#: and its verdict did not name it (2026-11-28).
PHASE_NOTABLE_SHARE = 0.20

#: Padding (a workload with tokens: measure/loop.py counts real and computed tokens): at
#: least this share of the tokens the model computed were padding. Fixed before any figure:
#: a fifth of the step's arithmetic thrown away is more than most knobs win, and the two
#: fixes (length grouping, padding-free packing) remove most of it.
PADDING_SHARE = 0.2
