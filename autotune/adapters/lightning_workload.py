"""The old import path of ``autotune.adapters.lightning.workload``, kept as that same module: studies
and best.yaml files written before the adapters had a folder per framework name it in their
``_target_``s and verifiers (``autotune.adapters.lightning_workload.<Class>``)."""

import sys

from autotune.adapters.lightning import workload

sys.modules[__name__] = workload
