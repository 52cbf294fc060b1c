"""report.html and report.md: what a person reads about a study, in a minute.

Written at the end of every study, and on demand for any stored study::

    autotune-report --storage sqlite:///studies/<name>/study.db --study <name>
    python -m autotune.results.report_html --storage URL --study NAME [--out DIR]

report.html is self-contained: plotly's JavaScript is inlined once (no CDN: it opens offline,
on a cluster's login node, attached to an e-mail). plotly is a core dependency: every install
that writes a report writes its plots.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import optuna

from autotune.core.config import StudyConfig
from autotune.core.files import atomic_write
from autotune.results import report_loader, report_numerics
from autotune.results.compare import compare_html, compare_markdown, compare_studies
from autotune.results.report_data import gather
from autotune.results.report_nsight import nsight_html, nsight_markdown
from autotune.results.report_plots import figures
from autotune.results.storage import StorageError, open_storage, redact

log = logging.getLogger("autotune")

def _f(v: Any, fmt: str = ",.1f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{fmt}}{unit}"


def _count(calls: Any, ms: Any) -> str:
    """"9 (8.88 ms)": collectives per step and their profiled time per step."""
    if calls is None:
        return "-"
    return f"{float(calls):g}" + (f" ({float(ms):.2f} ms)" if ms is not None else "")


def _hidden(ms: float | None, share: float | None) -> str:
    """"12.30 ms (45%)": an all-reduce's time and the share of it backward hid."""
    return "-" if ms is None else _f(ms, ".2f", " ms") + (
        "" if share is None else f" ({100 * share:.0f}%)")


def _share(share: float | None, low: float | None) -> str:
    """"41% (33%)": the all-reduce's share of the step and its lower bound."""
    text = _f(100 * float(share or 0), ".0f", "%")
    return text if low is None else f"{text} ({100 * float(low):.0f}%)"


