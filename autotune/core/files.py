"""Writing a file so that a reader never sees half of it: temp file in the same folder, then
rename. Used for every export (an interrupted export keeps the previous file), the trial's
result and its heartbeat (the watchdog reads them while they are rewritten)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, text: str | bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` (or bytes) in one rename. ``durable``: fsync before the rename (an
    export must survive a power cut); a heartbeat rewritten four times a second needs only
    atomicity. The file gets the permissions the umask allows (exports are shared)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
