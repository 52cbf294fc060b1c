"""How close to the best configuration that exists, how fast, against what a user would
otherwise do, and whether a short window predicts a long one.

For one workload, device and a stated reduced space (``PRESETS``), through autotune's own trial
window (``run_window``: a fresh subprocess per window) and its own study driver:

- ``defaults``: the workload's configuration (autotune's trial 0);
- ``recipe``: the hand recipe of Chaim Rand's "PyTorch Model Performance Analysis and
  Optimization" (2023), fixed: all cores as workers, pinned + non_blocking, the
  largest power-of-two batch that fits (halved on OOM), uint8 transfer with device normalize
  (for a workload with input stages, ``transform_split`` at its float conversion), set_to_none, AMP (bf16 where supported, else fp16 on CUDA) and compile, each resolved
  against this device's valid domains (on CPU: no pinning, no compile); knobs the recipe does
  not name keep the reduced space's pinned values;
- ``grid``: every configuration of the reduced space, the oracle: each measured in
  ``grid_rounds`` rounds, then the top ``top``, the recipe and the defaults ``ab_rounds`` more
  times, in turn (A/B/A/B); each configuration's figure is the median of all its windows;
- ``random`` (Optuna RandomSampler), ``tpe`` (autotune's TPE sampler; no diagnosis, pruning or
  agent), ``tpe+prune`` (its pruning, no agent) and ``autotune`` (agent, pruning and the
  confirmation a study runs by default), each with the same trial budget, for several sampler
  seeds, through ``loop.driver.Driver``.

Every window is stored (benchmarks/measure_cache.py says how that stays honest: never across
machines or versions; a stored window is charged its measured wall time, and pruning replays
the window's recorded progress), so the grid's windows serve the search strategies. A
strategy's best is the configuration it would export (its fastest search figure; autotune's:
its confirmation's winner), scored by the oracle's median figure for that configuration, so a
lucky window does not count as success.

Fidelity: the top ``top`` configurations, and ``spread`` more over the rest of the ranking,
re-measured with the study's window and one ``long_factor`` times longer, ``fidelity_rounds``
times in the order A/B/.../B/A; the short window's error against the long one; Kendall's tau
between the two rankings, and between the long window's own rounds (what this machine allows
any window); each window's noise (IQR/median of its step times), flagged above 10%.

    python -m benchmarks.strategies --preset smoke            # ~2 minutes, a 4-point space
    python -m benchmarks.strategies --preset cpu --record     # adds to docs/benchmarks.md

Run from the repository's root.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.core.config import StudyConfig, WindowConfig, sized_for
from autotune.core.env import Env, probe
from autotune.core.space import Space, build_space
from autotune.core.workload import build_workload
from autotune.measure.protocol import TrialRequest
from autotune.search.setup import StudySetup, create_study
from benchmarks.fidelity import fidelity_row, fidelity_sets, long_window
from benchmarks.measure_cache import MeasurementCache, ReplayDriver, machine
from benchmarks.presets import PRESETS, Preset
from benchmarks.record import command
from benchmarks.strategy_figures import Rec, config_key
from benchmarks.strategy_figures import noise as window_noise

ROOT = Path(__file__).resolve().parent.parent

SEARCHERS = ("random", "tpe", "tpe+prune", "autotune")


def make_setup(preset: Preset, env: Env, work: Path) -> StudySetup:
    """The study setup every strategy shares (window seed 0: the sampler seed varies)."""
    workload = build_workload(preset.workload)
    space = build_space(env, workload, {k: (v[0] if len(v) == 1 else v)
                                        for k, v in preset.space.items()})
    window = sized_for(WindowConfig(**preset.window), preset.device)
    return StudySetup(
        name="bench", storage=f"sqlite:///{work}/bench.db", out_dir=work, env=env, space=space,
        workload_spec=dict(preset.workload), workload_label=workload.describe(),
        study=sized_for(StudyConfig(), preset.device), window=window,
        memory_limit_gb=0.9 * env.total_memory_gb, image_inputs=workload.image_inputs)


def request(setup: StudySetup, knobs: dict[str, Any], window: WindowConfig | None = None,
            ceilings: bool = True) -> TrialRequest:
    """The request the study driver makes for these knobs (the grid's, so the driver's trials
    find them stored); re-measurements ask for no ceilings, which lie outside the window."""
    return TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                        window=window or setup.window, seed=setup.seed, cpu_sized=setup.cpu_sized,
                        trace=setup.window.profile,
                        ceilings={"loader": ceilings, "compute": ceilings})


def grid_points(space: Space) -> list[dict[str, Any]]:
    """Every distinct full configuration of the space (inactive knobs at their off value)."""
    searched = [n for n, d in space.domains.items() if len(d.values) > 1]
    seen, out = set(), []
    for combo in itertools.product(*(space.domains[n].values for n in searched)):
        full = space.complete(dict(zip(searched, combo, strict=True)))
        if config_key(full) not in seen:
            seen.add(config_key(full))
            out.append(full)
    return out


def recipe_knobs(env: Env, setup: StudySetup) -> dict[str, Any]:
    """The hand recipe on this device (see the module docstring)."""
    full = build_space(env, build_workload(setup.workload_spec), {})
    d = full.domains

    def pick(name: str, *prefs: Any) -> Any:
        return next((v for v in prefs if v in d[name].values), d[name].values[0])

    knobs = {**setup.space.baseline,
             **{n: dom.values[0] for n, dom in setup.space.domains.items() if len(dom.values) == 1}}
    powers = [b for b in d["batch_size"].values if b & (b - 1) == 0]
    knobs.update(num_workers=env.cpu_count, pin_memory=pick("pin_memory", True),
                 non_blocking=pick("non_blocking", True), batch_size=max(powers),
                 transfer_dtype=pick("transfer_dtype", "uint8"), set_to_none=True,
                 amp=pick("amp", "bf16", "fp16"), compile=pick("compile", "default"))
    if knobs.get("prefetch_factor") is None:
        knobs["prefetch_factor"] = 2
    # A workload with input stages: "uint8 transfer, device normalize" is the split that runs
    # every stage before the float conversion on the host and the rest on the device.
    names = [st.name for st in build_workload(setup.workload_spec).stages()]
    first = next((i for i, n in enumerate(names) if n in ("to_float", "normalize")), None)
    if first is not None and first in d["transform_split"].values:
        knobs["transform_split"] = first
    return full.complete(full.searched(knobs))


def rec_of(entry_result: Any, knobs: dict[str, Any], seconds: float, limit: float) -> Rec:
    ok = entry_result.outcome == "ok" and entry_result.peak_memory_gb <= limit
    return Rec(config_key(knobs), entry_result.samples_per_sec if ok else None, seconds,
               "ok" if ok else ("pruned" if entry_result.outcome == "pruned" else "failed"))


def run_searcher(name: str, seed: int, base: StudySetup, cache: MeasurementCache, budget: int,
                 work: Path) -> list[Rec]:
    """One strategy, one sampler seed: a real study through autotune's driver."""
    label = f"{name.replace('+', '-')}-s{seed}"
    setup = dataclasses.replace(base, name=label, storage=f"sqlite:///{work}/{label}.db",
                                out_dir=work / label).with_study(
        agent=name == "autotune", prune=name in ("tpe+prune", "autotune"))
    sampler = optuna.samplers.RandomSampler(seed=seed) if name == "random" else None
    # Only the sampler takes the strategy's seed; the windows keep the shared seed. The study
    # lives in Optuna's in-memory storage (SQLite's commits cost ~1 s a trial here); its
    # sqlite URL above still selects the repeatable seeding a one-worker study gets.
    study = create_study(dataclasses.replace(setup, seed=seed),
                         storage=optuna.storages.InMemoryStorage(), sampler=sampler)
    driver = ReplayDriver(setup, study=study, cache=cache)
    driver.prepare()
    driver.run(budget)
    recs = []
    for t in study.get_trials():
        knobs = t.user_attrs.get("knobs") or {}
        feasible = all(v <= 0 for v in t.constraints.values())
        ok = t.state == TrialState.COMPLETE and t.user_attrs.get("outcome") == "ok" and feasible
        state = "ok" if ok else ("pruned" if t.state == TrialState.PRUNED else "failed")
        recs.append(Rec(config_key(knobs), t.value if ok else None,
                        driver.charged.get(t.number, 0.0), state))
    if name == "autotune":
        recs += confirmed(setup, study, cache)
    return recs


