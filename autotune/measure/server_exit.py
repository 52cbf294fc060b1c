"""Imported in the trials' fork server only (launch.PRELOAD, last): when the driver exits, the
server ends without the interpreter's teardown.

The server holds the driver's stdout and stderr, so whatever reads them (a shell pipe, a CI
log, a test's ``subprocess.run``) sees their end only when the server is gone, and the
server's interpreter, torch and torchvision imported, took 1.3 s to end after the driver
had (on this project's 2-vCPU VM; 0.1 s with this handler, benchmarks/cli_overhead.py).
Nothing in it needs a teardown: it never runs a torch op, and its children (trials, probes)
are separate processes that end with ``os._exit`` as multiprocessing's children do, never
through these handlers.
"""

from __future__ import annotations

import atexit
import os

_SERVER_PID = os.getpid()


def _end_now() -> None:
    if os.getpid() == _SERVER_PID:  # never a forked child, whatever it inherited
        os._exit(0)


atexit.register(_end_now)
