"""The diagnosis of sharded trials and of the phases beside the verdict: pure functions over
the plain data a window returns (nothing launched here; tests/test_sharding.py and
tests/test_launched_honest.py measure real ranks)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.cli.app import ranked
from autotune.cli.config import LaunchConfig
from autotune.core.env import Env
from autotune.core.space import build_space, without_accumulation
from autotune.diagnose.verdicts import diagnose
from autotune.workloads.gpt import GPTWorkload
from autotune.workloads.mlp import MLPWorkload

BASE = {"samples_per_sec": 100.0, "step_ms": {"median": 100.0}, "peak_memory_gb": 0.5,
        "timers": {"data_wait": 0.01, "compute": 0.8, "optimizer": 0.1}}


def _space(env: Env, wl: object = None, **over: object):  # type: ignore[no-untyped-def]
    return without_accumulation(build_space(ranked(env, LaunchConfig(nproc_per_node=2)),
                                            wl or GPTWorkload().cpu_sized(), over))


def test_a_sharded_step_waiting_on_its_collectives_gets_fsdp_fixes(cpu_env: Env) -> None:
    """Communication-bound at the lower bound: the all-gathers and reduce-scatters named with
    their profiled counts and times, and the fixes FSDP2's own recipe gives, in order."""
    # A CPU with native bf16 (AVX512-BF16 or AMX), where bf16 gathers are searched: the
    # subject is the rule, which the host this suite runs on must not decide.
    cpu_env = dataclasses.replace(cpu_env, bf16=True)
    space = _space(cpu_env)
    knobs = {**space.baseline, "sharding": "full_shard", "batch_size": 8}
    comm = {"exposed_share": 0.42, "exposed_ms": 42.0, "exposed_share_low": 0.31,
            "all_gathers": 5.0, "all_gather_ms": 9.4, "reduce_scatters": 3.0,
            "reduce_scatter_ms": 14.0, "sharding": "full_shard"}
    verdict = diagnose({**BASE, "comm": comm}, knobs, "cpu", 10, domains=space.domains)
    assert verdict["bottleneck"] == "communication"
    assert "FSDP2's collectives (5 all-gathers, 9.4 ms and 3 reduce-scatters, 14.0 ms a step)" \
        in verdict["summary"]
    fixes = [(f["knob"], f["value"]) for f in verdict["fixes"]]
    assert fixes[:4] == [("fsdp_prefetch", 1), ("sharding", "shard_grad_op"),
                         ("fsdp_wrap_blocks", 2), ("batch_size", 16)]
    assert ("fsdp_param_dtype", "bf16") in fixes
    named = [f["knob"] for f in verdict["fixes"]] + [r["knob"] for r in verdict["ruled_out"]]
    assert "bucket_cap_mb" not in named and "gradient_as_bucket_view" not in named
    # The same share under its lower bound's threshold: not the verdict, but named beside it.
    noisy = diagnose({**BASE, "comm": {**comm, "exposed_share_low": 0.1}}, knobs, "cpu", 10,
                     domains=space.domains)
    assert noisy["bottleneck"] != "communication"
    assert "Also large: FSDP2's all-gathers and reduce-scatters add 42% of the step" in noisy["summary"]
    assert ("fsdp_prefetch", 1) in [(f["knob"], f["value"]) for f in noisy["fixes"]]


