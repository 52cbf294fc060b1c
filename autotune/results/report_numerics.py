"""The numerics check in the report: what it refused and what was exported instead (the
headline), and each checked trial's figures (a table): the user's own runs' tail loss and
spread, the tolerance it gave, the trial's deviation and its verdict, so that a reader sees
what the check judged by (search/checks/numerics.py and spread.py say how)."""

from __future__ import annotations

from typing import Any

#: Where a record lacks it (a study checked before the spread was measured).
_NONE = "-"


def _pct(v: Any) -> str:
    return _NONE if v is None else f"{100 * float(v):.2f}%"


def headline(best: dict[str, Any]) -> list[str]:
    """The check's outcome in words, where it refused anything."""
    words = (best.get("numerics") or {}).get("words")
    return [f"Numerics check: {words}"] if words else []


def numerics_rows(record: dict[str, Any]) -> list[list[str]]:
    """One row per checked trial: trial, knob families, your runs' tail loss, their spread,
    the tolerance and where it came from, the trial's deviation(s), the verdict."""
    rows = []
    multiple = float(record.get("noise_multiple") or 3)
    for n, e in (record.get("trials") or {}).items():
        ref = e.get("reference") or {}
        yours = (f"{float(ref['center']):.4g} (seeds {', '.join(map(str, ref['seeds']))})"
                 if ref.get("center") is not None else _NONE)
        tol = _pct(e.get("tolerance"))
        if e.get("one_seed"):
            tol += (f" (one seed: within it no spread could refuse at "
                    f"{100 * float(e['family_tolerance']):.0f}%)")
        elif e.get("spread") is not None and e.get("family_tolerance") is not None:
            tol += (f" ({multiple:g}x the spread, at least "
                    f"{100 * float(e['family_tolerance']):.0f}%)")
        devs = e.get("deviations") or ([e["deviation"]] if e.get("deviation") is not None
                                       else [e.get("max_rel_dev")])
        verdict = ("passed" if e.get("passed") else
                   (e.get("reason") or "refused") + (f"; would have given {e['would_give']}"
                                                    if e.get("would_give") else ""))
        spread = "not needed" if e.get("one_seed") else _pct(e.get("spread"))
        rows.append([str(n), "/".join(e.get("families") or []), yours, spread,
                     tol, ", ".join(_pct(d) for d in devs), verdict])
    return rows


def table(best: dict[str, Any] | None) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's numerics table (none where the study ran no check)."""
    record = (best or {}).get("numerics") or {}
    if not record.get("trials"):
        return []
    steps, tail = record.get("steps"), record.get("tail_steps")
    title = ("Numerics check (each checked trial's loss over the last "
             f"{tail or '?'} of its first {steps} steps against your configuration's at "
             "several seeds: refused beyond the tolerance)")
    return [(title, ["trial", "knob families", "your tail loss", "your runs' spread",
                     "tolerance", "its deviation", "verdict"], numerics_rows(record))]
