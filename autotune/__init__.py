"""autotune: profiled, automatic tuning of PyTorch training speed."""

from autotune.export import BestConfig, load_best
from autotune.training import Training
from autotune.workload import Workload

__all__ = ["BestConfig", "Training", "Workload", "load_best"]
