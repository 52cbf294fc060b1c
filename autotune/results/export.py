"""What a study hands back: best.yaml (the config a production run applies), trials.csv.

Every file is written atomically (temp file + rename), so an interrupted export leaves the
previous version intact. Only plain YAML types are written: ``yaml.safe_load`` reads it back.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from autotune.core.files import atomic_write
from autotune.core.global_batch import batches
from autotune.core.knobs import KNOBS, fix_text
from autotune.core.numbers import rounded
from autotune.core.tokens import TOKENS, unit_of
from autotune.core.workload import Workload, WorkloadError, resolve_target
from autotune.results.answers import (
    remove_answer,
    satellite_name,
    speedup_words,
    training_section,
)
from autotune.results.compile_cost import compile_summary
from autotune.results.hydra_export import hydra_group_text, overrides_text
from autotune.results.launch_export import ddp_section, ddp_step_section, launch_section
from autotune.results.nsight import nsight_commands
from autotune.results.record import StudyAttrs, study_attrs, trial_attrs
from autotune.results.sharding_export import fsdp_section, sharding_words
from autotune.results.storage import redact
from autotune.results.trials import (
    ANSWER_FILES,
    baseline_trial,
    batch_context,
    changes_training,
    chosen_trial,
    counts,
    ranked_trials,
    rate,
    training_setting,
)
from autotune.results.tried_fixes import split_fixes
from autotune.results.trust import could_not_measure, load_statement, window_loads

SCHEMA = 1


def metrics(t: FrozenTrial, confirmed: float | None = None,
            runs: list[float] | None = None) -> dict[str, Any]:
    """A trial's figures, and their ``unit``. The figure in that unit (``tokens_per_sec``,
    real tokens, where the workload has tokens; else ``samples_per_sec``) is the confirmation
    runs' median when there are some (what production can expect), else the trial's own; the
    search figure stays beside. A tokens/s trial also states its search window's samples/s
    and padding share (of the tokens computed)."""
    a = trial_attrs(t)
    unit = unit_of(a.get("unit"))
    key = "tokens_per_sec" if unit == TOKENS else "samples_per_sec"
    search = rounded(rate(a))
    extra: dict[str, Any] = {}
    if confirmed is not None and runs:
        extra = {f"search_{key}": search, "confirm_runs": runs,
                 "confirm_spread_pct": round(100 * (max(runs) - min(runs)) / confirmed, 1)}
    tokens = ({"samples_per_sec": rounded(a.get("samples_per_sec")),
               "padding_share": rounded(a.get("padding_share"))} if unit == TOKENS else {})
    return {
        "unit": unit,
        key: rounded(confirmed) if confirmed is not None else search,
        **tokens,
        **extra,
        "step_time_ms": rounded((a.get("step_ms") or {}).get("median")),
        "step_time_p10_ms": rounded((a.get("step_ms") or {}).get("p10")),
        "step_time_p90_ms": rounded((a.get("step_ms") or {}).get("p90")),
        "peak_memory_gb": rounded(a.get("peak_memory_gb")),
        "compile_s": rounded(a.get("compile_s")),
        # The loop's wait for its next batch, a share of the step: the production meter
        # tells a loader slower than measured from a slower step with it.
        "data_wait_share": rounded((a.get("timers") or {}).get("data_wait")),
    }


def best_document(study: optuna.Study, storage_url: str,
                  answer: str | None = None) -> dict[str, Any] | None:
    """best.yaml: ``answer`` ("any" or "same"; default: the study's study.training) as the
    configuration a production run applies, with its figures and the study's record."""
    answer = answer or training_setting(study)
    best, conf = chosen_trial(study, answer)
    if best is None:
        return None
    base = baseline_trial(study)
    attrs = study_attrs(study)
    dev = attrs.get("device", {})
    trials = study.get_trials(deepcopy=False)
    knobs = trial_attrs(best)["knobs"]
    # knobs.batch_size is the micro-batch: the optimizer steps once per grad_accum of them, on
    # global_batch samples (every rank's: core/global_batch.py). Always written: a best.yaml
    # without grad_accum predates them, and the adapters keep the user's own then.
    sizes: dict[str, int] = {}
    if "batch_size" in knobs:  # a planted trial may lack it
        _, sizes["grad_accum"], sizes["global_batch"] = batches(knobs, *batch_context(study))
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "workload": attrs.get("workload"),
        **({"framework": attrs["framework"]} if attrs.get("framework") else {}),
        "device": _device(dev),
        "knobs": dict(trial_attrs(best)["knobs"]),
        # How many input stages the workload declares (transform_split = that: all on the
        # host): the runtime warns where a split on the device is not applied by the user's loader.
        **({"input_stages": attrs["input_stages"]} if "input_stages" in attrs else {}),
        **sizes,
        "metrics": metrics(best, conf.get("best_samples_per_sec"), conf.get("best_runs")),
        "baseline": (metrics(base, conf.get("baseline_samples_per_sec"), conf.get("baseline_runs"))
                     if base else None),
        "speedup": conf.get("speedup") or (
            round(best.value / base.value, 3) if base and base.value and best.value else None
        ),
        # The speedup in words with its 95% interval over the confirmation's paired rounds
        # ("1.38x, 95% CI 1.31-1.45x, 6 rounds"); without confirmation, one window each.
        "speedup_text": speedup_words(best, base, conf, study),
        "speedup_search": (
            round(best.value / base.value, 3) if base and base.value and best.value else None
        ),
        "ceilings": {k: round(v, 2) for k, v in (trial_attrs(best).get("ceilings") or {}).items()},
        "fraction_of_ceiling": rounded(trial_attrs(best).get("fraction_of_ceiling")),
        "diagnosis": _verdict(best, trials),
        "baseline_diagnosis": _verdict(base, trials) if base else None,
        # Where each one's loader time goes (input-bound trials only: see measure/loader_profile.py).
        "loader_profile": {"best": trial_attrs(best).get("loader_profile"),
                           "baseline": trial_attrs(base).get("loader_profile") if base else None},
        "best_trial": best.number,
        # Which answer this file holds, what it changes in training, and the other answer.
        "training": training_section(study, best, conf, answer),
        "confirmation": _confirmation_section(conf),
        # What else the machine did while the windows measured (measure/contention.py), and the
        # statement when it was too busy to rank configurations (results/trust.py).
        "contention": {"best": trial_attrs(best).get("contention") or None,
                       "windows": load_statement(window_loads(study)) or "no window was contended",
                       "could_not_measure": could_not_measure(study)},
        "numerics": _numerics(attrs.get("numerics")),
        "memory_limit_gb": rounded(attrs.get("memory_limit_gb")),
        "compile": _compile_section(study, conf),
        "fixed_knobs": {k: {"value": v, "why": why} for k, (v, why) in attrs.get("fixed_knobs", {}).items()},
        # Whether the batches' shapes vary, as the baseline's measured steps saw them (a
        # padding collator: shape-specialising knobs are kept safe, docs/guide/huggingface.md).
        "input_shapes": shapes_words(trial_attrs(base).get("input_shapes") if base else None),
        "study": {"name": study.study_name, "storage": redact(storage_url), **counts(study),
                  "pruning": pruning_savings(study), "wall": attrs.get("wall"),
                  "time_budget": attrs.get("time_budget"), "agent_trials": sum(
                      1 for t in study.get_trials(deepcopy=False)
                      if trial_attrs(t).get("source") == "agent")},
    }
    doc.update(_launched_sections(attrs, best, base, trials))
    doc["nsight"] = nsight_commands(doc, attrs.get("workload_target"),
                                    trial_attrs(best).get("top_kernels"))
    return json.loads(json.dumps(doc))  # plain types only: tuples -> lists, no Python tags


