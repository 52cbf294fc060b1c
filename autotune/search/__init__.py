"""The driver: runs the study in the user's process, never touching CUDA.

The study's order, top to bottom, is ``run.run_study``: the search (``study.Driver``: ask →
run one window in a subprocess → tell, with the ``pruning`` pruner, the ``agent``'s proposals
and ``ownership`` among workers), then ``confirm`` (re-run the finalists and the baseline),
then ``numerics`` (each finalist's first losses against the user's), then the exports,
``summary`` and the report and comparison from ``autotune.results``. ``failfast`` stops a
study whose baseline cannot train; ``progress`` is its live view.
"""
