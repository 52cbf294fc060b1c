"""CHILD side: the frameworks a user's script trains with, hooked as the script imports them,
in the processes of a script study (its discovery run, its trials, the sides of its verify).

A Hugging Face script builds its ``Trainer`` itself; nothing in it calls autotune. So where the
script imports ``transformers.trainer``, the module named here for it is imported by name (as
a workload's ``_target_`` is: measure does not depend on the adapters above it) and its
``install(module)`` wraps what the script will build (adapters/hf/script.py). A script that
never imports the framework pays nothing: the finder only answers for the names below.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: The framework module whose import installs a hook, and the module that holds it.
HOOKS = {"transformers.trainer": "autotune.adapters.hf.script",
         "lightning.pytorch.trainer.trainer": "autotune.adapters.lightning.script",
         "pytorch_lightning.trainer.trainer": "autotune.adapters.lightning.script"}


class _Hooked(importlib.abc.Loader):
    """The framework module's own loader, then the hook on the module it made."""

    def __init__(self, loader: Any, hook: str):
        self.loader, self.hook = loader, hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        made: ModuleType | None = self.loader.create_module(spec)
        return made

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        importlib.import_module(self.hook).install(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the hooked names through the finders after it, and hooks their loader."""

    def __init__(self) -> None:
        self.finding: set[str] = set()

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name not in HOOKS or name in self.finding:
            return None
        self.finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding.discard(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Hooked(spec.loader, HOOKS[name])
        return spec


def install_hooks() -> None:
    """Hook each framework when the script imports it (now, where it already has been)."""
    for name, hook in HOOKS.items():
        if name in sys.modules:
            importlib.import_module(hook).install(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
