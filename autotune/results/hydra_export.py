"""best.yaml in the forms other tools take: a Hydra config group and a plain override list.

``studies/<name>/hydra/autotune/best.yaml`` is an option of the config group ``autotune``: a
Hydra-configured training app whose search path includes ``studies/<name>/hydra`` gets the
study's result under ``cfg.autotune`` with ``+autotune=best``::

    python train.py 'hydra.searchpath=[file://studies/mlp-cpu/hydra]' +autotune=best

and hands that node to ``autotune.Runtime(cfg.autotune)``. The node holds what the runtime and
the meter read: the knobs, the confirmed metrics, the device and versions measured, and the
memory limit.

``studies/<name>/overrides.txt`` is the knob assignment as Hydra overrides, one
``knobs.<name>=<value>`` per line, in Hydra's override grammar (strings quoted, ``null``,
``true``/``false``): ``autotune workload=mlp $(cat studies/mlp-cpu/overrides.txt)`` re-measures
exactly that configuration, and an app whose config keeps the knobs under another node takes
them with a prefix (``sed 's/^/+autotune./'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: The keys of best.yaml a training app needs at run time (the rest is the study's record).
RUNTIME_KEYS = ("schema", "workload", "device", "knobs", "metrics", "memory_limit_gb",
                "global_batch", "grad_accum", "speedup", "input_stages")


def hydra_group_text(doc: dict[str, Any], study_dir: Path, option: str = "best") -> str:
    """The config-group option: a header saying how to use it, then the runtime keys.
    ``option``: the option's name (``best``; ``best-same-training`` for the other answer)."""
    node = {k: doc[k] for k in RUNTIME_KEYS if k in doc}
    name = (doc.get("study") or {}).get("name", study_dir.name)
    header = (
        "# @package autotune\n"
        f"# autotune study '{name}': its {option} configuration as the Hydra config group\n"
        f"# option autotune={option}. Apply it to a Hydra app (the node lands at cfg.autotune):\n"
        f"#   python train.py 'hydra.searchpath=[file://{study_dir.resolve() / 'hydra'}]' "
        f"+autotune={option}\n"
        "# then, in the app: autotune.Runtime(cfg.autotune). Generated: edits are overwritten.\n"
    )
    return header + yaml.safe_dump(node, sort_keys=False)


def override_value(value: Any) -> str:
    """A value in Hydra's override grammar: strings single-quoted (``off`` or ``true`` stay
    strings), null, true/false, numbers as they are."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def overrides_text(doc: dict[str, Any]) -> str:
    """One ``knobs.<name>=<value>`` line per knob."""
    return "".join(f"knobs.{k}={override_value(v)}\n" for k, v in doc["knobs"].items())
