"""How a run ends on an error: a usage error as one paragraph and exit 2 (``fail``); an
unexpected error in the driver as one readable paragraph and a traceback file (``explain``).

A cron job's log should say what failed, where, where the full traceback is, and that the
study is intact and resumes; not a wall of frames (seen on a GPU machine whose working
directory was removed under a running study). The traceback goes to a file in the study's
folder (``errors/``), or to the temporary directory when that folder is gone or unwritable.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from autotune.results.storage import password_of, redact


class UsageError(ValueError):
    """A wrong override, workload, knob value or storage: one paragraph, exit code 2."""


def fail(message: str, code: int = 2) -> None:
    """A usage error: one paragraph on stderr, then exit ``code`` (2), nothing touched."""
    print(f"autotune: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


def write_traceback(exc: BaseException, out_dir: Path | None, secret: str | None) -> Path | None:
    """The full traceback, password removed, in out_dir/errors/ or else the temp dir."""
    text = "".join(traceback.format_exception(exc))
    if secret:
        text = text.replace(secret, "***")
    name = f"driver-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    candidates = [out_dir / "errors"] if out_dir is not None else []
    candidates.append(Path(tempfile.gettempdir()) / "autotune-errors")
    for folder in candidates:
        try:
            folder = folder.absolute()  # raises if the working directory itself is gone
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            path.write_text(text)
            return path
        except OSError:
            continue
    return None


def where(exc: BaseException) -> str:
    """The innermost frame in autotune's own code, and the autotune frame that called it (a
    shared helper such as the atomic write says little alone): ``file:line (function)``."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}autotune{os.sep}" in f.filename] or frames
    if not ours:
        return "unknown place"
    return ", called from ".join(_frame(f) for f in reversed(ours[-2:]))


def _frame(f: traceback.FrameSummary) -> str:
    short = f.filename.split(f"{os.sep}autotune{os.sep}")[-1]
    place = f"autotune/{short}" if short != f.filename else f.filename
    return f"{place}:{f.lineno} ({f.name})"


def explain(exc: BaseException, out_dir: Path | None, storage_url: str | None) -> int:
    """Print the paragraph, write the traceback; return the exit code (1)."""
    secret = password_of(storage_url) if storage_url else None
    path = write_traceback(exc, out_dir, secret)
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    if secret:
        what = what.replace(secret, "***")
    saved = (f"the full traceback is in {path}" if path else
             "the traceback could not be written anywhere (no writable folder)")
    print(f"autotune: error: the study driver failed unexpectedly: {what}, in {where(exc)}; "
          f"{saved}. Finished trials are kept in {redact(storage_url) or 'the storage'}; a trial "
          "cut off by this error is recorded as failed (driver_error) and its configuration runs "
          "again: fix the cause and run the same command again to resume.",
          file=sys.stderr)
    return 1
