"""The driver: runs the study in the user's process, never touching CUDA.

The study's order, top to bottom, is ``run.run_study``, over four rooms and what they share:

- ``loop``: the search (``loop.driver.Driver``: ask -> run one window in a subprocess -> tell,
  with the ``pruning`` pruner, the ``agent``'s proposals, ``ownership`` among workers, the
  ``race`` of the finalists so far, the ``budget`` of study.time_budget_s, ``failfast`` for a
  baseline that cannot train, and the ``same_training`` trial after it);
- ``confirmation``: the finalists and the baseline measured again in rounds (``confirm``), the
  choice among them (``choose``) and what the rounds say while they run (``words``);
- ``checks``: what is checked of the configuration to export (``numerics``: its first losses
  against the user's; ``scaling``: as one rank beside all);
- ``console``: what the study says it will cost (``cost``), its live view (``progress``) and
  its summary (``summary``).

Shared below them: the study's definition (``setup``), the pruner (``pruning``), the objective's
units (``units``), a window beside other work (``contended``) and the rounds' expected spread
(``round_spread``). Dependencies point down that list (pyproject.toml's import contracts):
``run`` > ``loop`` > ``console`` > ``checks`` > ``confirmation`` > the shared modules. The exports,
report and comparison come from ``autotune.results``; ``autotune verify`` is
``autotune.production.verify``.
"""