def test_every_large_phase_is_named_not_only_the_dominant_one(cpu_env: Env) -> None:
    """The 2-rank DDP study of a wide MLP: 25.8% exposed, lower bound 24.2%, under the
    verdict's 25%: the all-reduce is named beside the compute verdict, with its fixes after
    the verdict's; a small share and a phase that is the verdict's own are not repeated."""
    space = _space(cpu_env, MLPWorkload())
    knobs = {**space.baseline, "batch_size": 32}
    comm = {"exposed_share": 0.258, "exposed_ms": 25.8, "exposed_share_low": 0.242}
    result = {**BASE, "comm": comm, "timers": {**BASE["timers"], "optimizer": 0.3}}
    verdict = diagnose(result, knobs, "cpu", 10, domains=space.domains)
    assert verdict["bottleneck"] == "cpu_compute"
    assert ("Also large: the gradient all-reduce adds 26% of the step (25.8 ms; at least 24%, "
            "under the 25% the communication verdict needs); the optimizer step takes 30% of "
            "the step.") in verdict["summary"]
    knobs_fixed = [f["knob"] for f in verdict["fixes"]]
    assert "gradient_as_bucket_view" in knobs_fixed
    assert knobs_fixed.index("gradient_as_bucket_view") > knobs_fixed.index("optimizer_impl")
    quiet = diagnose({**BASE, "comm": {**comm, "exposed_share": 0.05}}, knobs, "cpu", 10,
                     domains=space.domains)
    assert "Also large" not in quiet["summary"]
    waiting = diagnose({**BASE, "timers": {**BASE["timers"], "data_wait": 0.5}}, knobs, "cpu", 10,
                       domains=space.domains)
    assert waiting["bottleneck"] == "input_pipeline" and "Also large" not in waiting["summary"]


def test_ranks_over_their_memory_are_offered_sharding_with_a_releasing_allocator(
        cpu_env: Env) -> None:
    space = _space(cpu_env)
    knobs = {**space.baseline, "batch_size": 16}
    over = {**BASE, "peak_memory_gb": 1.9}
    verdict = diagnose(over, knobs, "cpu", 2.0, domains=space.domains)
    assert verdict["bottleneck"] == "memory"
    first = verdict["fixes"][0]
    assert (first["knob"], first["value"], first["with"]) == (
        "sharding", "full_shard", {"host_allocator": "release"})
    sharded = diagnose(over, {**knobs, "sharding": "full_shard"}, "cpu", 2.0,
                       domains=space.domains)
    assert (sharded["fixes"][0]["knob"], sharded["fixes"][0]["value"]) == ("host_allocator", "release")
    # One process: nothing to shard, and the verdict does not say it is ruled out.
    alone = build_space(cpu_env, GPTWorkload().cpu_sized(), {})
    single = diagnose(over, {**alone.baseline, "batch_size": 16}, "cpu", 2.0, domains=alone.domains)
    assert "sharding" not in [f["knob"] for f in single["fixes"] + single["ruled_out"]]


def test_a_rank_over_the_limit_is_named_and_the_fsdp_arguments_export() -> None:
    from autotune.measure.protocol import WindowResult
    from autotune.results.sharding_export import fsdp_section
    from autotune.search.units import over_limit, result_line

    r = WindowResult(outcome="ok", peak_memory_gb=2.13, ranks=[
        {"rank": 0, "peak_memory_gb": 2.12}, {"rank": 1, "peak_memory_gb": 2.13}])
    assert over_limit(r, 1.9) == ("rank 1 peaked at 2.13 GB, over the 1.90 GB limit per rank "
                                  "(rank 0: 2.12 GB)")
    assert "OVER LIMIT (rank 1 peaked at 2.13 GB" in result_line(r, 1.9)
    launch = {"nproc_per_node": 2, "nnodes": 1}
    knobs = {"sharding": "shard_grad_op", "fsdp_param_dtype": "bf16", "fsdp_wrap_blocks": 2,
             "fsdp_prefetch": 1, "accumulation_no_sync": False}
    section = fsdp_section(launch, knobs, {"block_types": ["LlamaDecoderLayer"]})
    assert section == {
        "reshard_after_forward": False,
        "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
        "offload_policy": None, "mesh_shape": [2], "mesh_dim_names": ["shard"],
        "block_types": ["LlamaDecoderLayer"], "blocks_per_group": 2, "prefetch": 1,
        "accumulation_no_sync": False}
    assert fsdp_section(launch, {"sharding": "no_shard"}) is None
    assert fsdp_section({"nproc_per_node": 2, "nnodes": 2}, {"sharding": "hybrid_shard"}
                        )["mesh_shape"] == [2, 2]


