"""SIGTERM as Ctrl-C: under ``timeout``, systemd or a scheduler, TERM then stops a command as cleanly
as Ctrl-C does (engines stopped, what was measured kept, the resume hint printed)."""

from __future__ import annotations

import signal

__all__ = ["raise_interrupt"]


def raise_interrupt(signum: int, _frame: object) -> None:
    """A signal handler: raise KeyboardInterrupt naming the signal."""
    raise KeyboardInterrupt(signal.Signals(signum).name)