def confirmed(setup: StudySetup, study: optuna.Study, cache: MeasurementCache) -> list[Rec]:
    """autotune's confirmation, as a study runs it by default (the fastest ``confirm_top``
    configurations and the baseline, ``confirm_runs`` fresh windows each, in turn), its windows
    stored under their own tags (never a search window's) and charged their seconds: one
    ``confirm`` record whose key is the winner, or none when it could not confirm."""
    from autotune.search.confirmation.confirm import confirm

    defaults = StudyConfig()
    rounds: dict[str, int] = {}
    spent = 0.0

    def run(req: TrialRequest, trial_dir: Path, **_: Any) -> Any:
        nonlocal spent
        key = config_key(req.knobs)
        rounds[key] = rounds.get(key, -1) + 1
        entry = cache.measure(req, trial_dir, rep=f"confirm{rounds[key]}")
        spent += entry.result.wall_s
        return entry.result

    record = confirm(setup, study, defaults.confirm_runs, defaults.confirm_top, run=run)
    if not record or record.get("best_trial") is None:
        return []
    winner = study.trials[record["best_trial"]].user_attrs["knobs"]
    return [Rec(config_key(winner), None, spent, "confirm")]


@dataclasses.dataclass
class Bench:
    """Everything measured, for the report."""

    preset: str
    setup: StudySetup
    grid: list[Rec]
    truth: dict[str, float]
    oracle_key: str
    singles: dict[str, list[Rec]]  # defaults, recipe: one trial each
    runs: dict[str, list[list[Rec]]]  # searcher -> one record list per seed
    fidelity: list[dict[str, Any]]
    noise: dict[str, list[float]]  # "short" / "long" -> each window's IQR/median
    knobs: dict[str, dict[str, Any]]  # config key -> knobs (for the report)
    wall_s: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    ab_s: float = 0.0  # the grid's re-measurements (rounds 2+ and A/B), charged to it
    spread: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # fidelity, lower ranks
    windows: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # the oracle's


