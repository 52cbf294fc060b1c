"""The strategy benchmark's report: the markdown table for docs/benchmarks.md (device, date,
versions, the exact command) and the SVG plot beside it."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

import optuna

from benchmarks.fidelity import fidelity_tau, long_self_tau
from benchmarks.record import prepend_section
from benchmarks.strategy_figures import NOISE_FLAG, Rec, curves, median_or_none, summarize
from benchmarks.svg import chart

ROOT = Path(__file__).resolve().parent.parent


def label(bench: Any, key: str) -> str:
    """A configuration as its searched knobs (those the reduced space varies)."""
    knobs = bench.knobs.get(key) or json.loads(key)
    searched = [n for n, d in bench.setup.space.domains.items() if len(d.values) > 1]
    base = bench.setup.space.baseline
    extra = [n for n in knobs if n not in searched and knobs[n] != base.get(n)
             and n not in bench.setup.space.fixed]
    return " ".join(f"{n}={knobs[n]}" for n in [*searched, *extra] if n in knobs)


def _fmt(v: float | None, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def grid_recs(bench: Any) -> list[Rec]:
    """The grid exports the best median after its A/B rounds (the oracle itself): its records
    carry those medians, and its A/B windows are charged to its last trial."""
    grid = [Rec(r.key, bench.truth.get(r.key) if r.state == "ok" else None, r.seconds, r.state)
            for r in bench.grid]
    if grid:
        grid[-1] = dataclasses.replace(grid[-1], seconds=grid[-1].seconds + bench.ab_s)
    return grid


def strategy_rows(bench: Any) -> list[tuple[str, dict[str, Any]]]:
    oracle = bench.truth[bench.oracle_key]
    rows = [(name, summarize([recs], bench.truth, oracle)) for name, recs in bench.singles.items()]
    rows.append(("grid (oracle)", summarize([grid_recs(bench)], bench.truth, oracle)))
    rows += [(name, summarize(runs, bench.truth, oracle)) for name, runs in bench.runs.items()]
    return rows


def speedups(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Each strategy's best over the defaults (the hand recipe's 8.17x on a V100 is Rand's, 2023)."""
    by = dict(rows)
    base = by.get("defaults", {}).get("fraction")
    if not base:
        return "Speedup over the defaults: the defaults did not complete."
    parts = [f"{name} {s['fraction'] / base:.2f}x" for name, s in rows if name != "defaults"]
    return "Speedup over the defaults (the oracle's figures; searchers: median over seeds): " \
        + ", ".join(parts) + "."