def _device(dev: dict[str, Any]) -> dict[str, Any]:
    """The machine the study measured on, as the production run's environment check reads it."""
    return {"type": dev.get("device"), "name": dev.get("device_name"),
            "memory_gb": rounded(dev.get("total_memory_gb")), "torch": dev.get("torch_version"),
            "cuda": dev.get("cuda_version"), "cpu": dev.get("cpu_model")}


def _launched_sections(attrs: StudyAttrs, best: FrozenTrial, base: FrozenTrial | None,
                       trials: list[FrozenTrial]) -> dict[str, Any]:
    """For a study whose trials ran as ranks (launch.nproc_per_node): the torchrun line, the
    arguments of the wrapper the configuration applies (DDP's ``ddp_kwargs`` and ``ddp_step``,
    or fully_shard's ``fsdp_kwargs``, never both: a sharded file carried DDP's defaults, which
    nothing applied), what sharding bought, the scaling check and the collectives measured;
    nothing for a single-process study."""
    dev = attrs.get("device", {})
    knobs = trial_attrs(best)["knobs"]
    launched = attrs.get("launch")
    launch = launch_section(launched, knobs, dev)
    if not launch:
        return {}
    comm = trial_attrs(best).get("comm")
    out: dict[str, Any] = {"launch": launch}
    fsdp = fsdp_section(launched, knobs, comm)  # None for DDP's ranks
    if fsdp is None:
        out["ddp_kwargs"] = ddp_section(launched, knobs, dev.get("torch_version"), comm)
        out["ddp_step"] = ddp_step_section(knobs)
    else:
        out["fsdp_kwargs"] = fsdp
    # What sharding bought against replicated ranks in this study.
    words = sharding_words(trials, best, attrs.get("memory_limit_gb"))
    if words:
        out["sharding"] = {"strategy": knobs.get("sharding", "no_shard"), "words": words}
    if attrs.get("scaling"):  # launch.scaling: search/checks/scaling.py
        out["scaling"] = attrs["scaling"]
    out["comm"] = {"best": comm or None,
                   "baseline": trial_attrs(base).get("comm") or None if base else None}
    return out


