"""Tensors pickled apart: an object's torch tensors written into one safetensors file beside its
pickle, so a model's weights travel as a file a trial can memory-map instead of bytes inside a
pickle.

Pickling a model with cloudpickle copies every weight into the pickle's bytes: the user's
process then holds the weights twice (three times while the bytes are joined into one
payload) and each trial reads the whole pickle to find them. Here a pickler hands each tensor
it meets to a writer (a persistent id, so the pickle holds only its key); the writer keeps a
reference, and writes the safetensors file afterwards one tensor at a time (a GPU tensor is
copied to the host alone). The file is named by its content's hash, so the same weights
shipped again reuse it. Loading gives each tensor back from the file (``safe_open``: the file
is memory-mapped), the same tensor object wherever the pickle referenced one (tied weights stay
tied), a ``Parameter`` as a ``Parameter`` with its ``requires_grad``.

A tensor that is not a plain dense one of a safetensors dtype (a quantized or sparse tensor, a
tensor subclass, one on the meta device) is pickled as torch pickles it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import cloudpickle
import torch
from torch import nn

#: torch dtypes and their safetensors names.
DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
          torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
          torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}


def streamable(obj: Any) -> bool:
    """A plain dense tensor (or Parameter) of a safetensors dtype, holding data."""
    return (type(obj) in (torch.Tensor, nn.Parameter) and obj.layout == torch.strided
            and not obj.is_quantized and obj.device.type != "meta" and obj.dtype in DTYPES)


class TensorWriter:
    """The tensors met while pickling, written afterwards as ``<hash>.safetensors`` in
    ``folder``. ``add`` keeps a reference (no copy); ``write`` streams them out."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tensors: list[torch.Tensor] = []
        self._keys: dict[int, str] = {}

    def add(self, tensor: torch.Tensor) -> str:
        key = self._keys.get(id(tensor))
        if key is None:
            key = self._keys[id(tensor)] = f"t{len(self.tensors)}"
            self.tensors.append(tensor)
        return key

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def write(self) -> Path | None:
        """The file (None when no tensor was met): a safetensors header, then each tensor's
        bytes in turn, hashed as written; kept under its hash's name."""
        if not self.tensors:
            return None
        header: dict[str, Any] = {"__metadata__": {"format": "pt", "written_by": "autotune"}}
        offset = 0
        for i, t in enumerate(self.tensors):
            n = t.numel() * t.element_size()
            header[f"t{i}"] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                               "data_offsets": [offset, offset + n]}
            offset += n
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".weights-{os.getpid()}-{id(self)}.tmp"
        digest = hashlib.sha1()
        with tmp.open("wb") as f:
            for chunk in (struct.pack("<Q", len(text)), text):
                f.write(chunk)
                digest.update(chunk)
            for t in self.tensors:
                data = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
                f.write(data.data)
                digest.update(data.data)
        path = self.folder / f"{digest.hexdigest()[:16]}.safetensors"
        if path.exists():
            tmp.unlink()
        else:
            os.replace(tmp, path)
        return path


class _ApartPickler(cloudpickle.CloudPickler):
    """cloudpickle, with each streamable tensor replaced by its key in the writer."""

    def __init__(self, file: IO[bytes], writer: TensorWriter):
        super().__init__(file)
        self.writer = writer

    def persistent_id(self, obj: Any) -> Any:  # noqa: D102 - pickle's hook
        if isinstance(obj, torch.Tensor) and streamable(obj):
            return ("tensor", self.writer.add(obj), type(obj) is nn.Parameter,
                    bool(obj.requires_grad))
        return None


def dumps_apart(obj: Any, writer: TensorWriter) -> bytes:
    """``obj`` pickled (cloudpickle) with its tensors handed to ``writer``."""
    buffer = io.BytesIO()
    _ApartPickler(buffer, writer).dump(obj)
    return buffer.getvalue()


class TensorSource:
    """A safetensors file's tensors, opened once (memory-mapped) and read on demand."""

    def __init__(self, path: Path):
        self.path = path
        self._file: Any = None

    def get(self, key: str) -> torch.Tensor:
        if self._file is None:
            from safetensors import safe_open

            self._file = safe_open(str(self.path), framework="pt")
        return self._file.get_tensor(key)  # type: ignore[no-any-return]


class _ApartUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], fetch: Callable[[str], torch.Tensor]):
        super().__init__(file)
        self.fetch = fetch
        self.loaded: dict[str, torch.Tensor] = {}  # one object per key: tied weights stay tied

    def persistent_load(self, pid: Any) -> Any:
        kind, key, is_parameter, requires_grad = pid
        if kind != "tensor":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        if key not in self.loaded:
            tensor = self.fetch(key)
            self.loaded[key] = (nn.Parameter(tensor, requires_grad=requires_grad) if is_parameter
                                else tensor.requires_grad_(requires_grad))
        return self.loaded[key]


def loads_apart(data: bytes, source: TensorSource | None) -> Any:
    """What ``dumps_apart`` pickled, its tensors read from ``source``."""

    def missing(key: str) -> torch.Tensor:
        raise pickle.UnpicklingError("this pickle's tensors were written apart, and no tensor "
                                     "file came with it")

    return _ApartUnpickler(io.BytesIO(data), source.get if source else missing).load()
