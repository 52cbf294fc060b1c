"""`autotune --help` explains the tool: what it does, the main command, the workloads and the
knobs, where to read more; not Hydra's generic text."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from autotune.core.config import StudyConfig
from autotune.core.knobs import KNOBS
from tests.conftest import ROOT, run_cli


def test_help_names_autotune_workloads_and_knobs(tmp_path: Path) -> None:
    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith("autotune - "), out[:200]
    assert "powered by Hydra" not in out
    assert "autotune workload=resnet18" in out and "study.n_trials=" in out
    for wl in sorted(p.stem for p in (ROOT / "autotune" / "conf" / "workload").glob("*.yaml")):
        assert wl in out, wl
    for knob in KNOBS:
        assert f"  {knob.name} " in out, knob.name
    assert "README.md" in out
    assert "_target_: workloads" not in out  # not the resolved config dump
    # A device-sized default is stated from the schema, both its values (core/config.py).
    trials = next(f for f in dataclasses.fields(StudyConfig) if f.name == "n_trials")
    assert f"trials to run (default {trials.metadata['sized'].words()})" in out


def test_help_lists_every_exit_code_the_code_defines(tmp_path: Path) -> None:
    """Each end of a study has an exit code (autotune.cli.api's exceptions carry them); the
    help names every one, beside the exception Python raises for it."""
    import autotune.cli.api as api

    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    codes = proc.stdout.split("Exit codes", 1)[1]
    ends = [c for c in vars(api).values()
            if isinstance(c, type) and issubclass(c, api.StudyError) and c is not api.StudyError]
    assert {"NothingExported", "ConfigError", "RegressionFound", "CouldNotMeasure",
            "VerifyError"} <= {c.__name__ for c in ends}
    for exc in ends:
        assert exc.__name__ in codes, exc.__name__
        assert re.search(rf"^ +{exc.code} {{2,}}\S", codes, re.M), (exc.__name__, exc.code)
    for code in (0, 130, 143):  # done; interrupted (StudyInterrupted carries the signal's)
        assert str(code) in codes
    assert "StudyInterrupted" in codes


def test_help_lists_every_command_main_dispatches_and_every_console_script(tmp_path: Path) -> None:
    """`autotune verify` and `autotune follow` were missing from --help. main()
    dispatches through SUBCOMMANDS only, which --help lists; a command dispatched around the
    table (a ``sys.argv[1:2] == [...]`` test in main.py) fails here, as does a console script
    of pyproject.toml that --help does not name."""
    import ast

    import tomllib

    from autotune.cli.main import SUBCOMMANDS

    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert {"verify", "follow"} <= set(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        assert re.search(rf"^  autotune {name} \S", out, re.M), name
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for script in scripts:
        assert f"  {script} " in out or f"  {script}\n" in out, script
    source = (ROOT / "autotune" / "cli" / "main.py").read_text()
    around = [ast.unparse(node) for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Compare) and "sys.argv[1" in ast.unparse(node.left)
              and any(isinstance(c, (ast.List, ast.Tuple)) for c in node.comparators)
              and "--version" not in ast.unparse(node)]
    assert not around, f"a command dispatched outside SUBCOMMANDS: {around}"
    for name in SUBCOMMANDS:  # each answers its own --help
        sub = run_cli([name, "--help"], tmp_path)
        assert sub.returncode == 0 and f"usage: autotune {name}" in sub.stdout, name


def test_help_shows_the_command_that_tunes_a_launched_script(tmp_path: Path) -> None:
    proc = run_cli(["--help"], tmp_path)
    assert "autotune [overrides] -- python train.py ARGS..." in proc.stdout