def shapes_words(shapes: dict[str, Any] | None) -> dict[str, Any] | None:
    """The measured input shapes, and in words whether they vary."""
    if not shapes or not shapes.get("batches"):
        return None
    n, m = int(shapes["distinct"]), int(shapes["batches"])
    said = ("static: every measured batch had the same shapes" if n == 1 else
            f"vary: {n} distinct input shapes in {m} measured batches (e.g. "
            f"{'; '.join(shapes.get('examples') or [])})")
    return {**shapes, "vary": n > 1, "words": said}


#: The confirmation's keys best.yaml carries (the per-window loads stay in the study).
CONFIRMATION_KEYS = ("method", "finalists", "baseline_trial", "rounds", "runs", "intervals",
                     "dropped", "stopped", "selection", "decided", "precision", "budget_s",
                     "spent_s", "window_noise", "leader", "established", "half_width", "tie",
                     "tie_settling", "undecided", "search_round", "load", "same_training",
                     "race")


def _confirmation_section(conf: dict[str, Any]) -> dict[str, Any] | None:
    return {k: conf[k] for k in CONFIRMATION_KEYS if k in conf} if conf else None


def _compile_section(study: optuna.Study, conf: dict[str, Any]) -> dict[str, Any] | None:
    """Compile cost (cold/warm) and each compiled finalist's break-even: see compile_cost.py.
    The finalists are the confirmation's, else the three fastest trials."""
    trials = study.get_trials(deepcopy=False)
    numbers = conf.get("finalists") or [t.number for t in ranked_trials(study)[:3]]
    finals = [trials[n] for n in numbers if n < len(trials)]
    return compile_summary(trials, finals, study_attrs(study).get("run_steps"))


