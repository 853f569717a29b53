"""Fuzz tests: every input ends in the project's own error naming the problem (or a 4xx JSON answer
from a server), never in a traceback or a crashed server. The session ends with the count of
distinct inputs tried per target (``tests.fuzz.tally``)."""

from __future__ import annotations

from tests.fuzz.tally import summary


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest hook
    counts = summary()
    if counts:
        terminalreporter.write_sep("-", f"fuzz: {sum(counts.values())} distinct inputs tried")
        for target, count in counts.items():
            terminalreporter.write_line(f"  {target}: {count}")
