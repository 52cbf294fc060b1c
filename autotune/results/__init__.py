"""What a study hands back, read from the stored study alone (any storage, any time).

``trials`` is the one definition of which trials are feasible, clean, refused, finalists and
best; ``export`` writes best.yaml and trials.csv (``hydra_export`` its Hydra and override
forms, framework files through the workload); ``report_data``/``report_html`` the report;
``compare`` the nightly comparison; ``compile_cost`` what torch.compile costs against what it
buys; ``storage`` opens the study's database (URLs, redaction, a clear error when it does not
answer). Nothing here runs a trial.
"""
