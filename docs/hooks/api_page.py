"""The Python API reference: which objects it documents (``API``), as the site renders them
(mkdocstrings' ``:::`` directives, ``site_markdown``) and as GitHub shows them (the same
signatures and docstrings as plain Markdown, ``markdown``: committed as docs/reference/api.md
by ``python docs/hooks/reference.py``)."""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from typing import Any

INTRO = ("Every name here is importable as written (`autotune.tune`, `autotune.CannotTravel`, "
         "`autotune.Verified`: the package's top-level names are the classes below, imported "
         "on first use). Tutorials: [from Python and notebooks](../guide/python.md), "
         "[production](../guide/production.md).")

#: (section, [(object path, mkdocstrings options)]), in the page's order.
API: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
    ("Running a study", [
        ("autotune.cli.api.tune", {}), ("autotune.cli.api.StudyError", {}),
        ("autotune.cli.api.ConfigError", {}), ("autotune.cli.api.NothingExported", {}),
        ("autotune.cli.api.RegressionFound", {}), ("autotune.cli.api.CouldNotMeasure", {}),
        ("autotune.cli.api.StudyInterrupted", {}), ("autotune.core.shipping.CannotTravel", {}),
        ("autotune.core.workload.WorkloadError", {})]),
    ("Does production get the speed?", [
        ("autotune.cli.api.verify", {}), ("autotune.production.verify.Verified", {}),
        ("autotune.cli.api.VerifyError", {})]),
    ("In production", [
        ("autotune.production.best.load_best", {}), ("autotune.production.best.BestConfig", {}),
        ("autotune.production.runtime.Runtime", {"inherited_members": True}),
        ("autotune.production.runtime.KnobOverridden", {}),
        ("autotune.production.best.ChangesTraining", {}),
        ("autotune.production.meter.Meter", {}),
        ("autotune.production.meter.SlowerThanMeasured", {}),
        ("autotune.production.environment_check.EnvironmentChanged", {}),
        ("autotune.core.training.Training", {})]),
    ("What you implement", [
        ("autotune.core.workload.Workload", {}),
        ("autotune.core.optimizer_impl.apply_optimizer_impl", {}),
        ("autotune.core.stages.Stage", {})]),
    ("The framework adapters", [
        ("autotune.adapters.hf", {"members": ["tune", "apply", "HFTuned", "tuned_arguments",
                                              "training_arguments_kwargs", "unapplied"]}),
        ("autotune.adapters.lightning", {"members": [
            "tune", "LightningTuned", "prepare_module", "prepare_datamodule", "prepare_loader",
            "trainer_kwargs", "dataloader_kwargs"]})]),
]


def site_markdown() -> str:
    """The page the site builds: mkdocstrings renders each ``:::`` directive."""
    out = ["# Python API", "", "Generated from the docstrings when the documentation is "
           "built. " + INTRO, ""]
    for section, objects in API:
        out += [f"## {section}", ""]
        for path, options in objects:
            out.append(f"::: {path}")
            if options:
                out.append("    options:")
                for key, value in options.items():
                    shown = ("true" if value is True else
                             "[" + ", ".join(value) + "]" if isinstance(value, list) else value)
                    out.append(f"      {key}: {shown}")
            out.append("")
    return "\n".join(out)


def markdown() -> str:
    """The page GitHub shows: each object's signature and docstring, as plain Markdown."""
    out = ["# Python API", "", textwrap.fill(
        "Generated from the docstrings by `python docs/hooks/reference.py` (the documentation "
        "site renders the same docstrings with mkdocstrings). " + INTRO, 95), ""]
    for section, objects in API:
        out += [f"## {section}", ""]
        for path, options in objects:
            out += _object(path, options)
    return "\n".join(out).rstrip("\n") + "\n"


def _resolve(path: str) -> Any:
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def _object(path: str, options: dict[str, Any]) -> list[str]:
    obj = _resolve(path)
    if inspect.ismodule(obj):
        out = [f"### `{path}`", "", *_doc(obj), ""]
        for name in options.get("members", []):
            out += _entry(f"{path}.{name}", getattr(obj, name), level=4)
        return out
    return _entry(path, obj, level=3, inherited=bool(options.get("inherited_members")))


def _entry(path: str, obj: Any, level: int, inherited: bool = False) -> list[str]:
    out = [f"{'#' * level} `{path}`", ""]
    sig = _signature(path.rpartition(".")[2], obj)
    if sig:
        out += ["```python", sig, "```", ""]
    out += [*_doc(obj), ""]
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        for name, member in _members(obj, inherited):
            out += _entry(f"{path}.{name}", member, level=min(level + 1, 6))
    return out


def _signature(name: str, obj: Any) -> str | None:
    kind = "class " if inspect.isclass(obj) else "def "
    if isinstance(obj, property):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{kind}{name}" if kind == "class " else None
    unquote = re.compile(r"(: |-> )'([^']*)'")  # annotations kept as strings (PEP 563)
    params, star = [], False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        params.append(unquote.sub(r"\1\2", str(p)))
    ret = ("" if sig.return_annotation is inspect.Signature.empty or kind == "class " else
           unquote.sub(r"\1\2", f" -> '{sig.return_annotation}'"
                       if isinstance(sig.return_annotation, str) else
                       f" -> {inspect.formatannotation(sig.return_annotation)}"))
    one = f"{kind}{name}({', '.join(params)}){ret}"
    if len(one) <= 96:
        return one
    return f"{kind}{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){ret}"


def _members(cls: type, inherited: bool) -> list[tuple[str, Any]]:
    """Public methods and properties, in source order: the class's own, and with
    ``inherited`` those of its bases in this package."""
    owners = [c for c in cls.__mro__ if c is cls or (inherited and c.__module__.startswith(
        "autotune."))]
    out: dict[str, Any] = {}
    for owner in owners:
        for name, member in vars(owner).items():
            if name.startswith("_") or name in out:
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if inspect.isfunction(member) or isinstance(member, property):
                out[name] = member
    return list(out.items())


_FIELD = re.compile(r"^:(param|parameter|arg|raises?|returns?|rtype)\s*([^:]*):\s*(.*)$")


def _doc(obj: Any) -> list[str]:
    """The docstring as Markdown: reST's ``literal`` as `literal`, its :param x: fields as a
    list."""
    text = re.sub(r"``(.+?)``", r"`\1`", inspect.getdoc(obj) or "", flags=re.S)
    lines = []
    for line in text.splitlines():
        m = _FIELD.match(line.strip())
        if m:
            kind, name, rest = m.groups()
            label = {"param": "", "parameter": "", "arg": "", "raise": "raises ",
                     "raises": "raises ", "return": "returns", "returns": "returns",
                     "rtype": "returns"}[kind]
            line = f"- {label}{'`' + name.strip() + '`' if name.strip() else ''}: {rest}"
        lines.append(line)
    return lines