def _figure(x: Any) -> str:
    if not isinstance(x, float):
        return str(x)
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _knobs(changed: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {a} → {b}" for k, (a, b) in changed.items()) or "(baseline)"


# -- the tables, shared by HTML and Markdown -----------------------------------------------------
def headline(d: dict[str, Any]) -> list[str]:
    dev, best = d["device"], d["best"]
    lines = [f"Study **{d['name']}**: {d['workload'] or '?'}",
             f"Device: {dev.get('device', '?')} ({dev.get('device_name', '?')}), torch "
             f"{dev.get('torch_version', '?')}" + (f", CUDA {dev['cuda_version']}" if dev.get("cuda_version") else "")]
    if best is None:
        return [*lines, "No trial finished within the memory limit."]
    m, b = best["metrics"], best["baseline"] or {}
    conf = best.get("confirmation") or {}
    unit = d.get("unit") or "samples/s"
    key = "tokens_per_sec" if unit == "tokens/s" else "samples_per_sec"
    lines.append(f"Baseline → best: {_f(b.get(key))} → {_f(m.get(key))} "
                 f"{unit} (trial {best['best_trial']}), speedup **{best.get('speedup_text') or '-'}**"
                 + (f" (confirmed over {conf['rounds']} interleaved rounds; window noise "
                    f"{100 * float(conf.get('window_noise') or 0):.1f}% CV)" if conf.get("rounds")
                    else " (search figures)"))
    if unit == "tokens/s":
        lines.append(_padding_line(b, m))
    lines.append("Changed knobs: " + (_knobs(d.get("changed") or {}) if d.get("changed")
                                      else "none (your configuration)"))
    if (best.get("training") or {}).get("words"):
        lines.append(f"Training: {best['training']['words']}")
    lines += report_numerics.headline(best)
    lines += [f"Verified in your training ({name}): {words}"
              for name, words in (d.get("verified") or {}).items()]
    if conf.get("tie_settling"):
        lines.append(f"Tie with the leader: {conf['tie_settling']['words']}")
    if conf.get("tie"):
        lines.append(f"Within the zone: {conf['tie']}")
    if conf.get("undecided"):
        lines.append(f"Undecided: {conf['undecided']}")
    load = best.get("contention") or {}
    if load.get("could_not_measure"):
        lines.append(f"**Could not measure**: {load['could_not_measure']}")
    elif load.get("windows"):
        lines.append(f"Load while measuring: {load['windows']}")
    launch = best.get("launch") or {}
    if launch:
        lines.append(f"Every trial ran as {launch['nproc_per_node']} ranks ({launch['backend']}, "
                     f"{launch['cores_per_rank']} core(s) each); the run's command: "
                     f"`{launch['torchrun']}`"
                     + (f"; DDP arguments: {best['ddp_kwargs']}" if best.get("ddp_kwargs")
                        else ""))
    if best.get("scaling"):
        lines.append(f"Scaling: {best['scaling']['words']}")
    if best.get("sharding"):
        lines.append(f"Sharding: {best['sharding']['words']}")
    if best.get("fsdp_kwargs"):
        lines.append(f"FSDP2 arguments (fully_shard, each block group and the root): "
                     f"{best['fsdp_kwargs']}")
    ceil = best.get("ceilings") or {}
    if ceil:
        lines.append("Ceilings: " + ", ".join(f"{k} {_f(v)} {unit}" for k, v in ceil.items())
                     + _reach(best.get("fraction_of_ceiling")))
    c = d["counts"]
    lines.append(f"Trials: {c['trials']} ({c['complete'] - c['infeasible']} complete, {c['pruned']} pruned, "
                 f"{c['infeasible']} over the memory limit, {c['failed']} failed); memory limit "
                 f"{_f(d['memory_limit_gb'], '.2f', ' GB')}; storage {best['study']['storage']}")
    return lines


def _padding_line(base: dict[str, Any], best: dict[str, Any]) -> str:
    """The tokens/s unit in words, with the padding share both configurations computed."""
    def share(m: dict[str, Any]) -> str:
        return "-" if m.get("padding_share") is None else f"{100 * float(m['padding_share']):.0f}%"

    return ("Throughput is in real tokens/s (padding excluded; the workload's batches carry "
            f"tokens). Padding of the tokens computed: baseline {share(base)}, best {share(best)} "
            f"(search windows); samples/s {_f(base.get('samples_per_sec'))} → "
            f"{_f(best.get('samples_per_sec'))}")


#: The path's last row, where the confirmation exported a trial that had not raised the best
#: (report_data.path_to_best): why it did.
EXPORTED = {"fastest": "; exported: the confirmation rounds' fastest (in the search, within the "
                       "noise of the row above)",
            "tie": "; exported: the choice among finalists the confirmation's rounds put "
                   "within study.indifference of each other (fewer knobs changed, then lower "
                   "memory)",
            "baseline": "; exported: the confirmation rounds showed no configuration faster "
                        "than yours"}


def _reach(fraction: float | None) -> str:
    """How close the best came to its lowest ceiling. Above 100%, within the window's noise
    (a trial beyond it records a ceiling violation and the ceiling is not used): a report of
    the README's workload read "105% of the lowest" beside a ceiling called an upper bound."""
    words = f"; the best reaches {_f((fraction or 0) * 100, '.0f', '%')} of the lowest"
    if fraction and fraction > 1:
        words += (" (above it by less than the windows' noise: the ceiling and the trial are "
                  "measured at different moments)")
    return words


def tables(d: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for every table of the report."""
    unit = d.get("unit") or "samples/s"
    out = [("Path to the best (each trial that raised the best: search figures, one window "
            "each; the confirmation's paired rounds where the trial was a finalist)",
            ["trial", "source", "knobs changed", unit, "window spread", "gain",
             "vs baseline", "confirmed vs baseline (95% CI)", "bottleneck"],
            [[str(r["trial"]), r["source"] + EXPORTED.get(r.get("exported") or "", ""),
              _knobs(r["changed"]),
              _f(r["samples_per_sec"]) + (f" ({_f(100 * r['padding_share'], '.0f', '%')} padding)"
                                          if r.get("padding_share") is not None else ""),
              (_f(100 * r["spread"], ".1f", "%") if r.get("spread") is not None else "-")
              + (" (contended)" if r.get("contended") else ""),
              _f(r["gain"], ".2f", "x"), _f(r["vs_baseline"], ".2f", "x"),
              r.get("confirmed") or "-", r["bottleneck"] or "-"]
             for r in d["path"]])]
    best = d["best"] or {}
    diag = []
    for label, v, ev in (("baseline", best.get("baseline_diagnosis"), d["baseline_evidence"]),
                         ("best", best.get("diagnosis"), d["best_evidence"])):
        if v:
            evidence = ", ".join(f"{k}={_figure(x)}"
                                 for k, x in (ev or {}).items() if x is not None and k != "device")
            diag.append([label, v.get("bottleneck") or "-", v.get("summary") or "",
                         "; ".join(v.get("fixes") or []) or "-",
                         "; ".join(v.get("tried") or []) or "-", evidence])
    out.append(("Diagnosis", ["trial", "bottleneck", "verdict", "fixes",
                              "measured already, no faster", "evidence"], diag))
    out.append((f"Finalists' confirmation rounds ({unit}; speedup over the baseline, 95% CI)",
                ["trial", "runs", "median", "spread", "speedup", "contended windows", ""],
                [[str(r["trial"]), ", ".join(_f(x) for x in r["runs"]), _f(r["median"]),
                  _f(r["spread_pct"], ".1f", "%"), r["interval"] or "-", str(r["contended"]),
                  "exported" if r["chosen"] else ("baseline" if r["baseline"] else "")]
                 for r in d["confirmation"]]))
    sharded = [r for r in d.get("comm") or [] if r.get("sharding")]
    if sharded:
        out.append(("Sharding per trial (FSDP2: each rank's peak memory, which the limit holds "
                    "per rank; the all-gathers and reduce-scatters per step and their profiled "
                    "time, the slowest rank's; what they add to the step: the same forward and "
                    "backward with every parameter gathered beforehand, lower bound in brackets)",
                    ["trial", "sharding", "peak per rank", "all-gathers", "reduce-scatters",
                     "collectives add", "share of the step"],
                    [[str(r["trial"]), str(r["sharding"]),
                      ", ".join(_f(p, ".2f", " GB") for p in r.get("peaks") or [])
                      + ("" if r.get("feasible", True) else " (over the limit)"),
                      _count(r.get("all_gathers"), r.get("all_gather_ms")),
                      _count(r.get("reduce_scatters"), r.get("reduce_scatter_ms")),
                      _f(r.get("exposed_ms"), ".2f", " ms"),
                      _share(r.get("exposed_share"), r.get("exposed_share_low"))]
                     for r in sharded]))
    if [r for r in d.get("comm") or [] if not r.get("sharding")]:
        out.append(("Gradient all-reduce per trial (the same step on one batch with and without "
                    "it, the slowest rank's; its share of the window's step; where it ran: the "
                    "profile's all-reduce per step and DDP's own timing, with the share backward "
                    "hid; the share's lower bound, which the verdict reads, in brackets)",
                    ["trial", "ranks", "step with", "step without", "all-reduce adds",
                     "share of the step", "slowest rank", "ranks' gap", "profiled (hidden)",
                     "DDP's (hidden)"],
                    [[str(r["trial"]), str(r["ranks"]), _f(r.get("synced_step_ms"), ".2f", " ms"),
                      _f(r.get("unsynced_step_ms"), ".2f", " ms"),
                      _f(r.get("exposed_ms"), ".2f", " ms"),
                      _share(r.get("exposed_share"), r.get("exposed_share_low")),
                      "-" if r.get("slowest") is None else str(r["slowest"]),
                      _f(r.get("rank_gap_ms"), ".2f", " ms"),
                      _hidden(r.get("trace_allreduce_ms"), r.get("trace_overlap_share")),
                      _hidden(r.get("ddp_comm_ms"), r.get("ddp_overlap_share"))]
                     for r in d["comm"] if not r.get("sharding")]))
    out += report_numerics.table(d["best"])
    out.append(("Pruned, failed and infeasible trials", ["trial", "state", "reason"],
                [[str(r["trial"]), r["state"], r["reason"]] for r in d["failures"]]))
    return out


# -- Markdown ------------------------------------------------------------------------------------
def markdown(d: dict[str, Any], extra: str = "") -> str:
    lines = [f"# autotune report: {d['name']}", ""] + [f"- {x}" for x in headline(d)] + [""]
    if extra:
        lines += [extra, ""]
    for title, header, rows in tables(d):
        lines += [f"## {title}", ""]
        if not rows:
            lines += ["none", ""]
        else:
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in rows]
            lines.append("")
        if title == "Diagnosis":
            lines += report_loader.markdown(d)
    lines += nsight_markdown(d)
    lines.append("Plots: report.html (optimization history, throughput vs peak memory, time "
                 "breakdown per trial, parameter importances"
                 + (", where the loader's time goes" if report_loader.has_chart(d) else "") + ").")
    return "\n".join(lines) + "\n"


# -- HTML ----------------------------------------------------------------------------------------
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px;
vertical-align:top;font-size:14px}th{background:#f3f3f3}.head li{margin:.2em 0}
.regression{background:#fdd;padding:.5em 1em;border-left:4px solid #c00}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere;font-size:13px}
.note{color:#555;font-size:14px}"""


def _bold(text: str) -> str:
    """Markdown's **bold** in HTML (a redacted password's *** stays as it is)."""
    return re.sub(r"\*\*([^*]+?)\*\*", r"<b>\1</b>", html.escape(text))


def render_html(study: optuna.Study, d: dict[str, Any], extra_html: str = "") -> str:
    body = [f"<h1>autotune report: {html.escape(d['name'])}</h1>", '<ul class="head">']
    body += [f"<li>{_bold(x)}</li>" for x in headline(d)] + ["</ul>", extra_html]
    for title, header, rows in tables(d):
        body.append(f"<h2>{html.escape(title)}</h2>")
        if not rows:
            body.append("<p>none</p>")
        else:
            body.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
            body.append("</table>")
        if title == "Diagnosis":
            body.append(report_loader.html_section(d))
    body.append(nsight_html(d))
    figs = figures(study, d)
    body.append("<h2>Plots</h2>")
    if not figs:
        body.append("<p>No plots yet: no trial has finished.</p>")
    for i, (title, fig) in enumerate(figs):
        fig.update_layout(title=title, height=fig.layout.height or 420)
        body.append(fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False,
                                div_id=f"plot{i}"))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>autotune: {html.escape(d['name'])}</title><style>{CSS}</style></head>"
            "<body>" + "\n".join(body) + "</body></html>\n")


