"""Sending the user's live objects to trial processes: a model, a dataset, a collator, a whole
Workload built in a notebook.

Trials run in processes of their own (a CUDA context poisoned by an OOM dies with its trial),
so an object the user holds in their session must travel by value. cloudpickle serializes
what plain pickle refuses and what a notebook defines (classes and functions of ``__main__``
travel by value; importable ones by reference, and the trial imports them from the same
``sys.path``). Each part is serialized on its own, so an object that cannot travel (an open
file, a lock, a live generator, a socket) is named with what to do instead.

The bytes are written once, content-addressed, into the study's output folder: a study resumed
with the same objects reuses the file, and trials read it by its absolute path.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from autotune.core.files import atomic_write
from autotune.core.workload import Workload, WorkloadError


class CannotTravel(WorkloadError):
    """One of the user's objects cannot be sent to a trial process."""


def dumps(obj: Any, what: str) -> bytes:
    """``obj`` as bytes a trial process can load, or a CannotTravel naming ``what``."""
    try:
        return cloudpickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the user's object's
        raise CannotTravel(
            f"{what} (a {type(obj).__module__}.{type(obj).__qualname__}) cannot be sent to "
            f"autotune's trial processes: {type(exc).__name__}: {exc}. Trials run in processes "
            "of their own, so each object must pickle (cloudpickle): open files, locks, "
            "database connections and generators inside it do not. Open such resources "
            "lazily (e.g. in __getitem__ or a worker_init_fn), or describe the workload by "
            "import path instead (workload._target_=package.module.Factory, docs/guide/"
            "own-workload.md)."
        ) from exc


def ship(parts: Mapping[str, Any], folder: Path, names: Mapping[str, str]) -> Path:
    """Write ``parts`` (each serialized alone: ``names[key]`` says what it is in the error)
    to ``folder/<sha1>.pkl``; return the file's absolute path."""
    blobs = {key: dumps(value, names.get(key, key)) for key, value in parts.items()}
    payload = cloudpickle.dumps(blobs)
    folder = folder.absolute()
    path = folder / f"{hashlib.sha1(payload).hexdigest()[:16]}.pkl"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(path, payload)
    return path


class Shipped:
    """A shipped file's parts, each loaded on first use (a model's weights need not be read
    where only the dataset is wanted, e.g. by the driver)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._blobs: dict[str, bytes] = cloudpickle.loads(self.path.read_bytes())
        except FileNotFoundError as exc:
            raise WorkloadError(
                f"{self.path}: the objects this study was started with are not there any more "
                "(the study folder was moved or cleaned). Start the study again from the "
                "objects (autotune.tune / the adapters' tune) to ship them anew.") from exc
        self._loaded: dict[str, Any] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._blobs

    def __getitem__(self, key: str) -> Any:
        if key not in self._loaded:
            self._loaded[key] = cloudpickle.loads(self._blobs[key])
        return self._loaded[key]

    def fresh(self, key: str) -> Any:
        """A new copy of ``key`` (loaded again from its bytes): a model each trial trains
        from the same starting weights."""
        return cloudpickle.loads(self._blobs[key])


@dataclass
class ToShip:
    """The user's objects bound for the trials, and the workload factory (``target``, called
    as ``target(objects=<file>, name=<label>)`` in each process) that rebuilds a Workload from
    them. ``on_cpu``: parts that are torch modules, serialized with their weights on the CPU
    (moved there for the moment it takes and back): loading them never starts CUDA in the
    driver."""

    parts: dict[str, Any]
    names: dict[str, str]
    target: str
    label: str
    on_cpu: list[str] = field(default_factory=list)

    def spec(self, folder: Path) -> dict[str, Any]:
        """Ship the parts into ``folder`` and return the workload's config node."""
        with contextlib.ExitStack() as stack:
            for key in self.on_cpu:
                stack.enter_context(_on_cpu(self.parts[key]))
            path = ship(self.parts, folder, self.names)
        return {"_target_": self.target, "objects": str(path), "name": self.label}


@contextlib.contextmanager
def _on_cpu(module: Any) -> Iterator[None]:
    import torch

    first = next(iter(module.parameters()), None) if isinstance(module, torch.nn.Module) else None
    device = first.device if first is not None else None
    if device is None or device.type == "cpu":
        yield
        return
    module.to("cpu")
    try:
        yield
    finally:
        module.to(device)


def shipped_workload(objects: str, name: str = "") -> Workload:
    """The trial's factory for a Workload object the user passed to ``autotune.tune``.
    ``name`` labels the study (core/workload.workload_name reads it)."""
    workload = Shipped(objects)["workload"]
    if not isinstance(workload, Workload):
        raise WorkloadError(f"{objects} holds a {type(workload).__name__}, not an autotune.Workload.")
    return workload


def workload_parts(workload: Workload) -> ToShip:
    """A Workload object, bound for the trials by value."""
    return ToShip({"workload": workload}, {"workload": "the workload"},
                  target=f"{__name__}.shipped_workload",
                  label=getattr(workload, "name", "") or type(workload).__name__.lower())
