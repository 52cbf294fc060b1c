"""Pure analysis, no torch: a trial's measurements and profiler trace summary → a named
bottleneck, its evidence, and the knob changes that address it (GPU-profiling guides' symptom →
cause → fix tables). ``trace_events`` parses a Chrome trace and ``trace_summary`` sums its steps;
``evidence`` reads a trial's numbers and ``verdicts`` names the bottleneck; ``fixes`` says
what to try; ``thresholds`` holds every number with the note it comes from.
"""

from autotune.diagnose.verdicts import diagnose

__all__ = ["diagnose"]
