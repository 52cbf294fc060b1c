"""Sending the user's live objects to trial processes: a model, a dataset, a collator, a whole
Workload built in a notebook.

Trials run in processes of their own (a CUDA context poisoned by an OOM dies with its trial),
so an object the user holds in their session must travel by value. cloudpickle serializes
what plain pickle refuses and what a notebook defines (classes and functions of ``__main__``
travel by value; importable ones by reference, and the trial imports them from the same
``sys.path``). Each part is serialized on its own, so an object that cannot travel (an open
file, a lock, a live generator, a socket) is named with what to do instead.

The bytes are written once, content-addressed, into the study's output folder: a study resumed
with the same objects reuses the file, and trials read it by its absolute path. A part that is a
torch module (``ToShip.on_cpu``: a model) is pickled with its tensors apart, in a safetensors
file beside the pickle (core/tensor_file.py): written one tensor at a time from where they are,
read by each trial from the memory-mapped file, never held twice in the user's process.

Unpickling runs code, so a trial checks the pickle's bytes against the hash its name carries
before loading them: a file changed after it was shipped (edited, corrupt, replaced) fails the
trial, named, and is never unpickled. The check catches a changed file, not a deliberate one:
whoever can write the study's folder or its storage can write a new file with a matching name
and point the study at it, so a study folder and its storage are trusted like code (pickle's own
warning: https://docs.python.org/3/library/pickle.html). The tensor file is data (safetensors
holds no code) and is not hashed again on each load: that would read all of a model's weights.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from autotune.core.files import atomic_write
from autotune.core.tensor_file import (
    TensorSource,
    TensorWriter,
    dumps_apart,
    loads_apart,
    streamable,
)
from autotune.core.workload import Workload, WorkloadError

#: The payload's entry naming the tensor file its apart parts read (no part has this key).
TENSORS = "__tensors__"


class CannotTravel(WorkloadError):
    """One of the user's objects cannot be sent to a trial process."""


def dumps(obj: Any, what: str, writer: TensorWriter | None = None) -> bytes:
    """``obj`` as bytes a trial process can load (its tensors handed to ``writer`` where one is
    given), or a CannotTravel naming ``what``."""
    try:
        return dumps_apart(obj, writer) if writer is not None else cloudpickle.dumps(obj)
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


def ship(parts: Mapping[str, Any], folder: Path, names: Mapping[str, str],
         apart: Sequence[str] = ()) -> Path:
    """Write ``parts`` (each serialized alone: ``names[key]`` says what it is in the error)
    to ``folder/<sha1>.pkl``; the tensors of the parts in ``apart`` go to one
    ``folder/<sha1>.safetensors`` it names. Return the pickle's absolute path."""
    folder = folder.absolute()
    writer = TensorWriter(folder)
    blobs = {key: dumps(value, names.get(key, key), writer if key in apart else None)
             for key, value in parts.items()}
    tensors = writer.write()
    if tensors is not None:
        blobs[TENSORS] = tensors.name.encode()
    payload = cloudpickle.dumps(blobs)
    path = folder / f"{content_name(payload)}.pkl"
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
            payload = self.path.read_bytes()
        except FileNotFoundError as exc:
            raise _gone(self.path) from exc
        check_hash(self.path, payload)
        self._blobs: dict[str, bytes] = cloudpickle.loads(payload)
        name = self._blobs.pop(TENSORS, None)
        self.tensor_file = self.path.parent / name.decode() if name else None
        self._source = TensorSource(self.tensor_file) if self.tensor_file else None
        self._loaded: dict[str, Any] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._blobs

    def __getitem__(self, key: str) -> Any:
        if key not in self._loaded:
            self._loaded[key] = self.fresh(key)
        return self._loaded[key]

    def fresh(self, key: str) -> Any:
        """A new copy of ``key`` (loaded again from its bytes, its tensors again from the
        tensor file): a model each trial trains from the same starting weights."""
        if self.tensor_file is not None and not self.tensor_file.exists():
            raise _gone(self.tensor_file)
        return loads_apart(self._blobs[key], self._source)


def content_name(payload: bytes) -> str:
    """A shipped pickle's name: the start of its bytes' SHA-1 (``ship`` writes it so)."""
    return hashlib.sha1(payload).hexdigest()[:16]


def check_hash(path: Path, payload: bytes) -> None:
    """Refuse a shipped pickle whose bytes are not the ones its name was made from, before
    anything unpickles them, naming the file."""
    found = content_name(payload)
    if path.stem != found:
        raise WorkloadError(
            f"{path}: its content does not match its name (SHA-1 {found}...), so it is not the "
            "file this study shipped: it was changed, replaced or damaged since. autotune does "
            "not unpickle it (unpickling runs code: a study folder and its storage are trusted "
            "like code). Start the study again from your objects (autotune.tune / the adapters' "
            "tune) to ship them anew.")


def _gone(path: Path) -> WorkloadError:
    return WorkloadError(
        f"{path}: the objects this study was started with are not there any more (the study "
        "folder was moved or cleaned). Start the study again from the objects (autotune.tune / "
        "the adapters' tune) to ship them anew.")


@dataclass
class ToShip:
    """The user's objects bound for the trials, and the workload factory (``target``, called
    as ``target(objects=<file>, name=<label>)`` in each process) that rebuilds a Workload from
    them. ``on_cpu``: parts that are torch modules (or hold tensors, like a model's recipe):
    their tensors travel apart, as a safetensors file written one tensor at a time from where
    they are, so loading them never starts CUDA in the driver; a module holding a tensor that
    cannot be written so (quantized, a subclass) on a device is moved to the CPU for the moment
    it takes and back. ``said``: a line the study prints as it ships them (how the model
    travels, and how large that is)."""

    parts: dict[str, Any]
    names: dict[str, str]
    target: str
    label: str
    on_cpu: list[str] = field(default_factory=list)
    said: str = ""

    def spec(self, folder: Path) -> dict[str, Any]:
        """Ship the parts into ``folder`` and return the workload's config node."""
        with contextlib.ExitStack() as stack:
            for key in self.on_cpu:
                stack.enter_context(_on_cpu(self.parts[key]))
            path = ship(self.parts, folder, self.names, apart=self.on_cpu)
        if self.said:
            print(f"autotune: {self.said}", flush=True)
        return {"_target_": self.target, "objects": str(path), "name": self.label}


@contextlib.contextmanager
def _on_cpu(module: Any) -> Iterator[None]:
    import torch

    if not isinstance(module, torch.nn.Module):
        yield
        return
    tensors = [*module.parameters(), *module.buffers()]
    device = next((t.device for t in tensors if t.device.type not in ("cpu", "meta")), None)
    if device is None or all(streamable(t) for t in tensors):
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
