"""Ending a process that holds a whole study's heap without the interpreter's teardown.

After a study the heap holds some 360,000 objects (torch, optuna, plotly), and Python's final
garbage collection over them (``finalize_modules``, seen with gdb) took 2.5-3.1 s of a 16 s
one-trial study on this project's 2-vCPU VM: seconds every command, test and nightly run paid
for nothing. A ``workers=N`` worker process holds the same kind of heap and ends this way too
(its own teardown not timed). The atexit handlers (logging, multiprocessing's
children, temporary files) still run, and stdio is flushed; everything a study writes (its
storage committed, its exports closed) is closed by then.

``autotune verify``'s sides end this way for another reason: a gloo rank's teardown can race
gloo's own threads and abort the rank after a complete run (production/parity.py).
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def quick_exit(code: int | str | None) -> NoReturn:
    """``sys.exit(code)``'s outcome, without the final garbage collection."""
    if isinstance(code, str):  # sys.exit("message") prints it, as the interpreter would
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
