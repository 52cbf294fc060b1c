"""The command line: the Hydra entry (``main``), its config schemas (``config``), the step
from a validated config to a running study (``app``), readable driver errors (``crash``).
``api``: the same study from Python (``autotune.tune``, the adapters' ``tune``). Nothing else
imports this package.
"""
