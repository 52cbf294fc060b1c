"""The command line: the Hydra entry (``main``), its config schemas (``config``), the step
from a validated config to a running study (``app``) and readable driver errors (``crash``).
Nothing imports this package but ``autotune.__main__`` and the console script.
"""
