"""The package a user installs: the documented import paths, the configs inside the package,
`python -m autotune`, `--version`, and old stored workload paths still resolving. (The wheel
itself is built and installed outside the checkout by .ci/wheel_check.)"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from autotune.core.workload import build_workload, resolve_target

PUBLIC = ["Runtime", "load_best", "BestConfig", "Workload", "Stage", "Meter", "Training",
          "KnobOverridden", "EnvironmentChanged", "SlowerThanMeasured", "__version__",
          "tune", "verify", "StudyError", "ConfigError", "NothingExported", "RegressionFound",
          "CouldNotMeasure", "StudyInterrupted", "VerifyError", "Verified", "CannotTravel",
          "WorkloadError", "apply_optimizer_impl", "ChangesTraining"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_names_import_from_the_top(name: str) -> None:
    assert hasattr(autotune, name), name


def test_importing_autotune_loads_no_driver() -> None:
    """A trial process and a production run import autotune; the study driver (search) comes
    with tune/verify only, on first use."""
    code = ("import sys, autotune; print(any(m.startswith('autotune.search') "
            "or m.startswith('autotune.cli') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_the_command_line_imports_no_torch_before_its_fork_server_starts() -> None:
    """``autotune`` starts the fork server (which imports torch) before it imports torch
    itself, so the two imports overlap (3 s of every command on 2 cores, docs/benchmarks.md):
    that holds only while importing the command line and the package leaves torch out."""
    code = ("import sys, autotune, autotune.cli.main, autotune.measure.launch; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_the_fork_server_preloads_what_the_adapters_and_the_api_workloads_import() -> None:
    """A trial is forked from the server: a module it imports that the server has not is
    imported again in every trial. Production's best.yaml reader and Runtime, with the
    results modules they import, took 0.35 s a trial here (core.shipping's 6 ms is left to
    the trials that ship live objects)."""
    from autotune.measure.launch import PRELOAD

    code = (f"import sys, importlib; [importlib.import_module(m) for m in {PRELOAD!r}]; "
            "before = set(sys.modules); import autotune; "
            "from autotune import Workload, Stage, Runtime, load_best; "
            "import autotune.adapters.hf.workload, autotune.adapters.lightning.workload; "
            "print(sorted(m for m in set(sys.modules) - before "
            "if m.startswith(('autotune.production', 'autotune.results'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("path", [
    "autotune.adapters.hf.HFWorkload", "autotune.adapters.hf.training_arguments_kwargs",
    "autotune.adapters.lightning.LightningWorkload", "autotune.adapters.lightning.prepare_module",
    "autotune.adapters.lightning.trainer_kwargs", "autotune.adapters.lightning.dataloader_kwargs",
    "autotune.adapters.hf.tune", "autotune.adapters.hf.apply", "autotune.adapters.hf.HFTuned",
    "autotune.adapters.lightning.tune", "autotune.adapters.lightning.prepare_datamodule",
    "autotune.adapters.lightning.LightningTuned", "autotune.core.shipping.CannotTravel",
    "autotune.workloads.resnet18.ResNet18Workload", "autotune.workloads.gpt.GPTWorkload",
    "autotune.workloads.mlp.MLPWorkload", "autotune.workloads.jpeg_folder.JPEGFolderWorkload",
])
def test_documented_paths_resolve(path: str) -> None:
    assert resolve_target(path) is not None


@pytest.mark.parametrize("old", [
    "autotune.adapters.hf_workload.HFTrainerWorkload", "autotune.adapters.hf_workload.HFWorkload",
    "autotune.adapters.hf_trl.SFTTrainerWorkload", "autotune.adapters.hf_trl.SFTOwnCollatorWorkload",
    "autotune.adapters.lightning_workload.LightningObjectsWorkload",
])
def test_the_paths_stored_before_the_framework_folders_name_the_same_classes(old: str) -> None:
    """A study or best.yaml written before adapters/ had a folder per framework names its
    workload by the old module (``_target_: autotune.adapters.hf_workload.HFTrainerWorkload``):
    it resolves to the very class the new path does, so resuming it builds the same workload."""
    module, name = old.rsplit(".", 1)
    framework, part = module.rsplit(".", 1)[1].split("_", 1)
    assert resolve_target(old) is resolve_target(f"autotune.adapters.{framework}.{part}.{name}")


def test_each_conf_workload_builds_from_the_packaged_config() -> None:
    """workload=resnet18|gpt|mlp|jpeg: the YAML ships in autotune/conf and names a target
    inside the package."""
    import yaml

    conf = Path(autotune.__file__).parent / "conf"
    assert (conf / "config.yaml").is_file()
    names = sorted(p.stem for p in (conf / "workload").glob("*.yaml"))
    assert names == ["gpt", "jpeg", "mlp", "resnet18"]
    for name in ("mlp", "gpt"):
        spec = yaml.safe_load((conf / "workload" / f"{name}.yaml").read_text())
        assert spec["_target_"].startswith("autotune.workloads."), spec
        assert build_workload(spec).describe()


def test_a_study_stored_with_the_old_top_level_workloads_path_still_resolves() -> None:
    assert importlib.util.find_spec("workloads") is None  # no second top-level package
    assert resolve_target("workloads.mlp.MLPWorkload") is resolve_target(
        "autotune.workloads.mlp.MLPWorkload")


def test_python_m_autotune_and_version(tmp_path: Path) -> None:
    version = subprocess.run([sys.executable, "-m", "autotune", "--version"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"autotune {autotune.__version__}"
