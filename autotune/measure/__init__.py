"""One trial's measured window, and the process boundary it crosses.

CHILD side (runs in the trial's own process): ``window`` (build, warm up, measure, profile),
``ceilings`` (the loader alone, the step alone), ``readings`` (heartbeat, memory, CPU time),
``profiling`` (the torch.profiler capture), ``clock`` and ``batches`` (what the window times
with and feeds from), ``losses`` (a numerics request's first N losses).

PARENT side (runs in the driver): ``runner`` (subprocess + watchdog, classifies the end) and
``launch`` (the fork server). ``launch`` enters the child side at fork time (``window.main``):
the one declared import from parent to child (pyproject.toml's import contracts).

``protocol`` is the boundary itself: ``TrialRequest`` and ``WindowResult``, both plain data
that serialize themselves, the outcome names and the out-of-memory markers both sides read.
"""
