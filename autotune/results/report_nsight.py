"""The report's Nsight section: best.yaml's ``nsight`` commands (autotune/results/nsight.py) for
a study that ran on CUDA, as Markdown and HTML; nothing for any other device."""

from __future__ import annotations

import html
from typing import Any


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else f"{v:{fmt}}"


NSYS_INTRO = ("Timeline of one trial of the exported configuration (Nsight Systems; the step's "
              "phases are NVTX ranges in the domain autotune). Run from the folder that holds "
              "studies/; each command runs its trial in a study of its own (this study's name "
              "and -nsys, -ncu1, ...), to be removed before that command runs again:")
NCU_INTRO = "The best trial's top kernels by GPU time, each profiled by Nsight Compute:"


def _nsight(d: dict[str, Any]) -> dict[str, Any] | None:
    """best.yaml's Nsight commands, None on a study that did not run on CUDA: a CPU study's
    report gave a GPU tool a section of its own only to say it does not apply."""
    ns = (d["best"] or {}).get("nsight")
    if not ns or ((d["best"] or {}).get("device") or {}).get("type") != "cuda":
        return None
    return dict(ns)


def nsight_markdown(d: dict[str, Any]) -> list[str]:
    ns = _nsight(d)
    if not ns:
        return []
    out = ["## Nsight (device side)", ""]
    if "omitted" in ns:
        return [*out, f"No Nsight commands: {ns['omitted']}.", ""]
    out += [NSYS_INTRO, "", "```", ns["nsys"], "```", ""]
    if ns.get("ncu"):
        out += [NCU_INTRO, ""]
    for k in ns.get("ncu") or []:
        out += [f"- `{k['kernel']}`: {_f(k.get('ms_per_step'), '.3f') + ' ms/step'}", "",
                "```", k["command"], "```", ""]
    return out


def nsight_html(d: dict[str, Any]) -> str:
    ns = _nsight(d)
    if not ns:
        return ""
    out = "<h2>Nsight (device side)</h2>"
    if "omitted" in ns:
        return out + f"<p>No Nsight commands: {html.escape(ns['omitted'])}.</p>"
    out += f"<p>{html.escape(NSYS_INTRO)}</p><pre>{html.escape(ns['nsys'])}</pre>"
    if ns.get("ncu"):
        out += f"<p>{html.escape(NCU_INTRO)}</p>"
    for k in ns.get("ncu") or []:
        out += (f"<p><code>{html.escape(str(k['kernel']))}</code>: "
                f"{_f(k.get('ms_per_step'), '.3f') + ' ms/step'}</p><pre>{html.escape(k['command'])}</pre>")
    return out
