"""The logs of trials an earlier driver did not see finish, scrubbed before a study goes on.

A stack's log goes to disk scrubbed (``engine.logpipe``), but a log written by an older version,
or by a worker killed while a line was half written, may not be: a driver SIGKILLed, a node lost,
Ctrl-C. So a starting driver first scrubs the log of every trial folder of the study whose record
is missing or failed, with the secrets a stack of the study's manifest could have echoed (its env
and argv, over the driver's own environment: ``engine.secrets.Scrubber.for_stack``). A measured
trial's log came back through the worker, already scrubbed, and is not read again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from engine.secrets import Scrubber
from sweep.record import TrialRecord

__all__ = ["scrub_unfinished_logs"]

_TRIAL_FOLDER = re.compile(r"trial-(\d+)")  # the driver's folder for trial N: trial-NNNN


def scrub_unfinished_logs(study_dir: Path, records: Iterable[TrialRecord], scrub: Scrubber) -> list[Path]:
    """Scrub ``engine.log`` in every trial folder of ``study_dir`` whose record is missing or
    failed; returns the logs that held something to scrub."""
    finished = {r.trial_number for r in records if r.status != "failed"}
    scrubbed = []
    for log in sorted(Path(study_dir).glob("trial-*/engine.log")):
        match = _TRIAL_FOLDER.fullmatch(log.parent.name)
        if match and int(match[1]) not in finished and scrub.file(log):
            scrubbed.append(log)
    return scrubbed
