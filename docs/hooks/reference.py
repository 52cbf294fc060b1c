"""The documentation's reference pages, generated from the code (mkdocs hooks, and
``python docs/hooks/reference.py``, which writes them).

- ``reference/configuration.md``: every configuration key of the schema
  (``autotune/core/config.py``) with its type, default and explanation (each field's
  ``metadata["help"]``), and each shipped workload's arguments (``autotune/conf/workload``).
- ``reference/knobs.md``: every knob of the registry (``autotune/core/knobs.py``) with its
  doc, its domain on reference machines (evaluated by the registry's own domain rules) and
  when it does not apply.
- ``reference/api.md``: the public Python API (``API``), from the docstrings.

The three pages are committed as generated, so that they read on GitHub as on the site;
``tests/test_docs_reference.py`` fails when one is not what this module writes from today's
code (run ``python docs/hooks/reference.py``). The site's build generates the configuration
and knob pages again (a key or knob added to the code appears even where the committed page
was not rewritten), and renders the API page with mkdocstrings from ``API`` (the committed
page is the same docstrings as plain Markdown, for GitHub).

Links from pages to repository files outside ``docs/`` (``../../examples/x.py``) resolve where
the repository is read; on the site they link to the file in the repository when
``repo_url`` is set (``AUTOTUNE_REPO_URL``), else they read as the file's path. A path that
does not exist fails the build either way.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Each generated page and the function that writes it: what GitHub shows (committed).
GENERATED = {"reference/configuration.md": "config_markdown",
             "reference/knobs.md": "knobs_markdown",
             "reference/api.md": "api_markdown"}
#: What the site builds in their place (the API page rendered by mkdocstrings).
ON_SITE = {**GENERATED, "reference/api.md": "api_site_markdown"}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _type(tp: Any) -> str:
    if isinstance(tp, str):
        return tp.replace("Any", "any")
    name = getattr(tp, "__name__", None) or str(tp)
    return "any" if tp is typing.Any else name


def config_keys() -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) for every leaf key of the schema, in the schema's order."""
    from autotune.core.config import Config

    rows: list[tuple[str, str, str, str]] = []

    def walk(cls: Any, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            key = prefix + f.name
            default: Any = f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            if dataclasses.is_dataclass(default):
                walk(type(default), key + ".")
                continue
            size = f.metadata.get("sized")  # a device-sized default: both values
            shown = f"{size.gpu}; CPU: {size.cpu}" if size else _default(default)
            rows.append((key, _type(f.type), shown, f.metadata.get("help", "")))

    walk(Config, "")
    return rows


def _default(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict) and "_target_" in value:
        return value["_target_"]
    return str(value) if value != {} else "{}"


def config_markdown() -> str:
    from autotune.core.config import Config, KnobsConfig

    out = ["# Configuration keys", "",
           "Generated from the schema, `autotune/core/config.py`, by "
           "`python docs/hooks/reference.py` and again when the site is built. Any key can be set on the command line (`key=value`) or in "
           "`autotune.tune([...])`; a misspelt key or a wrong type is an error naming it, and "
           "a value out of its range or at odds with another key is one naming both "
           "(`autotune/cli/validate.py`). A default given as two values (`40; CPU: 16`) is "
           "sized for the device: the second applies on a CPU-only machine to each such key "
           "left unset (null).", ""]
    sections: dict[str, list[tuple[str, str, str, str]]] = {}
    for row in config_keys():
        head = row[0].split(".")[0] if "." in row[0] else "top level"
        sections.setdefault(head, []).append(row)
    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(Config)}
    for head, rows in sections.items():
        out += [f"## `{head}`" if head != "top level" else "## Top-level keys", ""]
        if head in helps:
            out += [helps[head], ""]
        if head == "knobs":
            out += [(KnobsConfig.__doc__ or "").replace("\n    ", " "), "",
                    "Every key here is a knob of the [knob reference](knobs.md).", ""]
        out += ["| key | type | default | explanation |", "|---|---|---|---|"]
        for key, tp, default, text in rows:
            if head == "knobs":
                text = f"see [{key.split('.', 1)[1]}](knobs.md#{key.split('.', 1)[1]})"
            out.append(f"| `{key}` | {_cell(tp)} | `{_cell(default)}` | {_cell(text)} |")
        out.append("")
    out += _workload_args()
    return "\n".join(out)


