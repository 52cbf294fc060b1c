"""The configuration's schema (autotune/core/config.py) is the one place a default lives: the
sections travel typed to what owns them, so nothing downstream needs a default of its own, and
a default restated elsewhere (``win.get("min_measure_seconds", 0.0)`` beside a schema's 2.0,
a ``StudySetup.confirm_top = 1`` beside its 3) is how the two drifted apart before. The CPU
sizes are decided in one place (``sized_for``), and every range and cross-key check in one
(cli/validate.py)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from autotune.core.config import (
    Config,
    LaunchConfig,
    MemoryConfig,
    StudyConfig,
    WindowConfig,
    left_to_size,
    sized,
    sized_for,
)

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (WindowConfig, StudyConfig, LaunchConfig, MemoryConfig)
#: The sections' keys; ``name`` is everything's name (a workload's, a file's), not study.name.
KEYS = {f.name for section in SECTIONS for f in dataclasses.fields(section)} - {"name"}
#: Keys never read by string: the study and window sections travel typed. (The launch keys are
#: also read from stored records and exported documents, where an absent key has a meaning.)
READ_TYPED = {f.name for s in (WindowConfig, StudyConfig) for f in dataclasses.fields(s)} - {"name"}

#: Names a schema key shares with something else, each with why it is not that key's default.
NOT_A_RESTATEMENT = {
    "TrialRequest.numerics_steps": "a request's own: record this many steps' losses (0: measure)",
    "TrialRequest.loader_profile": "this window's: set per trial from window.loader_profile",
    "WindowResult.loader_profile": "a result: what the loader profile found",
    "Meter(warmup_steps)": "the production meter's own warm-up, in the user's run",
    "probe(timeout_s)": "the device probe's own limit, not a trial's",
    "probe_env(timeout_s)": "the device probe's own limit, not a trial's",
    "verify(nproc_per_node)": "`autotune verify`'s ranks for the production run it measures",
    "--nproc-per-node": "`autotune verify`'s ranks for the production run it measures",
    "training or ...": "a stored study's record: one stored before study.training held no key "
                       "and answered 'any' (results/trials.training_setting)",
    "run_steps or ...": "the words for a stored run length, 'null' where it has none",
}


def _restated(tree: ast.AST) -> list[tuple[int, str]]:
    """Where this module gives a schema key a default of its own: a dataclass field, a
    parameter, a command-line option with a literal default, or a read by string key with a
    fallback (``x.get("key", default)``, ``getattr(x, "key", default)``)."""
    found: list[tuple[int, str]] = []
    inits = {id(f): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
             for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found += [(st.lineno, f"{node.name}.{st.target.id}") for st in node.body
                      if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                      and st.target.id in KEYS and st.value is not None]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = [*zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True),
                     *zip(a.kwonlyargs, a.kw_defaults, strict=True)]
            owner = inits.get(id(node), node.name)
            found += [(node.lineno, f"{owner}({arg.arg})") for arg, default in pairs
                      if arg.arg in KEYS and _literal(default)]
        elif isinstance(node, ast.Call):
            found += _call(node)
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            found += _or_default(node)
    return found


def _literal(node: ast.AST | None) -> bool:
    """A literal default: a constant other than None, signed or not (``-1``)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value is not None


def _read_key(node: ast.AST) -> str | None:
    """The key a read by string names: ``x.get("key")``, ``getattr(x, "key")``, ``x["key"]``."""
    key: ast.AST | None = None
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
            node.func, "id", "")
        if name == "get" and node.args:
            key = node.args[0]
        elif name == "getattr" and len(node.args) >= 2:
            key = node.args[1]
    elif isinstance(node, ast.Subscript):
        key = node.slice
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return None


def _or_default(node: ast.BoolOp) -> list[tuple[int, str]]:
    """``x.get("key") or 0.0``: a fallback after a read by string key of a typed section's."""
    key = _read_key(node.values[0])
    if key in READ_TYPED and any(_literal(v) for v in node.values[1:]):
        return [(node.lineno, f'{key} or ...')]
    return []


def _call(node: ast.Call) -> list[tuple[int, str]]:
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    args = node.args
    if name in ("get", "pop", "setdefault") and len(args) == 2:
        key = args[0]
    elif name == "getattr" and len(args) == 3:
        key = args[1]
    elif name == "add_argument" and args and isinstance(args[0], ast.Constant):
        option = str(args[0].value)
        default = next((k.value for k in node.keywords if k.arg == "default"), None)
        if option.lstrip("-").replace("-", "_") in KEYS and _literal(default):
            return [(node.lineno, option)]
        return []
    else:
        return []
    if isinstance(key, ast.Constant) and key.value in READ_TYPED:
        return [(node.lineno, f'{name}("{key.value}", ...)')]
    return []