def _numerics(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The numerics check per checked trial, without the loss curves (in the study)."""
    if not record:
        return None
    return {"steps": record.get("steps"), "tail_steps": record.get("tail_steps"),
            "reference_seeds": record.get("reference_seeds"),
            "noise_multiple": record.get("noise_multiple"), "words": record.get("words"),
            "speed_only": record.get("speed_only"), "trials": {
                n: {k: v for k, v in e.items() if k not in ("losses", "reference_losses")}
                for n, e in (record.get("trials") or {}).items()}}


def _verdict(t: FrozenTrial, trials: list[FrozenTrial]) -> dict[str, Any] | None:
    """A trial's diagnosis, each fix with what the study measured of it (results/tried_fixes.py)."""
    d = trial_attrs(t).get("diagnosis")
    if not d:
        return None
    advice, tried = split_fixes(trials, t, d.get("fixes", []))
    return {"bottleneck": d.get("bottleneck"), "summary": d.get("summary"),
            "fixes": advice, **({"tried": tried} if tried else {})}


def pruning_savings(study: optuna.Study) -> dict[str, Any]:
    """What pruning saved: pruned trials' wall time against a full trial's (the mean of the
    trials that ran their whole window)."""
    trials = study.get_trials(deepcopy=False)
    full = [trial_attrs(t)["wall_s"] for t in trials
            if t.state == TrialState.COMPLETE and trial_attrs(t).get("wall_s") and "duplicate_of" not in trial_attrs(t)]
    pruned = [float(trial_attrs(t).get("wall_s") or 0.0) for t in trials
              if t.state == TrialState.PRUNED and "duplicate_of" not in trial_attrs(t)]
    if not full or not pruned:
        return {"pruned": len(pruned), "saved_s": 0.0, "mean_cost_fraction": None}
    mean_full = sum(full) / len(full)
    return {
        "pruned": len(pruned),
        "full_trial_s": round(mean_full, 2),
        "saved_s": round(sum(mean_full - w for w in pruned), 2),
        "mean_cost_fraction": round(sum(pruned) / len(pruned) / mean_full, 3),
    }


def trials_rows(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    base = baseline_trial(study)
    for t in study.get_trials(deepcopy=False):
        a = trial_attrs(t)
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "outcome": a.get("outcome", ""),
            "reason": a.get("reason", ""),
            "source": a.get("source", ""),
            "feasible": all(v <= 0 for v in t.constraints.values()) if t.constraints else "",
            # The knobs by which it trains another model than the baseline (core/knobs.py).
            "changes_training": " ".join(changes_training(study, t, base)) if a.get("knobs") else "",
            **{f"knob.{k.name}": (a.get("knobs") or {}).get(k.name, "") for k in KNOBS},
            **{k: ("" if v is None else v) for k, v in metrics(t).items()},
            "final_loss": a.get("final_loss", ""),
            "duplicate_of": a.get("duplicate_of", ""),
            "agent_reason": a.get("agent_reason", ""),
            "bottleneck": (a.get("diagnosis") or {}).get("bottleneck", ""),
            "diagnosis": (a.get("diagnosis") or {}).get("summary", ""),
            "loader_profile": (a.get("loader_profile") or {}).get("summary", ""),
            "fixes": "; ".join(fix_text(f) for f in (a.get("diagnosis") or {}).get("fixes", [])),
            "fraction_of_ceiling": rounded(a.get("fraction_of_ceiling")) or "",
            **{f"ceiling.{k}": round(v, 2) for k, v in (a.get("ceilings") or {}).items()},
            "ceiling_violation": a.get("ceiling_violation", ""),
            "wall_s": rounded(a.get("wall_s")) or "",
            # The window's own noise and what else the machine did while it measured.
            "window_spread": rounded((a.get("ceiling_noise") or {}).get("window")) or "",
            **_contention_columns(a.get("contention") or {}),
            **_comm_columns(a.get("comm") or {}, a.get("ranks") or []),
        }
        for name, share in (a.get("timers") or {}).items():
            row[f"timer.{name}"] = "" if share is None else round(share, 4)
        rows.append(row)
    return rows


#: The window's NVML readings (measure/nvml.py gpu_between) as trials.csv columns ``gpu.<key>``.
GPU_COLUMNS = ("utilization_pct", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "energy_j",
               "temperature_c", "other_processes", "other_memory_gb", "clock_events")


def _comm_columns(comm: dict[str, Any], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """A trial of several ranks: what the all-reduce adds to the step (the counterfactual),
    the slowest rank, and beside them where the all-reduce ran: DDP's own timing of the
    slowest rank's synced steps, and the profiles' all-reduce ranges (the slowest rank's, and
    rank 0's; blank where the trial was not profiled)."""
    if not comm:
        return {}
    traced = comm.get("trace") or {}
    slowest, rank0 = traced.get("slowest") or {}, traced.get("rank0") or {}
    return {"comm.exposed_share": rounded(comm.get("exposed_share")),
            "comm.exposed_ms": rounded(comm.get("exposed_ms")),
            "comm.exposed_share_low": rounded(comm.get("exposed_share_low")),
            "comm.pairs": comm.get("pairs", ""),  # the bound's evidence (measure/comm.py)
            "comm.synced_step_ms": rounded(comm.get("synced_step_ms")),
            "comm.unsynced_step_ms": rounded(comm.get("unsynced_step_ms")),
            "comm.rank_gap_ms": rounded(comm.get("rank_gap_ms")),
            "comm.ddp_comm_ms": rounded(comm.get("ddp_comm_ms")),
            "comm.ddp_overlap_share": rounded(comm.get("ddp_overlap_share")),
            "comm.trace_allreduce_ms": rounded(slowest.get("allreduce_ms_per_step")),
            "comm.trace_after_backward_ms": rounded(slowest.get("after_backward_ms_per_step")),
            "comm.trace_overlap_share": rounded(slowest.get("overlap_share")),
            "comm.trace_allreduce_ms_rank0": rounded(rank0.get("allreduce_ms_per_step")),
            "comm.trace_overlap_share_rank0": rounded(rank0.get("overlap_share")),
            # A sharded trial's collectives (measure/shard_comm.py), per step of the slowest rank.
            **({f"comm.{k}": comm.get(k) if k == "collectives_source" else rounded(comm.get(k))
                for k in SHARD_COLUMNS} if comm.get("sharding") else {}),
            "ranks": len(ranks), "slowest_rank": ranks[0]["rank"] if ranks else "",
            # The memory limit holds per rank: each rank's own peak.
            **{f"peak_memory_gb.rank{d['rank']}": rounded(d.get("peak_memory_gb"))
               for d in sorted(ranks, key=lambda d: d["rank"])}}


#: A sharded trial's trials.csv columns ``comm.<key>``: all-gathers and reduce-scatters per
#: step, their time (ms per step) and the record they were read from.
SHARD_COLUMNS = ("all_gather_ms", "reduce_scatter_ms", "all_gathers", "reduce_scatters",
                 "collectives_source")


def _contention_columns(c: dict[str, Any]) -> dict[str, Any]:
    if not c:
        return {}
    out = {"contended": bool(c.get("contended")),
           "other_cpu_cores": rounded(c.get("other_cpu_cores")),
           "runqueue_wait_share": rounded(c.get("runqueue_wait_share")),
           "steal_share": rounded(c.get("steal_share")),
           "contention": "; ".join(c.get("reasons") or []),
           "remeasured": len(c.get("earlier") or [])}
    gpu = c.get("gpu")
    if gpu and gpu.get("available") is False:
        out["gpu.available"] = False  # NVML missing: the reason is in the trial's contention
    elif gpu:
        for key in GPU_COLUMNS:
            value = gpu.get(key)
            out[f"gpu.{key}"] = " ".join(value) if isinstance(value, list) else (
                "" if value is None else value)
    return out


def write_exports(study: optuna.Study, out_dir: Path, storage_url: str) -> Path | None:
    rows = trials_rows(study)
    if rows:
        fields: list[str] = []
        for r in rows:
            fields += [k for k in r if k not in fields]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(out_dir / "trials.csv", buf.getvalue())
    doc = best_document(study, storage_url)
    if doc is None:
        return None
    _publish_trace(out_dir / "trials" / str(doc["best_trial"]) / "trace.json",
                   out_dir / "best_trace.json")
    target = study_attrs(study).get("workload_target")
    path = _write_answer(doc, out_dir, "best.yaml", target)
    other = (doc.get("training") or {}).get("other")
    for answer, name in ANSWER_FILES.items():
        if other and other["answer"] == answer:
            other_doc = best_document(study, storage_url, answer)
            if other_doc is not None:
                _write_answer(other_doc, out_dir, name, target)
                continue
        remove_answer(out_dir, name)  # one answer now, or a resumed study's other setting
    return path


def _write_answer(doc: dict[str, Any], out_dir: Path, file: str, target: Any) -> Path:
    """One answer's files: ``file`` (best.yaml or ANSWER_FILES'), its Hydra option (the
    config group ``autotune``, option named as the file), its overrides and its framework
    exports, each named with the answer's suffix beside the default answer's."""
    path = out_dir / file
    atomic_write(path, yaml.safe_dump(doc, sort_keys=False))
    atomic_write(out_dir / "hydra" / "autotune" / file, hydra_group_text(doc, out_dir,
                                                                         file.removesuffix(".yaml")))
    atomic_write(out_dir / satellite_name("overrides.txt", file), overrides_text(doc))
    write_framework_exports(target, doc, out_dir, lambda name: satellite_name(name, file))
    return path


def _publish_trace(trace: Path, dest: Path) -> None:
    """best_trace.json = the exported trial's own trace (kept while it was a finalist); a hard
    link, since GPU traces run to tens of MB and exports are rewritten after every trial."""
    if not trace.exists() or (dest.exists() and os.path.samefile(trace, dest)):
        return  # renaming a link onto another link of the same file would leave the .tmp behind
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(trace, tmp)
    except OSError:  # a filesystem without hard links
        shutil.copyfile(trace, tmp)
    os.replace(tmp, dest)


def write_framework_exports(target: Any, best: dict[str, Any], out_dir: Path,
                            named: Callable[[str], str] = str) -> list[Path]:
    """Write the exported workload's framework files (``Workload.framework_exports``: an
    adapter's lightning.yaml or training_args.yaml) beside best.yaml, each named by
    ``named`` (the other answer's carry its suffix). A workload class that cannot be imported
    here writes nothing (best.yaml stands)."""
    if not target:
        return []
    try:
        cls = resolve_target(str(target))
    except WorkloadError:
        return []
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        return []
    written = []
    for name, document in cls.framework_exports(best).items():
        path = out_dir / named(name)
        atomic_write(path, yaml.safe_dump(document, sort_keys=False))
        written.append(path)
    return written
