"""The GPU check's figures, from the studies .ci/gpu/gpu_check.sh ran.

    python .ci/gpu/gpu_figures.py STUDIES_DIR OUT.md [--goal-speedup 22 --goal-ceiling 0.9]

Reads each study's best.yaml and trials.csv under STUDIES_DIR and writes one Markdown page:
the speedup with its interval against the goal, the share of the step-alone (compute) ceiling
against the goal, any ceiling a trial beat (a measurement bug: an upper bound cannot be beaten),
the compile cost and every compiled trial that was pruned, the baseline's and the export's
diagnoses, the confirmation (rounds, why it stopped, window noise), the study's expected and
measured wall time, and the NVML readings of every window. A study that is missing or cut
short says so in its section: the page is written whatever ran. A language-model study's
figures are in tokens/s, with the attention value of every trial and the peak memory by
expandable_segments; the compile study (the first study's export with compile searched) is
also set against the first study's baseline, the README's 22x goal.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path
from typing import Any

import yaml


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def rate_key(doc: dict[str, Any]) -> tuple[str, str]:
    """The figure a study's best.yaml states (tokens/s for a language model) and its unit."""
    unit = (doc.get("metrics") or {}).get("unit") or "samples/s"
    return ("tokens_per_sec" if unit == "tokens/s" else "samples_per_sec"), unit


def headline(doc: dict[str, Any], goal_speedup: float, goal_ceiling: float) -> list[str]:
    """Speedup and share of the step-alone ceiling, each set against its goal."""
    m, base = doc.get("metrics") or {}, doc.get("baseline") or {}
    ceilings = doc.get("ceilings") or {}
    key, unit = rate_key(doc)
    best = m.get(key)
    compute = ceilings.get("compute")
    share = best / compute if best and compute else None
    speedup = doc.get("speedup")
    lines = [
        f"- device: {(doc.get('device') or {}).get('name')} "
        f"(torch {(doc.get('device') or {}).get('torch')}, CUDA {(doc.get('device') or {}).get('cuda')})",
        f"- baseline {_fmt(base.get(key), 1)} {unit} -> best (trial "
        f"{doc.get('best_trial')}) {_fmt(best, 1)} {unit}",
        f"- speedup: {doc.get('speedup_text') or _fmt(speedup)}; goal {goal_speedup:g}x: "
        + ("met" if speedup and speedup >= goal_speedup else "not met"),
        f"- ceilings: {ceilings or 'none measured'}; best / step-alone (compute) ceiling: "
        + (f"{share:.0%}; goal {goal_ceiling:.0%}: {'met' if share >= goal_ceiling else 'not met'}"
           if share is not None else "no compute ceiling"),
        f"- knobs: {doc.get('knobs')}",
    ]
    return lines


def diagnoses(doc: dict[str, Any]) -> list[str]:
    out = []
    for key, who in (("baseline_diagnosis", "baseline"), ("diagnosis", "export")):
        d = doc.get(key) or {}
        out.append(f"- {who}: **{d.get('bottleneck')}**: {d.get('summary')}")
    return out


def confirmation(doc: dict[str, Any]) -> list[str]:
    c = doc.get("confirmation") or {}
    if not c:
        return ["- no confirmation recorded"]
    return [f"- {c.get('rounds')} rounds, stopped: {c.get('stopped')}, spent "
            f"{c.get('spent_s')} s of {c.get('budget_s')} s, window noise "
            f"{_fmt(c.get('window_noise'), 3)}"]


def cost(doc: dict[str, Any]) -> list[str]:
    """Expected and measured wall time (study.cost), the compile section, pruning savings."""
    study = doc.get("study") or {}
    lines = []
    wall = study.get("wall") or {}
    if wall:
        lines.append(f"- wall time: {wall.get('words') or wall}")
    lines.append(f"- compile: {doc.get('compile') or 'no compiled trial'}")
    lines.append(f"- pruning: {study.get('pruning')}")
    return lines


def knob_effects(rows: list[dict[str, str]]) -> list[str]:
    """Per trial, the knobs whose GPU behaviour the check is there to see: the attention
    implementation (a backend its dtype cannot run would fail: no trial should) and the
    allocator's expandable segments against the peak memory it reserved."""
    cols = [c for c in ("knob.attention", "knob.amp", "knob.activation_checkpointing",
                        "knob.expandable_segments", "knob.compile", "peak_memory_gb",
                        "compile_s") if rows and c in rows[0]]
    if not rows or not any(c in cols for c in ("knob.attention", "knob.expandable_segments")):
        return []
    out = ["", "| trial | state | " + " | ".join(c.removeprefix("knob.") for c in cols) + " |",
           "|---" * (2 + len(cols)) + "|"]
    out += [f"| {r['number']} | {r['state']} | " + " | ".join(r.get(c, "") for c in cols) + " |"
            for r in rows]
    kernel = [r["number"] for r in rows if "No available kernel" in (r.get("reason") or "")]
    out.append(f"\ntrials failed for an attention kernel their dtype cannot run: "
               f"{', '.join(kernel) if kernel else 'none'}")
    for flag in ("False", "True"):
        peaks = [float(r["peak_memory_gb"]) for r in rows if r.get("state") == "COMPLETE"
                 and r.get("knob.expandable_segments") == flag and r.get("peak_memory_gb")]
        if peaks:
            out.append(f"expandable_segments={flag}: {len(peaks)} trials, peak memory median "
                       f"{statistics.median(peaks):.2f} GB (max {max(peaks):.2f})")
    return out


