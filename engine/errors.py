"""The project's one exception tree.

    GemmaSweepError
    ├── ConfigError            bad input a user wrote: caught before anything boots
    │   ├── ManifestError      a manifest.json that does not validate
    │   ├── KnobError          unknown knob, knob not consumed, out-of-range value
    │   ├── StudySpecError     a study .toml that does not validate
    │   └── DataError          a prompt set or PPL reference file that does not load
    ├── EngineError            a stack that misbehaved at run time: becomes a FAILED trial
    │   ├── EngineBootError    exited during boot, or never became ready
    │   └── BenchmarkError     answered badly (HTTP error, malformed JSON, died mid-run)
    └── SetupError             an optional stack's environment could not be installed

Every message names the file, field, knob or process it is about; the CLIs print it as one
line and exit 2 (config) or record it as a failed trial (engine).
"""

from __future__ import annotations


class GemmaSweepError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(GemmaSweepError):
    """Input written by a user is wrong; nothing has been started."""


class ManifestError(ConfigError):
    pass


class KnobError(ConfigError):
    pass


class StudySpecError(ConfigError):
    pass


class DataError(ConfigError):
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


class SetupError(GemmaSweepError):
    """``python -m engine.setup`` could not install a stack; names the step and its log."""