def write_report(study: optuna.Study, out_dir: Path, storage_url: str,
                 compare: dict[str, Any] | None = None) -> Path:
    """Write report.html and report.md into ``out_dir``; return the HTML's path. ``compare``:
    the comparison with an earlier study (autotune.results.compare), shown side by side."""
    d = gather(study, redact(storage_url))
    d["verified"] = verified(out_dir)
    atomic_write(out_dir / "report.md", markdown(d, compare_markdown(compare) if compare else ""))
    path = out_dir / "report.html"
    atomic_write(path, render_html(study, d, compare_html(compare) if compare else ""))
    return path


def verified(out_dir: Path) -> dict[str, str]:
    """What ``autotune verify`` measured of each answer in the user's own training, from the
    verify*.json it wrote beside best.yaml ({file: words}); a report written after it shows
    the realized speedup beside the study's. A file that cannot be read is left out."""
    out: dict[str, str] = {}
    for path in sorted(out_dir.glob("verify*.json")):
        try:
            v = json.loads(path.read_text())
            answer = "best.yaml" if path.stem == "verify" else path.stem[len("verify-"):] + ".yaml"
            ratio = f": {v['ratio']:.0%} of the study's" if v.get("ratio") is not None else ""
            out[answer] = (f"realized {v['realized_text']} ({v.get('how') or 'verify'}); the "
                           f"study measured {v.get('study_text') or v.get('study_speedup')}"
                           f"{ratio}" + ("" if v.get("quiet", True) else
                                         "; some rounds ran beside other work"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="autotune-report",
        description="Write report.html and report.md for a stored autotune study.")
    p.add_argument("--storage", required=True, help="Optuna storage URL, e.g. sqlite:///studies/NAME/study.db")
    p.add_argument("--study", required=True, help="the study name")
    p.add_argument("--out", help="output folder (default: beside a SQLite study.db, else studies/NAME)")
    p.add_argument("--compare-to", help="an earlier study to compare with (side by side)")
    p.add_argument("--compare-storage", help="its storage, when not the same")
    p.add_argument("--regression-pct", type=float, default=StudyConfig().regression_pct)
    a = p.parse_args(argv)
    try:
        study = optuna.load_study(study_name=a.study, storage=open_storage(a.storage))
    except (StorageError, KeyError) as exc:
        names = _names(a.storage)
        print(f"autotune-report: error: cannot load study {a.study!r} from {redact(a.storage)}: "
              f"{' '.join(str(exc).split())}" + (f" Studies there: {', '.join(names)}." if names else ""),
              file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else _default_out(a.storage, a.study)
    cmp = None
    if a.compare_to:
        cmp = compare_studies(study, a.compare_to, a.compare_storage or a.storage, a.regression_pct)
    path = write_report(study, out, a.storage, cmp)
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return 3 if cmp and cmp["regression"] else 0


def _names(url: str) -> list[str]:
    try:
        return [s.study_name for s in optuna.get_all_study_summaries(url)]
    except Exception:  # noqa: BLE001 - only a hint in an error message
        return []


def _default_out(url: str, name: str) -> Path:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):]).parent
    return Path("studies") / name


if __name__ == "__main__":
    sys.exit(main())
