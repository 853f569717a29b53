"""The submission: the point to submit, its folder in the organisers' format, and that folder booted.

    _choose     the VERIFIED point of the highest claim (``choose``)
    _folder     the folder: manifest.json, serve.py and the launch it reads, the stack's files, claim.json
    _check      the folder booted as the organisers' harness runs it, timed with their client

``python -m sweep.submit`` is its command.
"""

from sweep.submission._check import CheckOptions, check_folder
from sweep.submission._choose import NothingToSubmit, choose
from sweep.submission._folder import write_submission

__all__ = [
    "CheckOptions",
    "NothingToSubmit",
    "check_folder",
    "choose",
    "write_submission",
]