def against_first_baseline(studies: Path, goal_speedup: float) -> list[str]:
    """The compile study's best over the first study's baseline: the first study's export
    with compile searched, set against the README command's baseline. Two studies of one
    GPU session, minutes apart: the ratio of two medians, not a confirmed interval (the compile
    study's own interval is the compile gain over the tuned eager step)."""
    first, compiled = studies / "gpu-resnet18" / "best.yaml", studies / "gpu-compile" / "best.yaml"
    if not (first.exists() and compiled.exists()):
        return []
    a, b = yaml.safe_load(first.read_text()), yaml.safe_load(compiled.read_text())
    base = (a.get("baseline") or {}).get("samples_per_sec")
    best = (b.get("metrics") or {}).get("samples_per_sec")
    if not (base and best):
        return []
    ratio = best / base
    return ["## compile against the README command's baseline", "",
            f"- gpu-compile's best {best:,.1f} samples/s (compile={(b.get('knobs') or {}).get('compile')})"
            f" / gpu-resnet18's baseline {base:,.1f} samples/s = {ratio:.2f}x; goal "
            f"{goal_speedup:g}x: {'met' if ratio >= goal_speedup else 'not met'}",
            f"- the compile gain over the tuned eager step, confirmed: {b.get('speedup_text') or b.get('speedup')}",
            ""]


def trial_rows(rows: list[dict[str, str]]) -> list[str]:
    """Beaten ceilings, pruned compiled trials, failures, and the NVML readings per window."""
    out = []
    for r in rows:
        if r.get("ceiling_violation"):
            out.append(f"- trial {r['number']} beat its ceiling: {r['ceiling_violation']}")
        if r.get("state") == "PRUNED" and r.get("knob.compile") not in ("", "off", None):
            out.append(f"- trial {r['number']} compile={r['knob.compile']} pruned after "
                       f"{r.get('compile_s') or 0} s of compile: {r.get('reason')}")
        if r.get("state") == "FAIL":
            out.append(f"- trial {r['number']} failed: {r.get('reason')}")
    if not out:
        out.append("- no trial beat a ceiling, no compiled trial was pruned, none failed")
    gpu_cols = [k for k in (rows[0] if rows else {}) if k.startswith("gpu.")]
    if not gpu_cols:
        return out + ["- NVML: no gpu.* column in trials.csv"]
    out += ["", "| trial | state | samples/s | " + " | ".join(c[4:] for c in gpu_cols) + " |",
            "|---" * (3 + len(gpu_cols)) + "|"]
    for r in rows:
        out.append(f"| {r['number']} | {r['state']} | {r.get('samples_per_sec', '')} | "
                   + " | ".join(r.get(c, "") for c in gpu_cols) + " |")
    util = [float(r["gpu.utilization_pct"]) for r in rows if r.get("gpu.utilization_pct")]
    if util:
        out.append(f"\nGPU utilization at window ends: median {statistics.median(util):.0f}%")
    return out


def study_section(directory: Path, goal_speedup: float, goal_ceiling: float) -> list[str]:
    lines = [f"## {directory.name}", ""]
    best, csv_path = directory / "best.yaml", directory / "trials.csv"
    rows = list(csv.DictReader(csv_path.open())) if csv_path.exists() else []
    if best.exists():
        doc = yaml.safe_load(best.read_text())
        lines += headline(doc, goal_speedup, goal_ceiling) + [""] + diagnoses(doc) + [""]
        lines += confirmation(doc) + cost(doc) + [""]
    else:
        lines += ["- no best.yaml: the study did not export (see its log)", ""]
    states = [r.get("state") for r in rows]
    lines.append(f"- trials.csv: {len(rows)} trials "
                 + ", ".join(f"{s} {states.count(s)}" for s in sorted(set(filter(None, states)))))
    return lines + trial_rows(rows) + knob_effects(rows) + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("studies", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--goal-speedup", type=float, default=22.0)
    ap.add_argument("--goal-ceiling", type=float, default=0.9)
    args = ap.parse_args(argv)
    dirs = sorted(p for p in args.studies.iterdir() if (p / "trials.csv").exists()) \
        if args.studies.is_dir() else []
    page = ["# GPU check figures", ""]
    for d in dirs:
        page += study_section(d, args.goal_speedup, args.goal_ceiling)
    if args.studies.is_dir():
        page += against_first_baseline(args.studies, args.goal_speedup)
    if not dirs:
        page.append(f"no study under {args.studies}")
    args.out.write_text("\n".join(page) + "\n")
    print("\n".join(page))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
