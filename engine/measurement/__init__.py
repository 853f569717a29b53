"""What a measurement gives, as plain data: a trial's figures and outcome, a serving load level, its PPL by context
length, and the stages a first timed run is cut into with what they exchange with the checkpoint.

JSON-friendly dataclasses without the HTTP client, so that a Ray worker returns them, the driver stores and plans
with them, and every reader takes them without importing the benchmark.
"""

from engine.measurement._lengths import LengthBucket, bucket_bounds, bucket_label, by_length
from engine.measurement._loadlevel import LoadLevel, LoadRequest, Percentiles
from engine.measurement._measurement import SUMMARY, Measurement, TrialOutcome, TrialStatus
from engine.measurement._stages import Checkpoint, Partial, Stages, Stop

__all__ = [
    "SUMMARY",
    "Checkpoint",
    "LengthBucket",
    "LoadLevel",
    "LoadRequest",
    "Measurement",
    "Partial",
    "Percentiles",
    "Stages",
    "Stop",
    "TrialOutcome",
    "TrialStatus",
    "bucket_bounds",
    "bucket_label",
    "by_length",
]
