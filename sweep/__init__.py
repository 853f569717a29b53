"""The orchestrator: study specs, the ask/tell driver, Ray workers, storage, the Pareto front.

    spec        studies/<name>.toml -> StudySpec (validated before anything boots)
    sampling    the study's Optuna sampler and one trial's knob values
    storage     the database: Optuna's RDB storage + the project's tables (SQLite, WAL)
    ledger      outcome -> stored row -> Optuna; reconcile, re-queue and budget rules
    identity    generated token ids, packed, and the greedy-identity comparison
    pareto      the feasible TPS-vs-PPL front (pure)
    worker      the Ray actor running one trial at a time; reaper: its engine watchdog
    cluster     the Ray session (joined, or a private local one)
    driver      the ask/tell loop; console: what it prints
    run         ``python -m sweep.run``; dryrun: ``--dry-run``; exports: dashboards after a run

Modules are imported one by one (``from sweep.spec import load_study``): importing the package
does not pull in Ray or Optuna.
"""
