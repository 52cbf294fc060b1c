"""Study storage: URLs, their secrets, and a clear error when the database does not answer.

SQLite (the default) is for one worker; PostgreSQL/MySQL (Optuna's RDB storage) for many;
``journal:PATH`` selects Optuna's journal file storage, which also takes several workers on
one machine.
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any

import optuna

ENV_VAR = "AUTOTUNE_STORAGE"


class StorageError(RuntimeError):
    """The storage URL is unusable; the message never contains its password."""


def redact(url: str | None) -> str:
    """The URL with any password replaced by ***, safe for logs, exports and errors."""
    if not url:
        return ""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", str(url))


def resolve_url(configured: str | None, default_path: Path) -> str:
    url = configured or os.environ.get(ENV_VAR)
    if url:
        return url
    default_path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{default_path}"


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def open_storage(url: str) -> Any:
    """An Optuna storage for the URL, connected now so a dead server fails here, clearly."""
    if url.startswith("journal:"):
        path = url[len("journal:"):].removeprefix("//")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        repair_torn_journal(Path(path))
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(path))
        except Exception as exc:  # noqa: BLE001
            raise StorageError(f"journal storage {path!r} could not be opened: {exc}") from None
    for attempt in range(6):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy/driver errors vary by backend
            # Workers started together on an empty database race to create its tables (so does a
            # reader such as the report opening a study being created); the losers see a
            # unique-key violation or an existing table and retry against the finished schema.
            if attempt < 5 and _is_schema_race(exc):
                time.sleep(0.5 + random.random() * 2)
                continue
            raise StorageError(_explain(url, exc)) from None
    raise AssertionError("unreachable")


def _is_schema_race(exc: Exception) -> bool:
    text = str(exc)
    return any(sign in text for sign in ("UniqueViolation", "duplicate key", "already exists",
                                         "UNIQUE constraint failed"))


def repair_torn_journal(path: Path) -> Path | None:
    """A writer killed mid-append leaves a last line without its newline. Optuna skips it on
    read, but the next append would glue a good record onto it and break every later read.
    Move the torn bytes aside (``<file>.torn-<offset>``) and truncate to the last full line."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
        cut = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        f.seek(cut)
        torn = f.read()
        aside = path.with_name(f"{path.name}.torn-{cut}")
        aside.write_bytes(torn)
        f.truncate(cut)
    import logging

    logging.getLogger("autotune").warning(
        "journal %s ended in a torn record (%d bytes, a writer died mid-append): moved to %s",
        path, len(torn), aside)
    return aside


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("postgresql") or url.startswith("mysql"):
        # Fail in seconds, not minutes, when the server does not answer; recycle dead sockets.
        return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    if is_sqlite(url):
        return {"connect_args": {"timeout": 60}}
    return {}


def _explain(url: str, exc: Exception) -> str:
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        where = f"{parsed.drivername} server at {parsed.host or 'localhost'}:{parsed.port or 'default port'}, database {parsed.database!r}"
    except Exception:  # noqa: BLE001
        where = "the storage"
    detail = " ".join(str(exc).split())
    detail = detail.replace(url, redact(url))
    password = password_of(url)
    if password:
        detail = detail.replace(password, "***")
    detail = detail.split("(Background on this error")[0][:400]
    if isinstance(exc, ImportError):
        return _missing_driver(url, where, exc)
    return (
        f"Could not open study storage {redact(url)} ({where}): {detail}. "
        "Check that the server is running and reachable, the database exists and the user may "
        "connect; or use the default SQLite file by leaving study.storage unset. No study data "
        "was changed."
    )


def _missing_driver(url: str, where: str, exc: ImportError) -> str:
    """SQLAlchemy found no module for the URL's driver. Telling that user to check the server
    (the message for a server that does not answer) sends them to the wrong machine."""
    cause = exc.__cause__ or exc.__context__
    module = getattr(cause, "name", None) or "its driver module"
    scheme = url.split("://", 1)[0]
    install = ("pip install 'autotune[postgres]' (psycopg 3; then write the URL as "
               "postgresql+psycopg://...)" if scheme.startswith("postgresql")
               else f"install the Python driver SQLAlchemy expects for {scheme!r}")
    return (
        f"Could not open study storage {redact(url)} ({where}): the database driver is not "
        f"installed in this Python (no module named {module!r}). To use it, {install}; or "
        "use the default SQLite file by leaving study.storage unset. No study data was changed."
    )


def password_of(url: str) -> str | None:
    m = re.search(r"://[^:/@]*:([^@]*)@", url)
    return m.group(1) if m else None
