"""The old import path of ``autotune.adapters.hf.trl``, kept as that same module: studies
and best.yaml files written before the adapters had a folder per framework name it in their
``_target_``s and verifiers (``autotune.adapters.hf_trl.<Class>``)."""

import sys

from autotune.adapters.hf import trl

sys.modules[__name__] = trl
