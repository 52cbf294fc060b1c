"""autotune: profiled, automatic tuning of PyTorch training speed."""

from autotune.environment_check import EnvironmentChanged
from autotune.export import BestConfig, load_best
from autotune.meter import Meter, SlowerThanMeasured
from autotune.runtime import KnobOverridden, Runtime
from autotune.stages import Stage
from autotune.training import Training
from autotune.workload import Workload

__all__ = ["BestConfig", "EnvironmentChanged", "KnobOverridden", "Meter", "Runtime",
           "SlowerThanMeasured", "Stage", "Training", "Workload", "load_best"]
