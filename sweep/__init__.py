"""The orchestrator: study specs, the ask/tell core and driver, Ray workers, storage, the front.

    judgement     the gate, feasibility, early stops, the noise-aware front, the organisers' 5% rule: the rules
                  every reader judges by
    spec          studies/<name>.toml -> StudySpec (validated before anything boots)
    sampling      the study's Optuna sampler and one trial's knob values
    record        TrialRecord: one trial attempt, its judgement (gate, identity, feasibility)
    core          the ask/tell core: open/resume, baseline, ask, close (store, re-queue, tell)
    storage       the database: Optuna's RDB storage + the project's tables (SQLite, WAL)
    identity      generated token ids, packed, and how many prompts differ
    worker        the Ray actor running one trial at a time; reaper: its engine watchdog
    cluster       the Ray session (joined, or a private local one)
    driver        the core driven over Ray workers; console: what it prints
    run           ``python -m sweep.run``; dryrun: ``--dry-run``; exports: the dashboards' command after a run
    boots         BootRecord: one fresh boot of a promotion, verification or calibration; booter: runs them
    promotion     the best configurations re-booted after the search
    claims/       the claims wing: the plan, the estimator, the verdict, load_evidence, ``python -m sweep.claims``
    verify        ``python -m sweep.verify``: fresh boots of the best claims, judged
    submission    the point to submit; folder: its folder; check: booting it as the organisers do;
                  submit: ``python -m sweep.submit``

Modules are imported one by one (``from sweep.spec import load_study``): importing the package
does not pull in Ray or Optuna. Nothing here imports ``dashboards``: they read what this writes.
"""
