"""The commands' one frame (cli.py): argv parsed once, each of the project's errors one exit status and one line."""

from __future__ import annotations

import argparse

import pytest

from cli import FAILED, INTERRUPTED, USAGE, command
from errors import EngineBootError, StudyNotFoundError, SweepRunError, SweepStopped


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m example")
    parser.add_argument("--raise", dest="kind", default=None)
    return parser.parse_args(argv)


RAISED = {
    "config": StudyNotFoundError("no study 'x' in sqlite:///a.db"),
    "engine": EngineBootError("the stack exited during boot"),
    "stopped": SweepStopped("the baseline failed"),
    "child": SweepRunError("the child sweep exited 1"),
    "bug": ValueError("not the project's"),
    "interrupt": KeyboardInterrupt(),
}


def _command(**frame):
    @command(_parse, **frame)
    def main(args: argparse.Namespace) -> int:
        if args.kind:
            raise RAISED[args.kind]
        return 0

    return main


@pytest.mark.parametrize(
    ("kind", "status"), [("config", USAGE), ("engine", FAILED), ("stopped", FAILED), ("child", FAILED)]
)
def test_each_error_of_the_project_is_one_line_on_stderr_and_its_status(capsys, kind, status):
    assert _command()(["--raise", kind]) == status
    captured = capsys.readouterr()
    assert captured.err == f"error: {RAISED[kind]}\n" and captured.out == ""


def test_a_command_names_the_kinds_it_counts_as_bad_input(capsys):
    assert _command(usage=(SweepRunError,))(["--raise", "child"]) == USAGE
    assert capsys.readouterr().err == f"error: {RAISED['child']}\n"
    assert _command(usage=(SweepRunError,))(["--raise", "engine"]) == FAILED


def test_a_bug_and_argparse_keep_their_own_way_out():
    with pytest.raises(ValueError, match="not the project's"):
        _command()(["--raise", "bug"])
    with pytest.raises(SystemExit) as usage:
        _command()(["--no-such-flag"])
    assert usage.value.code == USAGE
    assert _command()([]) == 0


def test_an_interrupt_is_130_where_the_command_stops_what_it_started(capsys):
    assert _command(interrupted=True)(["--raise", "interrupt"]) == INTERRUPTED
    assert capsys.readouterr().err == "interrupted\n"
    with pytest.raises(KeyboardInterrupt):
        _command()(["--raise", "interrupt"])
