"""autotune: profiled, automatic tuning of PyTorch training speed.

The public surface: what a production run imports (``Runtime``, ``load_best``, ``Meter``,
``Training``) and what a user implements (``Workload``, ``Stage``). The package's parts are
its subpackages (README "Layout")."""

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

__all__ = ["BestConfig", "EnvironmentChanged", "KnobOverridden", "Meter", "Runtime",
           "SlowerThanMeasured", "Stage", "Training", "Workload", "__version__", "load_best"]
