"""autotune: profiled, automatic tuning of PyTorch training speed.

The public surface: running a study from Python (``tune``, ``verify`` and what it returns,
``Verified``), what a production run imports (``Runtime``, ``load_best``, ``Meter``,
``Training``), what a user implements (``Workload``, ``Stage``), and every exception and
warning the documentation tells a user to catch (``StudyError`` and its kinds, ``CannotTravel``,
``WorkloadError``, ``VerifyError``, the production warnings). The package's parts are its
subpackages (docs/contributing.md, "Layout").

Each name is imported on first use (PEP 562): the ``autotune`` command starts its fork server
(which imports torch, seconds on a small machine) before the driver imports torch itself, so
the two overlap, and a production run or a trial process loads only what it uses.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

try:
    __version__ = version("autotune")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from autotune.cli.api import (
        ConfigError,
        CouldNotMeasure,
        NothingExported,
        RegressionFound,
        StudyError,
        StudyInterrupted,
        VerifyError,
        tune,
        verify,
    )
    from autotune.core.optimizer_impl import apply_optimizer_impl
    from autotune.core.shipping import CannotTravel
    from autotune.core.stages import Stage
    from autotune.core.training import Training
    from autotune.core.workload import Workload, WorkloadError
    from autotune.production.best import BestConfig, ChangesTraining, load_best
    from autotune.production.environment_check import EnvironmentChanged
    from autotune.production.meter import Meter, SlowerThanMeasured
    from autotune.production.runtime import KnobOverridden, Runtime
    from autotune.production.verify import Verified

#: Where each public name lives.
_WHERE = {
    "Stage": "autotune.core.stages", "Training": "autotune.core.training",
    "apply_optimizer_impl": "autotune.core.optimizer_impl",
    "Workload": "autotune.core.workload", "WorkloadError": "autotune.core.workload",
    "CannotTravel": "autotune.core.shipping", "Verified": "autotune.production.verify",
    "BestConfig": "autotune.production.best", "ChangesTraining": "autotune.production.best",
    "load_best": "autotune.production.best",
    "EnvironmentChanged": "autotune.production.environment_check",
    "Meter": "autotune.production.meter", "SlowerThanMeasured": "autotune.production.meter",
    "KnobOverridden": "autotune.production.runtime", "Runtime": "autotune.production.runtime",
    **dict.fromkeys(("tune", "verify", "StudyError", "ConfigError", "NothingExported",
                     "RegressionFound", "CouldNotMeasure", "StudyInterrupted", "VerifyError"),
                    "autotune.cli.api"),
}

__all__ = ["BestConfig", "CannotTravel", "ChangesTraining", "ConfigError", "CouldNotMeasure", "EnvironmentChanged",
           "KnobOverridden", "Meter", "NothingExported", "RegressionFound", "Runtime",
           "SlowerThanMeasured", "Stage", "StudyError", "StudyInterrupted", "Training",
           "Verified", "VerifyError", "Workload", "WorkloadError", "__version__",
           "apply_optimizer_impl", "load_best", "tune", "verify"]


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
