"""The submission: the point to submit, its folder in the organisers' format, and that folder booted.

    _choose     the VERIFIED point of the highest claim (``choose``)
    _claimfile  claim.json, typed and versioned (``ClaimFile``): written by the folder, read by the check,
                the folder's README and the dashboards
    _write      a study's evidence -> its folder (``submit_study``)
    _folder     the folder: manifest.json, serve.py and the launch it reads, the stack's files, claim.json
    _check      the folder booted as the organisers' harness runs it, timed with their client

``python -m sweep.submit`` is its command.
"""

from sweep.submission._check import CheckOptions, check_folder
from sweep.submission._choose import NothingToSubmit, choose
from sweep.submission._claimfile import CLAIM_FILE, ClaimFile, read_claim
from sweep.submission._folder import write_submission
from sweep.submission._write import Submitted, submit_study

__all__ = [
    "CLAIM_FILE",
    "CheckOptions",
    "ClaimFile",
    "NothingToSubmit",
    "Submitted",
    "check_folder",
    "choose",
    "read_claim",
    "submit_study",
    "write_submission",
]
