"""The one frame of the project's commands: the arguments parsed into one object, the project's errors turned into
exit statuses in one place.

    @command(parse_args)
    def main(args: RunArgs) -> int:
        ...

makes ``main(argv: list[str] | None = None) -> int``: ``parse_args(argv)`` (argparse's own usage errors exit 2, as
argparse does), then the body with what it returned. An error of the project's tree (``errors``) raised by either
prints ``error: <its message>`` on stderr, and the command exits

    2    a ConfigError: input a user wrote is wrong, nothing has booted; also the kinds a command names
         (``usage=``: a benchmark's child sweep that failed, a grid whose numbers do not parse)
    1    any other GemmaSweepError: a stack that failed, an install, a stopped sweep
    130  Ctrl-C (or a SIGTERM the command turned into it), printed "interrupted", where the command stops what it
         started on it (``interrupted=True``); elsewhere Python's own interrupt

Below every package (beside ``errors``), so that every command uses it: the study, the driver, the worker, the
engine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol, TypeVar

from errors import ConfigError, GemmaSweepError

__all__ = ["FAILED", "INTERRUPTED", "USAGE", "command"]

USAGE = 2
FAILED = 1
INTERRUPTED = 130

Args = TypeVar("Args")


class Main(Protocol):
    """A command's ``main``: ``sys.exit(main())`` runs it on the process's own argv; a test passes one."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def command(
    parse: Callable[[list[str] | None], Args],
    *,
    usage: tuple[type[BaseException], ...] = (),
    interrupted: bool = False,
) -> Callable[[Callable[[Args], int]], Main]:
    """The frame around a command's body (the module's docstring): ``parse`` turns argv into what the body takes."""

    caught: tuple[type[BaseException], ...] = (GemmaSweepError, *usage)
    bad_input: tuple[type[BaseException], ...] = (ConfigError, *usage)

    def frame(body: Callable[[Args], int]) -> Main:
        def main(argv: list[str] | None = None) -> int:
            try:
                return body(parse(argv))
            except KeyboardInterrupt:
                if not interrupted:
                    raise
                print("interrupted", file=sys.stderr)
                return INTERRUPTED
            except caught as exc:
                print(f"error: {exc}", file=sys.stderr)
                return USAGE if isinstance(exc, bad_input) else FAILED

        return main

    return frame