def test_no_module_restates_a_schema_default() -> None:
    """Break it once: ``min_measure_seconds = win.get("min_measure_seconds", 0.0)`` in
    measure/loop.py, ``win.get("min_measure_seconds") or 0.0``, a ``confirm_top: int = 1``
    field back on StudySetup, or a ``confirm_runs=-1`` parameter, fails here."""
    restated = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        if path == ROOT / "autotune" / "core" / "config.py":
            continue
        for line, what in _restated(ast.parse(path.read_text())):
            if what not in NOT_A_RESTATEMENT:
                restated.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not restated, ("schema keys given a default outside autotune/core/config.py (read "
                          "the section typed instead):\n" + "\n".join(restated))


def test_the_scan_sees_a_restated_default() -> None:
    """The scan itself: each form it looks for, written once."""
    code = '''
class Setup:
    confirm_top: int = 1
def plan(confirm_budget_s=300.0): ...
def confirm(confirm_runs=-1): ...
x = win.get("min_measure_seconds", 0.0)
y = getattr(cfg, "measure_steps", 40)
p.add_argument("--regression-pct", default=10.0)
z = win.get("measure_seconds") or 0.0
w = study["confirm_top"] or 3
'''
    assert sorted(what for _, what in _restated(ast.parse(code))) == sorted([
        "Setup.confirm_top", "plan(confirm_budget_s)", "confirm(confirm_runs)",
        'get("min_measure_seconds", ...)', 'getattr("measure_steps", ...)', "--regression-pct",
        "measure_seconds or ...", "confirm_top or ..."])


def test_a_device_sized_key_is_sized_where_left_unset_and_kept_where_set() -> None:
    cfg = Config(window=WindowConfig(measure_steps=8), study=StudyConfig(n_trials=None))
    assert "window.measure_steps" not in left_to_size(cfg)
    assert {"window.warmup_steps", "study.n_trials"} <= set(left_to_size(cfg))
    cpu, gpu = sized_for(cfg, "cpu"), sized_for(cfg, "cuda")
    assert cpu.window.measure_steps == gpu.window.measure_steps == 8  # the user's value
    assert (cpu.window.warmup_steps, gpu.window.warmup_steps) == (3, 10)
    assert (cpu.study.n_trials, gpu.study.n_trials) == (12, 20)
    assert not left_to_size(cpu) and not left_to_size(gpu)
    assert cfg.window.warmup_steps is None  # sizing returns a new configuration
    with pytest.raises(RuntimeError, match="sized_for"):
        sized(cfg.window.warmup_steps)


def test_the_window_crosses_the_process_boundary_typed() -> None:
    """The trial's process reads the same WindowConfig the study holds, from the request's
    JSON; a figure-only window is that section with the profiles off."""
    from autotune.measure.protocol import TrialRequest, figure_only

    window = sized_for(WindowConfig(), "cpu")
    req = TrialRequest(workload={}, knobs={}, device="cpu", window=figure_only(window),
                       launch=LaunchConfig(nproc_per_node=2), comm=False)
    import json

    back = TrialRequest.from_dict(json.loads(req.to_json()))
    assert back.window == dataclasses.replace(window, profile=False, loader_profile=False)
    assert back.launch == LaunchConfig(nproc_per_node=2) and back.comm is False
    assert TrialRequest.from_dict(json.loads(TrialRequest(
        workload={}, knobs={}, device="cpu", window=window).to_json())).launch is None


@pytest.mark.parametrize("override,words", [
    ("study.confirm_top=0", ["study.confirm_top=0", "at least 1"]),
    ("study.confirm_runs=-1", ["study.confirm_runs=-1", "at least 0"]),
    ("study.training=fast", ["study.training='fast'", "'any'", "'same'"]),
    ("memory.limit_fraction=2", ["memory.limit_fraction=2.0", "(0, 1]"]),
    ("launch.scaling=true", ["launch.scaling=true", "launch.nproc_per_node=N"]),
    ("workers=two", ["workers='two'", "positive integer or 'auto'"]),
])
def test_validate_names_what_is_wrong_and_what_is_valid(override: str, words: list[str],
                                                        cpu_env: object) -> None:
    """Every cross-key and range check is cli/validate.py's: one paragraph, exit code 2."""
    from autotune.cli.compose import compose_config
    from autotune.cli.crash import UsageError
    from autotune.cli.validate import validate
    from autotune.workloads.mlp import MLPWorkload

    cfg = compose_config(["workload=mlp", override])
    with pytest.raises(UsageError) as exc:
        validate(cfg, MLPWorkload(), cpu_env, "sqlite:///x.db")  # type: ignore[arg-type]
    for w in words:
        assert w in str(exc.value), str(exc.value)


def test_the_knobs_section_has_a_key_for_each_knob_of_the_registry() -> None:
    """KnobsConfig names the registry's knobs by hand rather than being built from it: the
    schema is imported by every trial's process (its window section crosses the boundary), and
    the registry imports Optuna, which a trial never needs. This is what keeps the two lists
    one: a knob added to autotune/core/knobs.py without its key here fails."""
    from autotune.core.config import KnobsConfig
    from autotune.core.knobs import KNOBS

    assert {f.name for f in dataclasses.fields(KnobsConfig)} == {k.name for k in KNOBS}
