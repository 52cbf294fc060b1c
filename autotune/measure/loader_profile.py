"""CHILD side: a profile of the input pipeline alone, folded to the frames a user can act on.

"The step waits on the DataLoader 37% of the time" does not say *what* in the loader is slow:
the file read, the JPEG decode, one augmentation, the collate, or the user's own
``__getitem__``. ``profile_loader`` fetches a few batches **in process** (worker processes
would hide the work) under ``cProfile`` (deterministic: every call counted, no sampling luck)
and folds the call graph into a few disjoint frames a user can act on.

Folding. Each function in the ``pstats`` table is classified or not. decode: PIL's
``Image.open`` (header parse) and ``ImageFile.load`` (which ``convert`` triggers; siblings, one
frame), torchvision.io's decoders. read: ``open``, file ``read``, ``torchvision.io.read_file``.
transform: a torchvision transform class's forward/__call__ (v2: transform, make_params) named
by its class (found with ``ast``; containers such as Compose are not frames, their children
are), or a public torchvision functional op. collate: ``default_collate`` or the given
collate_fn. wait: sleep, select/poll, socket recv, lock acquire. A classified function owns its
*inclusive* time (cumtime), but only the part not spent beneath another classified function:
the outermost wins (a read inside a PIL decode is decode; a PIL resize inside RandomResizedCrop
is RandomResizedCrop). pstats keeps only direct callers, so "beneath" is propagated
gprof-style: ``inside(f)`` is the share of f's time reached through callers that are
classified or themselves inside, weighted by each caller edge's cumtime (a fixed point over
the call graph; self-calls ignored, cumtime already handles recursion). Unclassified functions
add only their *self* time (tottime) outside classified frames: the user's code (not stdlib,
site-packages, autotune, built-ins) one frame per function from 1% up, the library's one
"other (library)" frame. So frames are disjoint; their shares of the wall time add up to
``coverage`` <= 1 (the rest: profiler bookkeeping, this module's loop). ``wait_share`` is the
loader's own waiting: the wall time neither on a CPU nor runnable and waiting for one (I/O,
sleeps, locks). The time it waited for a CPU while other processes held the cores is
``cpu_wait_share``, apart: counted as waiting, a compute-bound loader beside another job read
about 50% waiting, as if it waited on its files.

Cost: cProfile slows Python-heavy code (many small calls) far more than C-heavy code (a
decode, a memcpy), so shares lean towards Python work and ``total_s`` is not the loader's
real speed; the caller states that overhead wherever it reports these numbers.
"""

from __future__ import annotations

import ast
import cProfile
import functools
import itertools
import os
import pstats
import re
import sysconfig
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.measure.readings import thread_cpu_wait_s

Key = tuple[str, int, str]  # (file, first line, function name), as pstats keys functions
MAX_FRAMES = 12
USER_MIN_SHARE = 0.01
TRANSFORM_METHODS = {"forward", "__call__", "transform", "_transform", "make_params", "_get_params"}
TRANSFORM_CONTAINERS = {"Transform", "_RandomApplyTransform", "Compose", "RandomApply", "RandomChoice", "RandomOrder"}
TV_IO = {"decode_jpeg": ("JPEG decode", "decode"), "decode_png": ("PNG decode", "decode"),
         "decode_image": ("image decode", "decode"), "read_file": ("file read", "read")}
WAITS = (("time.sleep", "time.sleep"), ("select", "select/poll"), ("poll", "select/poll"),
         ("recv", "socket recv"), ("acquire", "lock"))
