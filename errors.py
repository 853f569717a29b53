"""The project's one exception tree: every error raised on purpose is one of these.

    GemmaSweepError
    ├── ConfigError               input a user wrote is wrong; nothing has booted (CLIs: exit 2)
    │   ├── UsageError            command-line arguments that contradict each other
    │   ├── ManifestError         a manifest.json that does not validate
    │   ├── KnobError             unknown knob, knob not consumed, value out of range or not a choice
    │   ├── StudySpecError        a study .toml or a benchmark profile that does not validate
    │   ├── StudyMismatchError    a study stored under this name was measured another way
    │   ├── DataError             a prompt set, PPL reference set or recorded grid that does not load
    │   ├── StorageError          a database URL that is not one, or names no database file
    │   ├── StudyNotFoundError    no study of that name in the database
    │   ├── NoCompletedTrialsError  the study has no measured trial to chart or verify
    │   ├── ClusterError          a Ray cluster that cannot be joined, or has no node for a trial
    │   └── BrowserNotFoundError  no Chromium to render PNG/SVG exports with
    ├── EngineError               a serving stack misbehaved at run time: a FAILED trial, never a crash
    │   ├── EngineBootError       could not start, exited during boot, never became ready
    │   ├── BenchmarkError        answered badly (HTTP error, malformed JSON, died mid-run)
    │   └── EngineStopError       its process group survived SIGKILL
    ├── SweepStopped              the study cannot go on; what was measured is stored (exit 1)
    │   ├── BaselineFailed        the baseline failed for good, and the gate is relative to it
    │   └── WorkerSetupFailed     a Ray worker could not start: every trial would fail alike
    ├── ImageRenderError          Chromium was found but failed to render an export
    ├── InstallError              ``python -m engine.install`` could not set up an environment
    └── SweepRunError             a benchmark's own ``python -m sweep.run`` child failed

Every message names the file, field, knob, process or URL it is about. ``EngineError`` carries
the stack's last log lines (``log_tail``). Programming errors (an API called out of order)
stay Python's own ``RuntimeError`` / ``ValueError``.
"""

from __future__ import annotations

__all__ = [
    "BaselineFailed",
    "BenchmarkError",
    "BrowserNotFoundError",
    "ClusterError",
    "ConfigError",
    "DataError",
    "EngineBootError",
    "EngineError",
    "EngineStopError",
    "GemmaSweepError",
    "ImageRenderError",
    "InstallError",
    "KnobError",
    "ManifestError",
    "NoCompletedTrialsError",
    "StorageError",
    "StudyMismatchError",
    "StudyNotFoundError",
    "StudySpecError",
    "SweepRunError",
    "SweepStopped",
    "UsageError",
    "WorkerSetupFailed",
]


class GemmaSweepError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(GemmaSweepError):
    """Input written by a user is wrong; nothing has been started."""


class UsageError(ConfigError):
    pass


class ManifestError(ConfigError):
    pass


class KnobError(ConfigError):
    pass


class StudySpecError(ConfigError):
    pass


class StudyMismatchError(ConfigError):
    pass


class DataError(ConfigError):
    pass


class StorageError(ConfigError):
    pass


class StudyNotFoundError(ConfigError):
    pass


class NoCompletedTrialsError(ConfigError):
    pass


class ClusterError(ConfigError):
    pass


class BrowserNotFoundError(ConfigError):
    pass


class EngineError(GemmaSweepError):
    """A serving stack misbehaved. ``log_tail`` carries the last lines of its log."""

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class EngineBootError(EngineError):
    pass


class BenchmarkError(EngineError):
    pass


class EngineStopError(EngineError):
    pass


class SweepStopped(GemmaSweepError):
    """The study cannot go on; what was measured is stored and the same command resumes."""


class BaselineFailed(SweepStopped):
    pass


class WorkerSetupFailed(SweepStopped):
    pass


class ImageRenderError(GemmaSweepError):
    pass


class InstallError(GemmaSweepError):
    pass


class SweepRunError(GemmaSweepError):
    pass
