"""The submission: the point to submit, its folder in the organisers' format, and that folder booted.

    _choose     the VERIFIED point of the highest claim (``choose``)
    _claimfile  claim.json, typed and versioned (``ClaimFile``): written by the folder, read by the check,
                the folder's README and the dashboards
    _write      a study's evidence -> its folder (``submit_study``)
    _folder     the folder: manifest.json, serve.py and the launch it reads, the stack's files, claim.json
    _pins       the folder's dependencies: exactly what the trials ran, as an index (or the folder) serves it
    _paths      the write-time rule: no file of the folder names a path of this machine outside it
    _check      the folder booted as the organisers' harness runs it, timed with their client
    _install    the fresh check's install (a clean environment; a wheelhouse, no index) and the wheelhouse
    _sandbox    the isolated view of this machine the fresh check boots the folder in

``python -m sweep.submit`` is its command.
"""

from sweep.submission._check import CheckOptions, check_folder
from sweep.submission._choose import NothingToSubmit, choose
from sweep.submission._claimfile import CLAIM_FILE, ClaimFile, read_claim
from sweep.submission._folder import read_dependencies, write_submission
from sweep.submission._install import collect_wheels
from sweep.submission._write import Submitted, submit_study

__all__ = [
    "CLAIM_FILE",
    "CheckOptions",
    "ClaimFile",
    "NothingToSubmit",
    "Submitted",
    "check_folder",
    "choose",
    "collect_wheels",
    "read_dependencies",
    "read_claim",
    "submit_study",
    "write_submission",
]
