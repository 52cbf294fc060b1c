"""The benchmarks behind docs/benchmarks.md, run from the repository's root as
``python -m benchmarks.<name>``. Not shipped: the wheel holds autotune alone (pyproject.toml)."""
