"""The strategy benchmark (benchmarks/strategies.py): its figures on small real data, the
measurement store's refusal to cross machines or versions, pruning replayed on a stored
window, and one tiny end-to-end run through autotune's driver and trial window."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.core.env import Env
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.runner import Watch
from benchmarks.measure_cache import CacheRefused, Entry, MeasurementCache, machine, replay
from benchmarks.strategy_figures import (
    Rec,
    incumbent_scores,
    kendall_tau,
    noise,
    noisy,
    seconds_to,
    summarize,
    trials_to,
    wasted_share,
)

ENV = Env(device="cpu", device_name="AMD EPYC 9B14", total_memory_gb=8.0, cpu_count=2,
          cuda_capability=None, bf16=True, compiler=True, torch_version="2.14.1",
          cuda_version=None, gpu_count=0)
REQ = TrialRequest(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"},
                   knobs={"num_workers": 0, "batch_size": 32}, device="cpu",
                   window={"warmup_steps": 2, "measure_steps": 6})


def _recs() -> list[Rec]:
    # A search: the baseline, a config whose one window was lucky (search 110, truly 90), a
    # failure, a pruned trial, then the true best.
    return [Rec("base", 50.0, 10.0, "ok"), Rec("lucky", 110.0, 12.0, "ok"),
            Rec("oom", None, 3.0, "failed"), Rec("slow", None, 5.0, "pruned"),
            Rec("best", 120.0, 10.0, "ok")]


TRUTH = {"base": 50.0, "lucky": 90.0, "best": 100.0}


def test_incumbent_is_scored_by_the_oracles_figure_not_its_lucky_window():
    scores = incumbent_scores(_recs(), TRUTH)
    assert scores == [50.0, 90.0, 90.0, 90.0, 100.0]
    # 0.95 x oracle 100: the lucky window (110 in search) does not count as reaching it.
    assert trials_to(scores, 95.0) == 5
    assert trials_to(scores, 101.0) is None
    assert seconds_to(_recs(), scores, 95.0) == pytest.approx(40.0)


def test_a_confirmation_exports_its_winner_and_counts_as_no_trial():
    """autotune's confirmation re-measures the finalists: its winner (here the truly better
    "best", which a lucky window had beaten in search) is what it exports after its last
    trial, and its seconds count in the time to get there."""
    recs = [Rec("base", 50.0, 10.0, "ok"), Rec("best", 95.0, 10.0, "ok"),
            Rec("lucky", 110.0, 12.0, "ok"), Rec("best", None, 6.0, "confirm")]
    scores = incumbent_scores(recs, TRUTH)
    assert scores == [50.0, 100.0, 90.0, 100.0]
    assert trials_to(scores, 95.0, recs) == 2  # reached at trial 2 (then lost, then confirmed)
    assert trials_to(scores[:1] + scores[2:], 95.0, recs[:1] + recs[2:]) == 2  # at the end
    s = summarize([recs], TRUTH, oracle=100.0)
    assert s["trials"] == 3 and s["fraction"] == pytest.approx(1.0)
    assert s["total_s"] == pytest.approx(38.0) and s["wasted_share"] == 0.0


def test_wasted_share_counts_pruned_and_failed_time():
    assert wasted_share(_recs()) == pytest.approx(8.0 / 40.0)
    assert wasted_share([]) == 0.0


def test_summary_over_seeds_counts_seeds_that_never_got_there():
    never = [Rec("base", 50.0, 10.0, "ok"), Rec("lucky", 110.0, 12.0, "ok")]
    s = summarize([_recs(), never, _recs()], TRUTH, oracle=100.0)
    assert s["seeds"] == 3 and s["never"] == 1
    assert s["trials_to_5pct"] == 5 and s["seconds_to_5pct"] == pytest.approx(40.0)
    # Two seeds of three never got there: the median seed never did either.
    most_never = summarize([_recs(), never, never], TRUTH, oracle=100.0)
    assert most_never["never"] == 2 and most_never["trials_to_5pct"] is None
    assert most_never["seconds_to_5pct"] is None
    assert s["fraction"] == pytest.approx(1.0) and s["fraction_min"] == pytest.approx(0.9)


def test_kendall_tau_matches_the_tau_b_definition():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # A tie in one ranking: tau-b = 5 / sqrt(6 * 5) (scipy.stats.kendalltau gives 0.91287).
    assert kendall_tau([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.912870929)
    with pytest.raises(ValueError, match="same >= 2 items"):
        kendall_tau([1.0], [1.0])


def test_fidelity_sets_take_the_top_and_spread_over_the_rest():
    """The spread set runs evenly over the ranks below the top, the slowest included: a
    ranking among near-equal top configurations tests the machine's noise, across the range
    it tests the window."""
    from benchmarks.fidelity import fidelity_sets

    truth = {f"c{i:02d}": 1000.0 - i for i in range(48)}
    top, spread = fidelity_sets(truth, set(truth), 5, 5)
    assert top == ["c00", "c01", "c02", "c03", "c04"]
    assert spread == ["c05", "c15", "c26", "c37", "c47"]
    assert fidelity_sets(truth, {"c00", "c01"}, 5, 5) == (["c00", "c01"], [])
    assert fidelity_sets(truth, set(truth), 5, 0)[1] == []


def test_long_self_tau_ranks_the_long_windows_rounds_against_each_other():
    from benchmarks.fidelity import fidelity_row, long_self_tau

    rows = [fidelity_row(k, i + 1, 0.0, [1.0, 1.0], longs, None, 0.0)
            for i, (k, longs) in enumerate([("a", [30.0, 10.0]), ("b", [20.0, 20.0]),
                                            ("c", [10.0, 30.0])])]
    assert long_self_tau(rows) == pytest.approx(-1.0)  # the rounds disagree completely
    assert rows[0]["long_spread"] == pytest.approx(1.0)  # (30 - 10) / median 20
    assert long_self_tau(rows[:1]) is None


def test_noise_is_iqr_over_median_and_flagged_above_ten_percent():
    quiet = {"median": 100.0, "p25": 98.0, "p75": 103.0}
    loud = {"median": 100.0, "p25": 90.0, "p75": 115.0}
    assert noise(quiet) == pytest.approx(0.05) and not noisy(quiet)
    assert noise(loud) == pytest.approx(0.25) and noisy(loud)
    assert noise({"median": 100.0, "p10": 1.0}) is None  # no quartiles: not measured


def _entry(samples: float) -> Entry:
    res = WindowResult(outcome="ok", samples_per_sec=samples, wall_s=7.5,
                       step_ms={"median": 10.0, "p25": 9.0, "p75": 11.0}, chunks=[samples])
    return Entry(res, [(2.0, dataclasses.asdict(Watch("measure", 3, [samples * 0.3]))),
                       (4.0, dataclasses.asdict(Watch("measure", 6, [samples * 0.3, samples])))])


def test_store_serves_the_same_machine_and_refuses_another(tmp_path: Path):
    here = MeasurementCache(machine(ENV), tmp_path)
    here.put(REQ, "search", _entry(123.0))
    got = MeasurementCache(machine(ENV), tmp_path).get(REQ, "search")  # a new process, same machine
    assert got is not None and got.served and got.result.samples_per_sec == 123.0
    assert got.result.wall_s == 7.5  # charged its measured wall time, not zero
    # Another torch, another CPU model: another key, so nothing is served...
    for other in (dataclasses.replace(ENV, torch_version="2.15.0"),
                  dataclasses.replace(ENV, device_name="Intel Xeon 8480")):
        assert MeasurementCache(machine(other), tmp_path).get(REQ, "search") is None
    # ...and an entry stored under the key by another machine is refused, never served.
    other = MeasurementCache({**machine(ENV), "optuna": "4.0.0"}, tmp_path)
    stolen = tmp_path / f"{other.key(REQ, 'search')}.json"
    stolen.write_text((tmp_path / f"{here.key(REQ, 'search')}.json").read_text())
    with pytest.raises(CacheRefused, match="optuna"):
        other.get(REQ, "search")
    # Another window or repetition is another measurement.
    longer = dataclasses.replace(REQ, window=dataclasses.replace(REQ.window, measure_steps=60))
    assert here.get(longer, "search") is None and here.get(REQ, "ab0") is None
    stored = json.loads((tmp_path / f"{here.key(REQ, 'search')}.json").read_text())
    assert stored["machine"]["device_name"] == "AMD EPYC 9B14"


def test_replay_prunes_at_the_recorded_heartbeat():
    entry = _entry(100.0)
    seen: list[list[float]] = []

    def far_below(watch: Watch) -> str | None:
        seen.append(list(watch.chunks))
        return "far below" if watch.chunks and watch.chunks[-1] < 50 else None

    res = replay(entry, far_below)
    assert res.outcome == "pruned" and res.error == "far below"
    assert res.wall_s == 2.0  # charged up to the heartbeat that stopped it
    assert seen == [[30.0]]
    full = replay(entry, lambda w: None)
    assert full.outcome == "ok" and full.wall_s == 7.5 and full.samples_per_sec == 100.0


@pytest.mark.parametrize("name", ["smoke", "cpu", "gpu", "gpu-gpt"], ids=lambda n: f"preset_{n}")
def test_every_preset_is_a_valid_space_on_its_device(name: str):
    """A preset's space must build on its device (a typo or an invalid value is a KnobError
    naming the valid values), and its grid stay small enough for its time budget."""
    from benchmarks.strategies import PRESETS, grid_points, make_setup, recipe_knobs

    preset = PRESETS[name]
    env = ENV if preset.device == "cpu" else dataclasses.replace(
        ENV, device="cuda", device_name="NVIDIA H100 80GB HBM3", total_memory_gb=79.1,
        cpu_count=16, cuda_capability=(9, 0), cuda_version="13.0", gpu_count=1)
    setup = make_setup(preset, env, Path("/nonexistent"))
    points = grid_points(setup.space)
    assert 2 <= len(points) <= 64 and len({json.dumps(p, sort_keys=True) for p in points}) == len(points)
    assert setup.space.baseline in points or name == "gpu"  # gpu: the defaults' 0 workers
    recipe = recipe_knobs(env, setup)
    assert recipe["num_workers"] == env.cpu_count and recipe["set_to_none"] is True
    if preset.device == "cuda":
        assert recipe["pin_memory"] and recipe["non_blocking"] and recipe["amp"] == "bf16"
        assert recipe["compile"] == "default"
    else:
        assert recipe["compile"] == "off" and recipe["pin_memory"] is False
    if name in ("cpu", "gpu"):  # resnet18's stages: resize | to_float, normalize
        assert recipe["transform_split"] == 1 and setup.space.baseline["transform_split"] == 3


def test_tiny_benchmark_end_to_end(tmp_path: Path):
    """Two configurations, every strategy, one seed: the report names each strategy, the
    oracle is the grid's best, and a second run measures nothing again (the store serves)."""
    from benchmarks.strategies import PRESETS, run_bench
    from benchmarks.strategies_report import write_report

    preset = dataclasses.replace(
        PRESETS["smoke"], space={**PRESETS["smoke"].space, "num_workers": [0],
                                 "batch_size": [8, 16]},
        window={**PRESETS["smoke"].window, "profile": False, "measure_steps": 4,
                "min_measure_seconds": 0.1, "min_measure_steps": 2, "warmup_steps": 1},
        budget=2, seeds=[0], top=1, spread=1, ab_rounds=1, long_factor=2, grid_rounds=2)
    store = tmp_path / "store"
    bench = run_bench("tiny", preset, store, tmp_path / "work1")
    assert len(bench.grid) == 2 and all(r.state == "ok" for r in bench.grid)
    assert bench.truth[bench.oracle_key] == max(bench.truth[r.key] for r in bench.grid)
    # Every point measured twice (grid_rounds), the top one once more (ab_rounds).
    assert all(len(bench.windows[r.key]) >= 2 for r in bench.grid)
    assert len(bench.windows[bench.oracle_key]) == 3
    assert set(bench.runs) == {"random", "tpe", "tpe+prune", "autotune"}
    assert all(len(runs) == 1 and len(runs[0]) == 2 for n, runs in bench.runs.items()
               if n != "autotune")
    # autotune confirms (2 rounds over its finalists and the baseline), charged its windows.
    *trials, conf = bench.runs["autotune"][0]
    assert len(trials) == 2 and conf.state == "confirm" and conf.seconds > 0
    assert conf.key in {t.key for t in trials}
    # Served from the store through Driver.measure, and charged the window's wall time.
    assert all(runs[0][0].seconds > 0 for runs in bench.runs.values())
    # Fidelity: the oracle (top 1) and the other configuration (spread), two rounds each.
    assert [f["key"] for f in bench.fidelity] == [bench.oracle_key]
    assert [f["rank"] for f in [*bench.fidelity, *bench.spread]] == [1, 2]
    assert all(len(f["longs"]) == 2 and f["long"] and f["long_spread"] is not None
               for f in [*bench.fidelity, *bench.spread])
    lines = write_report(bench, preset, "python -m benchmarks.strategies --preset tiny", tmp_path)
    text = (tmp_path / "benchmarks.md").read_text()
    for name in ("defaults", "recipe", "grid (oracle)", "random", "tpe+prune", "autotune"):
        assert f"| {name} |" in text
    assert "Kendall tau" in text and "torch " in text and lines
    assert "The long window against itself" in text and "Over all 2 configurations" in text
    assert "lie within 5% of it by their medians" in text
    assert "Speedup over the defaults" in text and "recipe " in text
    svg = (tmp_path / "strategies-tiny.svg").read_text()
    # matplotlib's SVG (text kept as text): both panels, the oracle, each strategy in the legend.
    assert "<svg" in svg and "best so far vs trials" in svg and "oracle (1.0)" in svg
    assert all(f">{name}</text>" in svg for name in (*bench.singles, "grid", *bench.runs))
    from benchmarks.strategies_report import strategy_rows

    rows = dict(strategy_rows(bench))
    assert rows["grid (oracle)"]["fraction"] == pytest.approx(1.0)  # it exports the oracle
    assert all(0 < rows[n]["fraction"] <= 1.0 for n in bench.runs)

    again = run_bench("tiny", preset, store, tmp_path / "work2")
    assert again.cache_misses == 0 and again.truth == bench.truth
