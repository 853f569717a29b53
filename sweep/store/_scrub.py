"""The boot logs an earlier run did not see finish, scrubbed before a study goes on.

A stack's log goes to disk scrubbed (``engine.launch.LogPipe``), but a log written by an older version,
or by a worker killed while a line was half written, may not be: a driver SIGKILLed, a node lost,
Ctrl-C. So a starting driver, and a starting run of boots (a promotion, a verification, a
calibration), first scrubs every boot log of the study whose result is missing or failed, with the
secrets a stack of the study's manifest could have echoed (its env and argv, over this process's own
environment: ``engine.secrets.Scrubber.for_stack``):

    <run dir>/<study>/trial-NNNN/engine.log                                a trial of the sweep
    <run dir>/<kind>/<study>/<run id>/boot-NNN-trial-NNNN/engine.log       a boot of a run of that kind
                                                                           (``sweep.store.BOOT_TABLES``)

A measured trial's or boot's log came back through its worker, already scrubbed, and is not read again.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.secrets import Scrubber
from sweep.store._database import BOOT_TABLES, Storage

__all__ = ["scrub_unfinished_logs"]

_TRIAL_FOLDER = re.compile(r"trial-(\d+)")  # the driver's folder for trial N: trial-NNNN
_BOOT_FOLDER = re.compile(r"boot-(\d+)-trial-\d+")  # sweep.claims's folder for the run's boot N


def scrub_unfinished_logs(run_dir: Path, study: str, storage: Storage, scrub: Scrubber) -> list[Path]:
    """Scrub ``engine.log`` in every trial and boot folder of ``study`` under ``run_dir`` whose stored
    result is missing or failed; returns the logs that held something to scrub."""
    finished = {r.trial_number for r in storage.records(study, token_ids=False) if r.status != "failed"}
    logs = [
        log
        for log in sorted((run_dir / study).glob("trial-*/engine.log"))
        if (match := _TRIAL_FOLDER.fullmatch(log.parent.name)) and int(match[1]) not in finished
    ]
    for kind in BOOT_TABLES:
        measured = {(b.run_id, b.order) for b in storage.boots(kind, study) if b.measured}
        logs += [
            log
            for log in sorted((run_dir / kind / study).glob("*/boot-*/engine.log"))
            if (match := _BOOT_FOLDER.fullmatch(log.parent.name))
            and (log.parent.parent.name, int(match[1])) not in measured
        ]
    return [log for log in logs if scrub.file(log)]
