"""Workloads shipped with autotune; each module exposes one ``Workload`` subclass."""
