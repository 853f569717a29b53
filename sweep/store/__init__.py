"""What every stage writes and reads: the trial and boot records, and the database that keeps them.

    _trial      TrialRecord: one trial attempt
    _judge      its judgement (``Judge``: gate, identity, feasibility) and the gate's PPL limit on a set of
                references, by one rule for which baseline PPL applies (``ppl_limit``)
    _identity   generated token ids, packed, and how many prompts differ
    _study      StudyRecord: what a study stores beside Optuna's own, read and written there alone; a
                queued trial's marks (``TrialMarks``)
    _plan       PromotionPlan, ConfirmationPlan, ClientOffset: what the claims store in that record
    _boot       BootRecord: one fresh boot of a promotion, confirmation, verification or calibration
    _database   the database: Optuna's RDB storage and the project's tables (SQLite, WAL)
    _url        a storage URL as it may be shown, and the password kept out of it
    _scrub      the boot logs an earlier run did not see finish, scrubbed before a run goes on

The search (``sweep.search``) stores trials, the claims (``sweep.claims``) boots; the submission and the
dashboards read both. Nothing here imports the stages above it.
"""

from sweep.store._boot import BootKind, BootRecord, boot_record
from sweep.store._database import DEFAULT_STORAGE_URL, Storage, StudyRecords, open_existing, open_storage
from sweep.store._judge import Judge, baseline_ppls, ppl_limit, scores_sweep_references
from sweep.store._plan import ClientOffset, ConfirmationPlan, PromotionPlan
from sweep.store._scrub import scrub_unfinished_logs
from sweep.store._study import (
    RECORD_VERSION,
    StudyRecord,
    TrialMarks,
    read_record,
    trial_marks,
    write_record,
    write_trial_figures,
)
from sweep.store._trial import (
    FailKind,
    TrialRecord,
    failure_record,
    outcome_record,
    reused_record,
    same_profile,
)
from sweep.store._url import password_note, shown_url

__all__ = [
    "DEFAULT_STORAGE_URL",
    "RECORD_VERSION",
    "BootKind",
    "BootRecord",
    "ClientOffset",
    "ConfirmationPlan",
    "FailKind",
    "Judge",
    "PromotionPlan",
    "Storage",
    "StudyRecord",
    "StudyRecords",
    "TrialMarks",
    "TrialRecord",
    "baseline_ppls",
    "boot_record",
    "failure_record",
    "open_existing",
    "open_storage",
    "outcome_record",
    "password_note",
    "ppl_limit",
    "read_record",
    "reused_record",
    "same_profile",
    "scores_sweep_references",
    "scrub_unfinished_logs",
    "shown_url",
    "trial_marks",
    "write_record",
    "write_trial_figures",
]