_HERE = os.path.realpath(__file__)
_AUTOTUNE = os.path.dirname(os.path.dirname(_HERE)) + os.sep
_LIB_ROOTS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep
                    for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def profile_loader(dataset: Any, collate_fn: Callable[[list[Any]], Any] | None, batch_size: int,
                   batches: int = 8, seed: int = 0,
                   named: Mapping[Callable[..., Any], tuple[str, str]] | None = None,
                   budget_s: float = 10.0) -> dict[str, Any]:
    """Fetch ``batches`` shuffled batches in process under cProfile; return the folded profile
    (a plain, JSON-serialisable dict; see the module docstring and ``_fold``). ``named``: more
    functions to fold as frames of their own, ``{callable: (name, kind)}`` (a workload's input
    stages, by stage name). No batch starts after ``budget_s``: a slow loader (seconds per
    batch) is profiled on fewer batches rather than stalling its trial's watchdog."""
    import torch
    from torch.utils.data import DataLoader

    n = max(1, min(int(batches), len(dataset) // max(1, batch_size)))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True,
                        drop_last=len(dataset) >= batch_size, num_workers=0,
                        collate_fn=collate_fn, generator=torch.Generator().manual_seed(seed))
    profiler = cProfile.Profile()
    wall0, cpu0, queued0 = time.perf_counter(), time.process_time(), thread_cpu_wait_s()
    fetched = 0
    profiler.enable()
    try:
        for _batch in itertools.islice(loader, n):  # stops at n: no batch n+1 is fetched
            fetched += 1
            if time.perf_counter() - wall0 > budget_s:
                break
    finally:
        profiler.disable()
    total_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    queued_s = thread_cpu_wait_s() - queued0
    stats: dict[Key, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    return {"total_s": round(total_s, 6), "cpu_s": round(cpu_s, 6), "batches": fetched,
            "batch_size": int(batch_size),
            "wait_share": _share(total_s - cpu_s - queued_s, total_s),
            "cpu_wait_share": _share(queued_s, total_s),
            **_fold(stats, total_s, _code_key(type(dataset).__getitem__), _code_key(collate_fn),
                    {k: v for fn, v in (named or {}).items() if (k := _code_key(fn))})}


def _share(part_s: float, total_s: float) -> float:
    return round(min(1.0, max(0.0, part_s / total_s)), 3) if total_s > 0 else 0.0


def summary_line(profile: dict[str, Any]) -> str:
    """One line for trials.csv and the console: the top 3 frames and the waiting share, e.g.
    "61% JPEG decode (PIL open+load), 18% RandomResizedCrop, 9% collate (...); 4% waiting",
    and the wait for a CPU where other processes took a tenth of the time or more."""
    top = ", ".join(f"{f['share'] * 100:.0f}% {f['name']}" for f in (profile.get("frames") or [])[:3])
    queued = float(profile.get("cpu_wait_share") or 0.0)
    busy = f", {queued * 100:.0f}% waiting for a CPU other processes held" if queued >= 0.1 else ""
    return f"{top or 'no loader frames'}; {profile.get('wait_share', 0.0) * 100:.0f}% waiting{busy}"


def stored_profile(profile: dict[str, Any], frames: int = 8) -> dict[str, Any]:
    """The profile as a trial stores it (the full one is the trial folder's
    loader_profile.json): its summary line and its top frames."""
    if "error" in profile:
        return {"error": profile["error"]}
    keep = ("wait_share", "cpu_wait_share", "coverage", "total_s", "batches", "batch_size", "getitem", "hot")
    return {"summary": summary_line(profile), **{k: profile[k] for k in keep if k in profile},
            "frames": (profile.get("frames") or [])[:frames]}


def hot_kind(profile: dict[str, Any]) -> str | None:
    """The kind of the top frame ("decode", "transform", ...), or None without frames."""
    frames = profile.get("frames") or []
    return str(frames[0]["kind"]) if frames else None


# --- folding --------------------------------------------------------------------------------
def _fold(stats: dict[Key, Any], total_s: float, getitem: Key | None,
          collate: Key | None, named: dict[Key, tuple[str, str]] | None = None) -> dict[str, Any]:
    """Frames (disjoint, by share descending), coverage, the dataset's __getitem__, the hot frame."""
    named = named or {}
    kinds = {key: c for key in stats
             if (c := named.get(key) or _classify(key, collate, stats)) is not None}
    inside = _inside(stats, set(kinds))
    parts: dict[tuple[str, str], list[tuple[float, Key]]] = {}
    for key, (_cc, _nc, tottime, cumtime, _callers) in stats.items():
        outside = 1.0 - inside[key]
        if key in kinds:
            parts.setdefault(kinds[key], []).append((cumtime * outside, key))
        elif _is_user(key[0]):
            parts.setdefault((_user_name(key), "user"), []).append((tottime * outside, key))
        elif os.path.realpath(key[0]) != _HERE:
            parts.setdefault(("other (library)", "other"), []).append((tottime * outside, key))
    frames = [_frame(name, kind, items, stats, total_s) for (name, kind), items in parts.items()]
    frames = [f for f in frames if f["share"] >= (USER_MIN_SHARE if f["kind"] in ("user", "other")
                                                  else 0.0005)]
    frames = _normalise(sorted(frames, key=lambda f: -f["share"])[:MAX_FRAMES])
    entry = stats.get(getitem) if getitem else None
    return {"coverage": round(sum(f["share"] for f in frames), 6), "frames": frames,
            "getitem": {"where": f"{_short(getitem[0])}:{getitem[1]}" if getitem else "?",
                        "share": round(min(1.0, entry[3] / total_s), 3) if entry else 0.0},
            "hot": frames[0]["name"] if frames else None}


def _frame(name: str, kind: str, items: list[tuple[float, Key]], stats: dict[Key, Any],
           total_s: float) -> dict[str, Any]:
    """One frame: the summed time of its functions; where/calls of the largest of them."""
    _seconds, main = max(items)
    return {"name": name, "kind": kind, "share": sum(t for t, _ in items) / total_s,
            "where": _where(main, stats), "calls": int(stats[main][0])}


def _normalise(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scale down if the timers disagree (sum > 1), round to 3 decimals, keep the sum <= 1."""
    scale = 1.0 / max(1.0, sum(f["share"] for f in frames))
    for f in frames:
        f["share"] = round(min(1.0, f["share"] * scale), 3)
    excess = round(sum(f["share"] for f in frames) - 1.0, 3)
    if frames and excess > 0:
        frames[0]["share"] = round(frames[0]["share"] - excess, 3)
    return [f for f in frames if f["share"] > 0]


def _inside(stats: dict[Key, Any], classified: set[Key]) -> dict[Key, float]:
    """For each function, the share of its time spent beneath a classified function (see the
    module docstring): a fixed point over the callers graph, weighted by edge cumtime."""
    inside = dict.fromkeys(stats, 0.0)
    for _ in range(200):
        change = 0.0
        for key, entry in stats.items():
            edges = [(c, e) for c, e in entry[4].items() if c != key]
            cumtimes = [e[3] for _, e in edges]  # by time; by calls where the timer saw none
            weights = cumtimes if sum(cumtimes) > 0 else [float(e[0]) for _, e in edges]
            total = sum(weights)
            value = sum(w * (1.0 if c in classified else inside.get(c, 0.0))
                        for (c, _), w in zip(edges, weights, strict=True)) / total if total > 0 else 0.0
            change, inside[key] = max(change, abs(value - inside[key])), value
        if change < 1e-9:
            break
    return inside


# --- classification -------------------------------------------------------------------------
def _classify(key: Key, collate: Key | None, stats: dict[Key, Any]) -> tuple[str, str] | None:
    """(frame name, kind) for a function the user can act on as a whole, or None."""
    file, line, func = key
    path = file.replace("\\", "/")
    if file == "~":
        return _classify_builtin(func)
    if (path.endswith("PIL/ImageFile.py") and func == "load") or (
            path.endswith("PIL/Image.py") and func == "open"):
        return f"{_pil_format(stats)} decode (PIL open+load)", "decode"
    if path.endswith("torchvision/io/image.py") and func in TV_IO:
        return f"{TV_IO[func][0]} (torchvision.io.{func})", TV_IO[func][1]
    if key == collate or path.endswith("torch/utils/data/_utils/collate.py") \
            and func == "default_collate":
        return f"collate ({func})", "collate"
    if "torchvision/transforms/" in path:  # a transform class by name, or a functional op
        cls = _classes(file).get(line)
        if cls and func in TRANSFORM_METHODS and cls not in TRANSFORM_CONTAINERS:
            return cls, "transform"
        if cls is None and "functional" in path and not path.endswith("_utils.py") \
                and not func.startswith("_"):
            return f"{func} (torchvision functional)", "transform"
    return None


def _classify_builtin(func: str) -> tuple[str, str] | None:
    """File reads and waits among built-ins ("<built-in method time.sleep>", ...)."""
    if func in ("<built-in method io.open>", "<built-in method _io.open>") or (
            func.startswith(("<method 'read", "<method 'readinto'"))
            and ("_io.Buffered" in func or "_io.FileIO" in func)):
        return "file read", "read"
    for needle, label in WAITS:
        if needle in func and (needle != "acquire" or "lock" in func.lower()):
            return f"waiting ({label})", "wait"
    return None


def _pil_format(stats: dict[Key, Any]) -> str:
    """"JPEG" when PIL's JPEG plugin ran, "PNG" for its PNG plugin, else "image"."""
    files = {os.path.basename(k[0]) for k in stats}
    return next((f for f in ("JPEG", "PNG") if f"{f.title()}ImagePlugin.py" in files), "image")


@functools.lru_cache(maxsize=256)
def _classes(file: str) -> dict[int, str]:
    """Line (of a def, or of its first decorator) -> enclosing class name, for one source file
    (pstats knows only file, line and function name; parsed once per file)."""
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    lines: dict[int, str] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for lineno in [fn.lineno, *(d.lineno for d in fn.decorator_list)]:
                    lines[lineno] = cls.name
    return lines


@functools.lru_cache(maxsize=4096)
def _is_user(file: str) -> bool:
    """The user's own code: a real file outside stdlib, site-packages, autotune and this module."""
    path = os.path.realpath(file)
    return not (file == "~" or file.startswith("<") or path.startswith((*_LIB_ROOTS, _AUTOTUNE))
                or "site-packages" in path or "dist-packages" in path)


def _user_name(key: Key) -> str:
    cls = _classes(key[0]).get(key[1])
    return f"{cls + '.' if cls else ''}{key[2]} ({os.path.basename(key[0])}:{key[1]})"


def _where(key: Key, stats: dict[Key, Any]) -> str:
    """"path:line (function)"; for a built-in (no source), the code that called it most."""
    if key[0] == "~" and stats[key][4]:
        caller = max(stats[key][4].items(), key=lambda item: item[1][3])[0]
        return f"{_short(caller[0])}:{caller[1]} ({caller[2]})"
    return f"{_short(key[0])}:{key[1]} ({key[2]})"


def _short(file: str) -> str:
    """Library paths from their package (".../site-packages/PIL/x.py" -> "PIL/x.py")."""
    return re.split(r"(?:site|dist)-packages/", file, maxsplit=1)[-1]


def _code_key(fn: Any) -> Key | None:
    """The pstats key of a Python callable (a function, a partial, an object's __call__)."""
    fn = getattr(fn, "func", fn)  # functools.partial
    code = getattr(fn, "__code__", None)
    if code is None and fn is not None:
        code = getattr(type(fn).__call__, "__code__", None)  # a callable object
    return (code.co_filename, code.co_firstlineno, code.co_name) if code else None
