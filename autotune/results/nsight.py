"""Nsight commands for the device side of the exported configuration.

autotune's own profile (torch.profiler) says which bottleneck a trial has; the next step on a
GPU is Nsight Systems for the timeline and Nsight Compute for the kernels that dominate.
best.yaml and the report hand the user the exact commands: one trial of the exported
configuration, every knob pinned by override, nothing else run (no search, no pruning, no
confirmation, no numerics check, no torch.profiler or loader profile: CUPTI serves one
profiler at a time). On a CPU study they are omitted, with the reason.

Trials are forked from a fork server without an exec, so ``nsys`` must follow forks
(``--trace-fork-before-exec=true``) and ``ncu`` must target all processes
(``--target-processes all``). Every trial's step phases are NVTX push/pop ranges in the domain
``autotune`` (``core.training.phase``: ``data``, ``copy``, ``forward``, ``backward``,
``optimizer``, ``graph_replay``); ``ncu`` keeps to the phases that launch kernels, in Nsight
Compute's filter grammar ``<domain>@<range>/`` (a push/pop range anywhere on the stack;
several ``--nvtx-include`` match any of them).

Each command runs its trial in a study of its own (``<study>-nsys``, ``<study>-ncu1``, ...),
beside the study in ``studies/``; the reports land in the study's own directory. A study
resumed with the same knobs reuses its trial instead of measuring it again, so running a
command a second time needs that study removed first (``rm -r studies/<study>-nsys`` with the
default SQLite storage). The workload is named by its factory (``workload._target_``): the
factory's own defaults apply, not any ``workload.*`` argument the study was given.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from autotune.results.hydra_export import override_value

#: How many of the best trial's top kernels get an ``ncu`` command.
NCU_KERNELS = 3
#: The NVTX domain of autotune's step phases, and the phases that launch kernels.
NVTX_DOMAIN = "autotune"
KERNEL_PHASES = ("forward", "backward", "optimizer", "graph_replay")
#: Kernel launches (of the chosen kernel, inside those phases) skipped before profiling:
#: past the first steps' one-off launches (cuDNN autotuning, allocator growth).
LAUNCH_SKIP = 10
#: One launch of each top kernel, after LAUNCH_SKIP warm-up launches: under ``--set full`` each
#: profiled launch is replayed once per pass (38 passes for batch_norm_collect_statistics on one
#: H100, 2026-11-26), and three launches of it did not finish inside the GPU check's 45 s.
LAUNCH_COUNT = 1


def rerun_args(doc: dict[str, Any], target: str | None, tag: str) -> list[str]:
    """The autotune command line that runs the exported configuration once, alone, in a
    study named ``<study>-<tag>``."""
    study = _study_name(doc)
    args = ["autotune"]
    if target:
        args.append(f"workload._target_={target}")
    args += [f"knobs.{k}={override_value(v)}" for k, v in (doc.get("knobs") or {}).items()]
    args += ["device=cuda", f"study.name={study}-{tag}", "study.n_trials=1", "study.agent=false",
             "study.prune=false", "study.confirm_runs=0", "study.numerics_steps=0",
             "window.profile=false", "window.loader_profile=false"]
    if int(doc.get("grad_accum") or 1) > 1:  # knobs.batch_size is a micro-batch: accumulate
        args.append("study.keep_global_batch=true")
    return args


def nsight_commands(doc: dict[str, Any], target: str | None,
                    top_kernels: list[dict[str, Any]] | None) -> dict[str, Any]:
    """best.yaml's ``nsight`` section: ``{"nsys": command, "ncu": [{"kernel", "ms_per_step",
    "command"}, ...]}`` (one ``ncu`` per top kernel, up to NCU_KERNELS), or on a study that
    did not run on CUDA ``{"omitted": reason}``."""
    device = (doc.get("device") or {}).get("type")
    if device != "cuda":
        return {"omitted": f"the study ran on {device or 'an unknown device'}, and Nsight "
                           "Systems and Nsight Compute profile CUDA devices only"}
    out = f"studies/{_study_name(doc)}"
    nsys = ["nsys", "profile", "--trace=cuda,nvtx,osrt,cudnn,cublas",
            "--trace-fork-before-exec=true", f"--output={out}/nsight_best",
            "--force-overwrite=true", *rerun_args(doc, target, "nsys")]
    nvtx = [arg for phase in KERNEL_PHASES
            for arg in ("--nvtx-include", f"{NVTX_DOMAIN}@{phase}/")]
    ncu = []
    for i, k in enumerate((top_kernels or [])[:NCU_KERNELS], start=1):
        name = str(k.get("name") or "")
        command = ["ncu", "--target-processes", "all", "--nvtx", *nvtx,
                   "-k", kernel_filter(name), "--launch-skip", str(LAUNCH_SKIP),
                   "--launch-count", str(LAUNCH_COUNT), "--set", "full",
                   "--export", f"{out}/ncu{i}_{_slug(name)}", "--force-overwrite",
                   *rerun_args(doc, target, f"ncu{i}")]
        ncu.append({"kernel": name, "ms_per_step": k.get("ms_per_step"),
                    "command": join(command)})
    return {"nsys": join(nsys), "ncu": ncu}


def kernel_filter(name: str) -> str:
    """An ``ncu -k`` filter for a kernel as torch.profiler names it (demangled, with return
    type, namespaces, template and argument lists, cut at 160 characters): ``regex:`` and the
    escaped function name alone. ncu matches ``-k`` against the function's base name (no
    namespace, template or parameters: ``--kernel-name-base function``, its default), and a
    ``regex:`` matches anywhere in it."""
    return "regex:" + re.escape(function_name(name))


def function_name(name: str) -> str:
    """The bare function name of a demangled kernel name: ``void at::native::elementwise_kernel
    <128, 4, ...>(int, ...)`` -> ``elementwise_kernel``. Brackets are dropped at any depth,
    unclosed ones too (a name cut short); the name itself where nothing is left."""
    text = name.replace("(anonymous namespace)", "")
    depth, kept = 0, []
    for ch in text:
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth = max(0, depth - 1)
        elif depth == 0:
            kept.append(ch)
    words = "".join(kept).split()
    base = words[-1].rsplit("::", 1)[-1] if words else ""
    return base or name.strip() or "kernel"


def join(args: list[str]) -> str:
    """A shell command line: like ``shlex.join``, but an argument holding single quotes (a
    string override, ``knobs.amp='bf16'``) goes in double quotes, which read better."""
    return " ".join(f'"{a}"' if "'" in a and not re.search(r'["$`\\!]', a) else shlex.quote(a)
                    for a in args)


def _study_name(doc: dict[str, Any]) -> str:
    return str((doc.get("study") or {}).get("name") or "study")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", function_name(name))[:40].strip("_") or "kernel"