def _workload_args() -> list[str]:
    import yaml

    out = ["## `workload.<arg>`: the shipped workloads' arguments", "",
           "`workload=<name>` picks one of these (`autotune/conf/workload/<name>.yaml`); "
           "`workload.<arg>=<value>` changes one argument, e.g. `workload.image_size=64`.", "",
           "| workload | factory | arguments (defaults) |", "|---|---|---|"]
    for path in sorted((ROOT / "autotune" / "conf" / "workload").glob("*.yaml")):
        node = yaml.safe_load(path.read_text())
        target = node.pop("_target_")
        args = ", ".join(f"`{k}={_default(v)}`" for k, v in node.items())
        out.append(f"| `{path.stem}` | `{target}` | {args} |")
    return out + [""]


def _reference_envs() -> list[tuple[str, Any]]:
    import torch

    from autotune.core.env import Env

    common = dict(bf16=True, compiler=True, torch_version=torch.__version__, torch_threads=None)
    return [
        ("CPU, 8 cores", Env(device="cpu", device_name="CPU", total_memory_gb=32.0,
                             cpu_count=8, cuda_capability=None, cuda_version=None,
                             gpu_count=0, **common)),
        ("one CUDA GPU (sm 9.0), 16 cores", Env(
            device="cuda", device_name="GPU", total_memory_gb=80.0, cpu_count=16,
            cuda_capability=(9, 0), cuda_version="12", gpu_count=1, **common)),
        ("CUDA, launch.nproc_per_node=2", Env(
            device="cuda", device_name="GPU", total_memory_gb=80.0, cpu_count=8,
            cuda_capability=(9, 0), cuda_version="12", gpu_count=2, ranks=2, **common)),
    ]


#: Choices of other knobs under which a knob's ``inactive`` rule is asked why it does not apply.
_PROBES: list[dict[str, Any]] = [
    {"num_workers": 0}, {"num_workers": 2}, {"compile": "default"}, {"amp": "fp16"},
    {"cuda_graphs": True}, {"compile": "reduce-overhead"},
]


def _shipped_workload(name: str) -> Any:
    import yaml
    from hydra.utils import instantiate

    node = yaml.safe_load((ROOT / "autotune" / "conf" / "workload" / f"{name}.yaml").read_text())
    return instantiate(node)


def effect_lines(knob: Any) -> list[str]:
    """A knob's class (speed, numerics or training) and why, as the reference states it."""
    why = f": {knob.effect_reason}." if knob.effect_reason else ": only how fast it trains."
    return [f"**Effect on training: {knob.effect}**{why}", ""]


def knobs_markdown() -> str:
    from autotune.core.knobs import EFFECTS, KNOBS

    envs = _reference_envs()
    wl = _shipped_workload("resnet18")
    out = ["# Knobs", "",
           "Generated from the registry, `autotune/core/knobs.py`, by "
           "`python docs/hooks/reference.py` and again when the site is built: a knob added "
           "there appears here. Each knob is set with `knobs.<name>=` "
           "(null: search its valid domain; a value: pin it; a list: search only those "
           "values). The values below are what the registry's own domain rules give for the "
           "`resnet18` workload on three reference machines; a study prints its own at the "
           "start, and knobs that cannot apply on the device are fixed with the reason (in "
           "best.yaml under `fixed_knobs`).", "",
           "## What each knob does to training", "",
           "Every knob is classed by what a value other than yours does to the training "
           "itself. A study confirms two answers: the fastest configuration, and the fastest "
           "that trains the same model as yours (training knobs at your values; "
           "`study.training` says which one best.yaml holds, the other is written beside it "
           "as `best-same-training.yaml` or `best-any-training.yaml`).", "",
           "| class | what it means | knobs |", "|---|---|---|"]
    for effect, meaning in EFFECTS.items():
        names = ", ".join(f"[{k.name}](#{k.name})" for k in KNOBS if k.effect == effect)
        out.append(f"| {effect} | {_cell(meaning)} | {names} |")
    out.append("")
    for knob in KNOBS:
        out += [f"## {knob.name}", "", knob.doc, "", *effect_lines(knob),
                "| machine | values searched | why narrower |", "|---|---|---|"]
        for label, env in envs:
            dom = knob.domain(env, wl)
            values = ", ".join(_default(v) for v in dom.values)
            out.append(f"| {label} | `{_cell(values)}` | {_cell(dom.reason or '')} |")
        reasons = sorted({r for p in _PROBES if (r := knob.inactive(p))})
        applies = (f"Does not apply when: {'; '.join(reasons)}. Value while inactive: "
                   f"`{_default(knob.off)}`." if reasons else
                   "No other knob's value turns it off (its domain above is the only limit).")
        out += ["", applies, ""]
    return "\n".join(out)


