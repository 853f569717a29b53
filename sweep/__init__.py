"""The orchestrator, in floors: each imports only those below it (``tests/test_public.py`` holds it so).

    judgement     the rules every reader judges by: the gate, feasibility, the noise-aware front, the
                  organisers' 5% rule, the defaults of the odds a claim must reach and the noise floor
    store/        what every stage writes and reads: TrialRecord, BootRecord, StudyRecord, the database
    search/       the search: a study's trials proposed, booted once each and told (``python -m sweep.run``)
    claims/       the answers: the best configurations re-booted afresh (promotion, verification,
                  calibration, through one runner of fresh boots), the claim and its odds, the verdicts
    submission/   the point to submit, its folder in the organisers' format, that folder booted
    run           ``python -m sweep.run``: the search, then its promotion
    verify        ``python -m sweep.verify``: fresh boots of the best claims, judged
    submit        ``python -m sweep.submit``: write the submission folder, or check one
    interrupts    SIGTERM as Ctrl-C, for every command
    runs          ``RUN_DIR``: where every command keeps what it runs

Each package's ``__init__`` is its public face; its modules (``_name``) are its own. Nothing here
imports ``dashboards``: they read what this writes.
"""
