"""best.yaml in the user's own training: ``best`` reads it (``load_best``, ``BestConfig``),
``environment_check`` warns where this machine is not the measured one, ``runtime`` hands the
user's loader, model and optimizer the measured knobs through ``autotune.core.training``, and
``meter`` checks that the run gets the measured speed. The framework adapters
(``autotune.adapters``) are the same layer for Lightning and Transformers users.
"""
