"""What the console shows at a glance, and where the rest of a study's words go.

A study says two kinds of things. What a person watching needs at a glance (is it running,
how long, what is best so far, what to apply, what it changes in training) is ``say``-ed: it
reaches the console at the default verbosity, in lines of at most ``WIDTH`` characters. The
rest (why each knob is fixed, each trial's knobs and diagnosis, the agent's reasoning, the
estimate's arithmetic, the confirmation's statistics) is ``detail``: written to the study
folder's ``autotune.log`` always, and to the console with ``-v`` (or ``AUTOTUNE_VERBOSE=1``).
Before 2026-12-06 everything was printed: the README's 12-trial study printed 20.8 kB in 117
lines, 72 of them over 120 characters (docs/benchmarks.md "The console at a glance").

It is one logging level (``DETAIL``, between DEBUG and INFO) on the ``autotune`` logger, so
a caller's own logging set-up (a notebook's, a training script's) keeps working, and
pytest's caplog reads both kinds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

DETAIL = 15
logging.addLevelName(DETAIL, "DETAIL")

#: The widest line the console prints at the default verbosity.
WIDTH = 120
#: The study folder's log: every line of every run of the study, details included, appended.
LOG_FILE = "autotune.log"

log = logging.getLogger("autotune")


def say(msg: str, *args: object) -> None:
    """A line a person watching needs: printed at the default verbosity."""
    log.info(msg, *args)


def detail(msg: str, *args: object) -> None:
    """A line kept for reading later: in autotune.log, and on the console with -v."""
    log.log(DETAIL, msg, *args)


def verbose() -> bool:
    """Whether the details reach the console too (``autotune -v``, or AUTOTUNE_VERBOSE=1)."""
    return os.environ.get("AUTOTUNE_VERBOSE", "").strip().lower() not in ("", "0", "false", "no")


def fit(text: str, width: int = WIDTH) -> str:
    """One line of at most ``width`` characters: what does not fit is cut, marked by '...'."""
    text = " ".join(text.split()) if "\n" in text else text.rstrip()
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def fit_items(items: list[str], room: int, sep: str = " ") -> str:
    """As many of ``items`` as ``room`` characters hold, and "+N more" for the rest."""
    out: list[str] = []
    for i, item in enumerate(items):
        more = f"{sep}+{len(items) - i - 1} more" if i < len(items) - 1 else ""
        if len(sep.join([*out, item])) + len(more) > room:
            return sep.join([*out, f"+{len(items) - i} more"])
        out.append(item)
    return sep.join(out)


class _Wrapped(logging.Formatter):
    """The console's lines wrapped at WIDTH, under their own indentation, at the default
    verbosity: a warning that is a paragraph (a tracker not reachable, a refused finalist)
    stays readable in a 120-column terminal. An error paragraph printed to stderr stays one
    line, as the log file's lines do, so that grep finds its words together."""

    def format(self, record: logging.LogRecord) -> str:
        lines = []
        for line in super().format(record).splitlines() or [""]:
            if len(line) <= WIDTH:
                lines.append(line)
                continue
            indent = line[: len(line) - len(line.lstrip())]
            lines += textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ",
                                   break_on_hyphens=False, break_long_words=True)
        return "\n".join(lines)


def _console_handlers() -> list[logging.Handler]:
    """The plain stream handlers that print to a terminal or a pipe (Hydra's console handler,
    the Python API's): not files, not pytest's capture."""
    handlers = [*logging.getLogger().handlers, *log.handlers]
    return [h for h in handlers if type(h) is logging.StreamHandler]


@contextlib.contextmanager
def study_log(out_dir: Path | None) -> Iterator[None]:
    """For one study's run: the console at a glance (or everything with -v) and the study
    folder's autotune.log with every line. Handlers, levels and formatters are put back."""
    saved = [(h, h.level, h.formatter) for h in _console_handlers()]
    old_level = log.level
    log.setLevel(DETAIL)
    for h, _, formatter in saved:  # -v: the lines as the log file has them, for grep
        h.setLevel(DETAIL if verbose() else logging.INFO)
        if not verbose():
            h.setFormatter(_Wrapped(formatter._fmt if formatter else "%(message)s"))
    file: logging.Handler | None = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        file = logging.FileHandler(out_dir / LOG_FILE, mode="a", encoding="utf-8")
        file.setLevel(DETAIL)
        file.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(file)
    try:
        yield
    finally:
        if file is not None:
            log.removeHandler(file)
            file.close()
        for h, level, formatter in saved:
            h.setLevel(level)
            h.setFormatter(formatter)  # type: ignore[arg-type]
        log.setLevel(old_level)