def _api_page() -> Any:
    """docs/hooks/api_page.py, loaded by path (mkdocs loads this hook as a file, not a package)."""
    import importlib.util
    import sys

    name = "autotune_docs_api_page"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("api_page.py"))
        assert spec and spec.loader
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def api_markdown() -> str:
    return str(_api_page().markdown())


def api_site_markdown() -> str:
    return str(_api_page().site_markdown())


def stale() -> list[str]:
    """The committed reference pages that are not what today's code generates."""
    return [uri for uri, fn in GENERATED.items()
            if (ROOT / "docs" / uri).read_text() != globals()[fn]()]


def write() -> list[str]:
    """Write every reference page that is stale; the pages written."""
    written = stale()
    for uri in written:
        (ROOT / "docs" / uri).write_text(globals()[GENERATED[uri]]())
    return written


# --- mkdocs hooks -------------------------------------------------------------------------

#: The branch whose files the site links to and whose pages "edit this page" opens.
BRANCH = "main"


def on_config(config: Any) -> Any:
    """With a ``repo_url``, "edit this page" opens ``docs/`` on the main branch (mkdocs'
    default for GitHub is ``edit/master/docs/``), unless AUTOTUNE_EDIT_URI says otherwise."""
    if config.get("repo_url") and not os.environ.get("AUTOTUNE_EDIT_URI"):
        config["edit_uri"] = f"edit/{BRANCH}/docs/"
    return config


def on_files(files: Any, config: Any) -> Any:
    """The reference pages generated from today's code, in place of the committed ones."""
    from mkdocs.structure.files import File

    for uri, fn in ON_SITE.items():
        committed = files.get_file_from_path(uri)
        if committed is not None:
            files.remove(committed)
        files.append(File.generated(config, uri, content=globals()[fn]()))
    return files


def blob_url(config: Any, rel: str) -> str | None:
    """The repository's page for file ``rel`` (a path from the root), where ``repo_url`` is
    set: ``<repo_url>/blob/<branch>/<rel>``, the branch the one ``edit_uri`` edits."""
    repo = (config.get("repo_url") or "").rstrip("/")
    if not repo:
        return None
    edit = re.match(r"edit/([^/]+)/", config.get("edit_uri") or "")
    return f"{repo}/blob/{edit.group(1) if edit else BRANCH}/{rel}"


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links to repository files outside docs/ (checked to exist) become links to the file in
    the repository (``blob_url``), or its path where no ``repo_url`` is set."""
    from mkdocs.exceptions import PluginError

    docs = Path(config["docs_dir"]).resolve()
    here = (docs / page.file.src_uri).parent

    def repl(m: re.Match[str]) -> str:
        bang, text, target = m.groups()
        if bang or "://" in target or target.startswith(("#", "mailto:")):
            return m.group(0)
        path = (here / target.split("#")[0]).resolve()
        if path.is_relative_to(docs) or not target.split("#")[0]:
            return m.group(0)
        if not path.exists():
            raise PluginError(f"{page.file.src_uri}: link to {target}: no such file")
        rel = path.relative_to(ROOT).as_posix()
        url = blob_url(config, rel)
        if url is not None:
            anchor = target.partition("#")[2]
            return f"[{text}]({url}{'#' + anchor if anchor else ''})"
        return f"{text} (`{rel}`)" if text.strip("`") != rel else f"`{rel}`"

    fence = re.compile(r"(```.*?```)", re.S)
    parts = fence.split(markdown)
    return "".join(p if p.startswith("```") else _LINK.sub(repl, p) for p in parts)


if __name__ == "__main__":
    print("wrote: " + (", ".join(write()) or "nothing (every reference page was current)"))