def verdicts(bench: Any, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    by = dict(rows)
    out = []
    a, t = by.get("autotune"), by.get("tpe")
    if a and t:
        an, tn = a["trials_to_5pct"], t["trials_to_5pct"]
        holds = an is not None and (tn is None or an <= tn / 2)
        out.append(f"- autotune within 5% of the oracle in at most half the trials tpe needs "
                   f"(medians {_fmt(an, '.1f', 'never')} vs {_fmt(tn, '.1f', 'never')}; never "
                   f"reached on {a['never']} vs {t['never']} of {a['seeds']} seeds): "
                   f"**{'holds' if holds else 'does not hold'}**.")
        r = by.get("recipe")
        if r:
            ok = a["fraction"] >= r["fraction"]
            out.append(f"- autotune's final best at least the recipe's (median {a['fraction']:.3f}"
                       f" vs {r['fraction']:.3f} of the oracle): **{'holds' if ok else 'does not hold'}**.")
    fid = [f for f in bench.fidelity if f["error"] is not None]
    if fid:
        worst = max(abs(f["error"]) for f in fid)
        out.append(f"- short-window error against the {len(fid)} long windows under 10% (worst "
                   f"{worst:.1%}): **{'holds' if worst < 0.10 else 'does not hold'}**.")
    tau = fidelity_tau(bench.fidelity)
    if tau is not None:
        out.append(f"- Kendall tau between the short and long rankings of the top {len(fid)} at "
                   f"least 0.8 ({tau:.2f}): **{'holds' if tau >= 0.8 else 'does not hold'}**.")
    return out


def fidelity_context(bench: Any) -> list[str]:
    """What the fidelity verdicts are measured against: the long window's agreement with
    itself (no window can be shown to do better on this machine), and the ranking over
    configurations that really differ."""
    out = []
    spreads = [f["long_spread"] for f in bench.fidelity if f["long_spread"] is not None]
    self_tau = long_self_tau(bench.fidelity)
    if spreads:
        out.append(f"- The long window against itself, top {len(bench.fidelity)}: its windows of "
                   f"one configuration differ by {median_or_none(spreads):.1%} at the median "
                   f"(worst {max(spreads):.1%}) of their median; Kendall tau between its first "
                   f"and second rounds {_fmt(self_tau, '.2f')}.")
    both = [*bench.fidelity, *bench.spread]
    errs = [abs(f["error"]) for f in both if f["error"] is not None]
    tau_all = fidelity_tau(both)
    if bench.spread and errs:
        out.append(f"- Over all {len(both)} configurations (the top {len(bench.fidelity)} and "
                   f"{len(bench.spread)} spread over the rest of the ranking): Kendall tau between "
                   f"the short and long rankings {_fmt(tau_all, '.2f')}, long window against "
                   f"itself {_fmt(long_self_tau(both), '.2f')}; short-window error worst "
                   f"{max(errs):.1%}, median {median_or_none(errs):.1%}.")
    return out


def oracle_context(bench: Any) -> str:
    """How sharp the oracle is: its own windows' spread and how many configurations lie within
    5% of it (hitting any of them counts as "within 5%")."""
    oracle = bench.truth[bench.oracle_key]
    own = bench.windows.get(bench.oracle_key, [])
    near = sum(1 for r in bench.grid if r.key in bench.truth and bench.truth[r.key] >= 0.95 * oracle)
    spread = f"{(max(own) - min(own)) / oracle:.1%}" if len(own) > 1 else "-"
    return (f"The oracle's figure is the median of {len(own)} windows (their range: {spread} of "
            f"it); {near} of the {len(bench.grid)} configurations lie within 5% of it by their "
            f"medians.")


def markdown(bench: Any, preset: Any, command: str, plot_name: str) -> list[str]:
    env = bench.setup.env
    oracle = bench.truth[bench.oracle_key]
    rows = strategy_rows(bench)
    today = datetime.date.today().isoformat()
    lines = [
        f"## Strategies, preset `{bench.preset}` ({today}, {env.device_name}, "
        f"{env.cpu_count} cores{'' if env.device == 'cpu' else f', {env.gpu_count} GPU'})", "",
        f"Command: `{command}`. Versions: torch {env.torch_version}, Optuna {optuna.__version__}"
        f"{f', CUDA {env.cuda_version}' if env.device == 'cuda' else ''}. Workload: "
        f"{bench.setup.workload_label}; reduced space: {len(bench.grid)} configurations over "
        + ", ".join(f"`{n}` {d.values}" for n, d in bench.setup.space.domains.items()
                    if len(d.values) > 1)
        + f"; budget {preset.budget} trials per strategy, sampler seeds {preset.seeds}. Oracle: "
        f"{label(bench, bench.oracle_key)}, {oracle:,.1f} samples/s (median of its windows). "
        f"Whole run {bench.wall_s / 60:.1f} min; {bench.cache_misses} windows measured, "
        f"{bench.cache_hits} served from the store; the grid's re-measurements ({preset.grid_rounds} "
        f"rounds over every point, then {preset.ab_rounds} A/B round(s) over the top "
        f"{preset.top}, the recipe and the defaults) took {bench.ab_s:.0f} s (in its total), "
        "the long windows "
        f"{sum(f['long_s'] for f in [*bench.fidelity, *bench.spread]):.0f} s."
        + (f" Note: {preset.note}." if preset.note else ""), "",
        "| strategy | trials | best found / oracle (median; worst seed) | trials to within 5% "
        "(median over all seeds; seeds never) | wall time to within 5% | total wall time | time in pruned + "
        "failed trials |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in rows:
        lines.append(
            f"| {name} | {s['trials']} | {s['fraction']:.3f}; {s['fraction_min']:.3f} | "
            f"{_fmt(s['trials_to_5pct'], '.1f', 'never')}; {s['never']} of {s['seeds']} | "
            f"{_fmt(s['seconds_to_5pct'], '.0f')} s | {s['total_s']:.0f} s | "
            f"{s['wasted_share']:.0%} |")
    rounds = preset.fidelity_rounds
    lines += ["", oracle_context(bench), "",
              f"Fidelity: the top {len(bench.fidelity)}"
              + (f" and {len(bench.spread)} configurations spread over the rest of the ranking"
                 if bench.spread else "")
              + f", each re-measured with the study's window and with one {preset.long_factor}x "
              f"longer, side by side ({rounds} rounds; configurations A/B/.../B/A, each one's "
              "short and long windows adjacent); medians of its rounds. The grid's figure "
              "(measured earlier, the oracle's) is shown for reference.", "",
              "| rank | configuration | grid, samples/s | short windows, samples/s | long windows, "
              "samples/s | short vs long | long windows' own range | long-window noise "
              "(IQR/median) |",
              "|---|---|---|---|---|---|---|---|"]
    for f in [*bench.fidelity, *bench.spread]:
        flag = " (noisy)" if f["long_noise"] is not None and f["long_noise"] > NOISE_FLAG else ""
        lines.append(f"| {f['rank']} | {label(bench, f['key'])} | {f['search']:,.1f} | "
                     f"{_fmt(f['short'], ',.1f')} | "
                     f"{_fmt(f['long'], ',.1f')} | {_fmt(f['error'], '+.1%')} | "
                     f"{_fmt(f['long_spread'], '.1%')} | "
                     f"{_fmt(f['long_noise'], '.1%')}{flag} |")
    for kind, values in bench.noise.items():
        if values:
            flagged = sum(v > NOISE_FLAG for v in values)
            lines.append(f"\n{kind.capitalize()} windows' noise (IQR/median of step times): "
                         f"median {median_or_none(values):.1%}, {flagged} of {len(values)} "
                         f"above {NOISE_FLAG:.0%}.")
    lines += ["", speedups(rows), "", *verdicts(bench, rows), "",
              "What the fidelity verdicts are measured against:", "", *fidelity_context(bench), "",
              f"![best so far vs trials and wall time]({plot_name})", ""]
    return lines


def plot(bench: Any) -> str:
    oracle = bench.truth[bench.oracle_key]
    by_trial, by_time = {}, {}
    series = {**{n: [r] for n, r in bench.singles.items()}, "grid": [grid_recs(bench)],
              **bench.runs}
    for name, runs in series.items():
        t, w = curves(runs, bench.truth, oracle)
        by_trial[name] = [(i + 1, v) for i, v in enumerate(t)] if len(t) > 1 else \
            [(1, t[0]), (max(len(bench.grid), 2), t[0])] if t else []
        by_time[name] = w
    return chart(by_trial, by_time, f"{bench.preset}: median over seeds; grid in its enumeration order")


def write_report(bench: Any, preset: Any, command: str, docs: Path | None) -> list[str]:
    plot_name = f"strategies-{bench.preset}.svg"
    lines = markdown(bench, preset, command, plot_name)
    svg_dir = docs if docs is not None else ROOT / "studies"
    svg_dir.mkdir(parents=True, exist_ok=True)
    (svg_dir / plot_name).write_text(plot(bench))
    print("\n".join(lines))
    print(f"plot: {svg_dir / plot_name}")
    if docs is not None:
        prepend_section("\n".join(lines), docs / "benchmarks.md")
    return lines
