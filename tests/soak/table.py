"""The soak's result as a plain-text table: faults injected and survived, then what must be zero."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tests.soak.faults import STACK_FAULTS
from tests.soak.run import SweepReport

__all__ = ["soak_table"]


def _row(cells: Sequence[object], widths: Sequence[int]) -> str:
    first, *rest = cells
    return f"{first!s:<{widths[0]}}" + "".join(f"{c!s:>{w}}" for c, w in zip(rest, widths[1:]))


def soak_table(reports: Sequence[SweepReport]) -> str:
    """Per stack fault: trials that booted with it, and how they ended (as the fault demands,
    or cut short by a cluster fault and re-queued, or anything else: a failure of the soak)."""
    outcomes: dict[str, Counter[str]] = {fault.name: Counter() for fault in STACK_FAULTS}
    for report in reports:
        for view in report.views:
            outcomes[view.fault.name][view.outcome] += 1
    widths = (18, 10, 10, 13, 15, 12)
    lines = [_row(["stack fault", "injected", "survived", "as expected", "hit by chaos", "unexpected"], widths)]
    totals: Counter[str] = Counter()
    for name, counts in outcomes.items():
        injected = sum(counts.values())
        survived = counts["expected"] + counts["chaos"]
        totals.update(counts)
        lines.append(
            _row(
                [
                    name,
                    injected,
                    survived,
                    counts["expected"],
                    counts["chaos"],
                    counts["unexpected"] + counts["missing"],
                ],
                widths,
            )
        )
    lines.append(
        _row(
            [
                "all",
                sum(totals.values()),
                totals["expected"] + totals["chaos"],
                totals["expected"],
                totals["chaos"],
                totals["unexpected"] + totals["missing"],
            ],
            widths,
        )
    )

    widths = (18, 10, 19, 13, 10)
    lines += ["", _row(["cluster fault", "injected", "while a stack ran", "trials lost", "re-run"], widths)]
    removals = sum(r.node_removals for r in reports)
    busy = sum(r.node_removals_busy for r in reports)
    lost_node = sum(r.lost_to_node for r in reports)
    kills = sum(r.driver_kills for r in reports)
    lost_driver = sum(r.lost_to_driver for r in reports)
    rerun = sum(r.rerun for r in reports)
    lines.append(_row(["node_removed", removals, busy, lost_node, ""], widths))
    lines.append(_row(["driver_killed", kills, "", lost_driver, ""], widths))
    lines.append(_row(["all", removals + kills, "", lost_node + lost_driver, rerun], widths))
    lines += [
        "trials lost: in flight when the fault hit, so recorded as failed:lost (a result, not a loss);",
        "re-run: lost trials whose knobs were measured again (knobs lost twice are not run a third time)",
    ]

    rows: Counter[str] = Counter()
    for report in reports:
        rows.update(report.rows)
    reached = sum(1 for r in reports if r.budget_used == r.spec.n_trials)
    lines += [
        "",
        f"sweeps {len(reports)}, budget reached {reached}/{len(reports)}; rows: "
        + ", ".join(f"{k} {v}" for k, v in sorted(rows.items())),
        f"measurements lost {sum(r.lost for r in reports)}, duplicated {sum(r.duplicated for r in reports)}, "
        f"leftover processes/groups/ports {sum(r.leftovers for r in reports)}, "
        f"reader polls {sum(r.reader_polls for r in reports)} with {sum(r.reader_errors for r in reports)} errors, "
        f"problems {sum(len(r.problems) for r in reports)}",
    ]
    return "\n".join(lines)