def test_sharded_finalists_are_checked_in_numerics_families_of_their_own() -> None:
    from autotune.search.checks.numerics import DEFAULT_TOLERANCE, families

    ref = {"sharding": "no_shard", "fsdp_param_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
           "fsdp_wrap_blocks": 1, "fsdp_prefetch": 0}
    assert families({**ref, "sharding": "full_shard", "fsdp_prefetch": 2}, ref) == ["sharding"]
    assert families({**ref, "sharding": "full_shard", "fsdp_param_dtype": "bf16"}, ref) == [
        "sharding", "fsdp_param_dtype"]
    assert families({**ref, "fsdp_reduce_dtype": "bf16"}, ref) == ["fsdp_reduce_dtype"]
    assert DEFAULT_TOLERANCE["fsdp_param_dtype"] == DEFAULT_TOLERANCE["amp"]


def test_a_baseline_over_the_memory_limit_is_never_kept_and_the_export_says_so() -> None:
    """The DDP baseline does not fit its ranks, the sharded finalist does and is slower (gloo
    on a CPU): the confirmation exports the finalist, not the baseline, and best.yaml's
    speedup says it is the fastest that fits, at its measured fraction of the baseline."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    from autotune.results.export import best_document
    from autotune.results.intervals import paired_speedup
    from autotune.results.record import set_study_attrs
    from autotune.search.confirmation.choose import candidates_of, decide, still_racing

    study = optuna.create_study(direction="maximize")
    dist = {"sharding": CategoricalDistribution(["no_shard", "full_shard"])}
    for n, (sharding, value, peak) in enumerate((("no_shard", 2.0, 1.85), ("full_shard", 1.6, 1.1))):
        study.add_trial(optuna.trial.create_trial(
            params={"sharding": sharding}, distributions=dist, value=value,
            user_attrs={"knobs": {"sharding": sharding, "batch_size": 4}, "outcome": "ok",
                        "samples_per_sec": value, "peak_memory_gb": peak,
                        "source": "baseline" if n == 0 else "agent"},
            system_attrs={"constraints": [peak - 1.7]}))
    runs = {"0": [2.0, 2.1, 2.0, 1.9], "1": [1.6, 1.7, 1.6, 1.55]}
    record: dict[str, Any] = {
        "method": "rounds", "finalists": [1], "baseline_trial": 0, "baseline_fits": False,
        "rounds": 4, "order": [[0, 1]] * 4, "runs": runs,
        "intervals": {"1": {**paired_speedup(runs["1"], runs["0"]).as_dict(), "changed": 1,
                            "peak_memory_gb": 1.1}},
        "dropped": [], "stopped": "precision", "precision": 0.05, "failures": []}
    decided = decide(record, still_racing(candidates_of(record)), 0.05)
    assert decided["best_trial"] == 1 and decided["established"] is False
    set_study_attrs(study, {"confirmation": decided, "memory_limit_gb": 1.7})
    doc = best_document(study, "sqlite://")
    assert doc is not None and doc["best_trial"] == 1
    assert doc["speedup_text"].startswith("0.8")
    assert "of your own configuration (trial 0), which is over the memory limit: this is the " \
        "fastest configuration measured that fits" in doc["speedup_text"]
    # The same rounds with a baseline that fits: it is kept, as before.
    kept = decide({**record, "baseline_fits": True}, still_racing(candidates_of(record)), 0.05)
    assert kept["best_trial"] == 0


def test_a_busy_machines_statement_does_not_keep_a_baseline_that_does_not_fit() -> None:
    from autotune.results.trust import could_not_measure

    conf = {"established": False, "baseline_fits": False, "precision": 0.05, "rounds": 3,
            "stopped": "budget", "precise": False,
            "window_noise": 0.05, "spent_s": 536.0, "budget_s": 300.0,
            "intervals": {"6": {"speedup": 0.77, "ci_low": 0.5, "ci_high": 1.1, "rounds": 3}},
            "loads": [{"contended": True, "other_cpu_cores": 0.8, "cpus": 2}] * 4}
    import optuna

    from autotune.results.record import set_study_attrs

    study = optuna.create_study()
    set_study_attrs(study, {"confirmation": conf})
    said = could_not_measure(study) or ""
    assert "your own configuration is over the memory limit: the fastest finalist that fits " \
        "is exported" in said and "your own configuration stays" not in said