def run_grid(setup: StudySetup, cache: MeasurementCache, preset: Preset, work: Path,
             singles: dict[str, dict[str, Any]]
             ) -> tuple[list[Rec], dict[str, list[float]], dict[str, list[float]], float]:
    """Measure every point (``grid_rounds`` times, in alternating order), then re-measure the
    top few plus the singles ``ab_rounds`` more times in turn; return the grid's records (its
    first windows: those a searcher is served), each configuration's figures (one per window:
    the median is the oracle's figure), the windows' noise and the seconds the re-measurements
    took. More than one round because one window can read far low on a shared machine: the
    same configuration read 436 to 684 samples/s in six windows back to back, and 235 in the
    grid (2-vCPU VM, 2026-11-23), which would rank it last of 48."""
    limit = setup.memory_limit_gb
    grid: list[Rec] = []
    figures: dict[str, list[float]] = {}
    noise: dict[str, list[float]] = {"short": [], "long": []}
    points = grid_points(setup.space)

    def note(res: Any) -> None:
        n = window_noise(res.step_ms)
        if n is not None:
            noise["short"].append(n)

    def again(knobs: dict[str, Any], path: Path, rep: str) -> float:
        entry = cache.measure(request(setup, knobs, ceilings=False), path, rep=rep)
        note(entry.result)
        if entry.result.outcome == "ok":
            figures.setdefault(config_key(knobs), []).append(entry.result.samples_per_sec)
        return entry.result.wall_s

    for i, knobs in enumerate(points):
        entry = cache.measure(request(setup, knobs), work / "grid" / str(i))
        rec = rec_of(entry.result, knobs, entry.result.wall_s, limit)
        grid.append(rec)
        note(entry.result)
        if rec.value is not None:
            figures[rec.key] = [rec.value]
        log(f"grid {i}: {rec.state} {rec.value or 0:,.1f} samples/s ({entry.result.wall_s:.1f}s"
            f"{', stored' if entry.served else ''})")
    spent = 0.0
    for r in range(1, preset.grid_rounds):
        order = list(enumerate(points))
        for i, knobs in (order[::-1] if r % 2 else order):
            if config_key(knobs) in figures:  # a point that failed once is not retried
                spent += again(knobs, work / "grid" / f"{r}-{i}", f"grid{r}")
        log(f"grid round {r + 1} done")
    for name, knobs in singles.items():  # their first window (the grid's when it holds them)
        entry = cache.measure(request(setup, knobs), work / name)
        if entry.result.outcome == "ok" and config_key(knobs) not in figures:
            figures[config_key(knobs)] = [entry.result.samples_per_sec]
    ranked = sorted(figures, key=lambda k: statistics.median(figures[k]), reverse=True)
    top = [k for k in ranked if k in {r.key for r in grid}][:preset.top]
    again_keys = list(dict.fromkeys([*top, *(config_key(k) for k in singles.values())]))
    knobs_of = {config_key(k): k for k in [*points, *singles.values()]}
    for r in range(preset.ab_rounds):
        for j, key in enumerate(again_keys):
            spent += again(knobs_of[key], work / "ab" / f"{r}-{j}", f"ab{r}")
    return grid, figures, noise, spent


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def measure_recipe(setup: StudySetup, cache: MeasurementCache, work: Path) -> dict[str, Any]:
    """The recipe's knobs, its batch halved until a window fits in memory ("the largest
    power-of-two batch that fits")."""
    knobs = recipe_knobs(setup.env, setup)
    while True:
        entry = cache.measure(request(setup, knobs), work / f"recipe-{knobs['batch_size']}")
        fits = entry.result.outcome != "oom" and entry.result.peak_memory_gb <= setup.memory_limit_gb
        if fits or knobs["batch_size"] <= 1:
            log(f"recipe: {entry.result.outcome} {entry.result.samples_per_sec:,.1f} samples/s "
                f"at batch {knobs['batch_size']}")
            return knobs
        knobs = {**knobs, "batch_size": knobs["batch_size"] // 2}


def fidelity(setup: StudySetup, cache: MeasurementCache, preset: Preset, work: Path,
             truth: dict[str, float], knobs_of: dict[str, dict[str, Any]],
             noise: dict[str, list[float]], keys: list[str],
             ranked: list[str]) -> list[dict[str, Any]]:
    """``keys`` re-measured with the study's short window and with one ``long_factor`` times
    longer, side by side, ``fidelity_rounds`` times: configurations in the order A/B/.../B/A
    (reversed every other round), and each one's short and long windows adjacent
    (short-long, then long-short), so drift on the machine hits both alike. The first CPU run
    compared the grid's figures with long windows measured minutes later and read a +12-30%
    "error" that re-measuring side by side did not show (885 vs 906, 851 vs 873 samples/s): the
    machine had slowed in between. Each row keeps every round's figures, so the long window's
    agreement with itself (the floor of any window's error on this machine) is reported too.
    ``ranked``: the grid's configurations, fastest first (a row's rank)."""
    windows = {"short": dataclasses.replace(setup.window, profile=False),
               "long": long_window(setup.window, preset.long_factor)}
    got: dict[str, dict[str, list[float | None]]] = {k: {"short": [], "long": []} for k in keys}
    seconds: dict[str, float] = {k: 0.0 for k in keys}
    noises: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(preset.fidelity_rounds):
        for key in (keys if r % 2 == 0 else keys[::-1]):
            for kind in (("short", "long") if r % 2 == 0 else ("long", "short")):
                entry = cache.measure(request(setup, knobs_of[key], windows[kind], ceilings=False),
                                      work / kind / f"{r}-{keys.index(key)}",
                                      rep=f"paired-{kind}{r}")
                res = entry.result
                got[key][kind].append(res.samples_per_sec if res.outcome == "ok" else None)
                if kind == "long":
                    seconds[key] += res.wall_s
                    n = window_noise(res.step_ms)
                    if n is not None:
                        noise["long"].append(n)
                        noises[key].append(n)
                log(f"{kind} window {r}: {res.outcome} {res.samples_per_sec:,.1f} samples/s "
                    f"({res.wall_s:.1f}s{', stored' if entry.served else ''})")
    return [fidelity_row(key, ranked.index(key) + 1, truth[key], got[key]["short"],
                         got[key]["long"], max(noises[key], default=None), seconds[key])
            for key in keys]


def run_bench(name: str, preset: Preset, cache_dir: Path | None, work: Path) -> Bench:
    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    env = probe(preset.device)
    setup = make_setup(preset, env, work)
    cache = MeasurementCache(machine(env), cache_dir)
    singles = {"defaults": dict(setup.space.baseline)}
    singles["recipe"] = measure_recipe(setup, cache, work)
    grid, windows, noise, ab_s = run_grid(setup, cache, preset, work, singles)
    truth = {k: statistics.median(v) for k, v in windows.items()}
    if not truth:
        raise SystemExit("no grid configuration completed: nothing to compare with")
    knobs_of = {config_key(k): k for k in [*grid_points(setup.space), *singles.values()]}
    grid_keys = {r.key for r in grid}
    oracle_key = max((k for k in truth if k in grid_keys), key=lambda k: truth[k])
    single_recs = {}
    for label, knobs in singles.items():
        entry = cache.measure(request(setup, knobs), work / label)
        single_recs[label] = [rec_of(entry.result, knobs, entry.result.wall_s,
                                     setup.memory_limit_gb)]
    runs: dict[str, list[list[Rec]]] = {}
    for searcher in SEARCHERS:
        runs[searcher] = []
        for seed in preset.seeds:
            runs[searcher].append(run_searcher(searcher, seed, setup, cache, preset.budget, work))
            log(f"{searcher} seed {seed}: done")
    measured = {k for k in grid_keys if k in truth}
    ranked = sorted(measured, key=lambda k: truth[k], reverse=True)
    top, spread = fidelity_sets(truth, measured, preset.top, preset.spread)
    rows = fidelity(setup, cache, preset, work, truth, knobs_of, noise, top, ranked)
    spread_rows = fidelity(setup, cache, preset, work, truth, knobs_of, noise, spread, ranked)
    return Bench(name, setup, grid, truth, oracle_key, single_recs, runs, rows, noise, knobs_of,
                 time.monotonic() - t0, cache.hits, cache.misses, ab_s, spread_rows,
                 windows)


def main(argv: list[str] | None = None) -> Bench:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    ap.add_argument("--seeds", type=int, nargs="+", help="sampler seeds (default: the preset's)")
    ap.add_argument("--budget", type=int, help="trials per strategy (default: the preset's)")
    ap.add_argument("--cache", default=str(ROOT / "studies" / ".bench-cache"),
                    help="where measured windows are stored (per machine and versions)")
    ap.add_argument("--no-store", action="store_true", help="keep measured windows in memory only")
    ap.add_argument("--keep", metavar="DIR", help="keep the studies in DIR")
    ap.add_argument("--record", action="store_true",
                    help="add the table to docs/benchmarks.md and save the plot in docs/")
    a = ap.parse_args(argv)
    preset = dataclasses.replace(PRESETS[a.preset], **{k: v for k, v in
                                 (("seeds", a.seeds), ("budget", a.budget)) if v is not None})
    logging.basicConfig(level=logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cache_dir = None if a.no_store else Path(a.cache) / a.preset
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.keep or tmp).resolve()
        work.mkdir(parents=True, exist_ok=True)
        bench = run_bench(a.preset, preset, cache_dir, work)
    from benchmarks.strategies_report import write_report

    write_report(bench, preset, command("benchmarks.strategies", argv),
                 ROOT / "docs" if a.record else None)
    return bench


if __name__ == "__main__":
    main()
