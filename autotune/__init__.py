"""autotune: profiled, automatic tuning of PyTorch training speed.

The public surface: running a study from Python (``tune``, ``verify``), what a production run
imports (``Runtime``, ``load_best``, ``Meter``, ``Training``) and what a user implements
(``Workload``, ``Stage``). The package's parts are its subpackages (README "Layout")."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autotune")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

from autotune.core.stages import Stage  # noqa: E402
from autotune.core.training import Training  # noqa: E402
from autotune.core.workload import Workload  # noqa: E402
from autotune.production.best import BestConfig, load_best  # noqa: E402
from autotune.production.environment_check import EnvironmentChanged  # noqa: E402
from autotune.production.meter import Meter, SlowerThanMeasured  # noqa: E402
from autotune.production.runtime import KnobOverridden, Runtime  # noqa: E402

__all__ = ["BestConfig", "ConfigError", "CouldNotMeasure", "EnvironmentChanged", "KnobOverridden",  # noqa: F822
           "Meter", "NothingExported", "RegressionFound", "Runtime", "SlowerThanMeasured", "Stage",
           "StudyError", "StudyInterrupted", "Training", "Workload", "__version__", "load_best",
           "tune", "verify"]

#: Running a study from Python (autotune/cli/api.py), imported on first use: a trial process
#: and a production run import ``autotune`` too, and neither needs the study driver.
_API = ("tune", "verify", "StudyError", "ConfigError", "NothingExported", "RegressionFound",
        "CouldNotMeasure", "StudyInterrupted")


def __getattr__(name: str) -> object:
    if name in _API:
        from autotune.cli import api

        return getattr(api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
