"""The soak's short form for CI: one seeded sweep meeting every stack fault once, a worker node
removed and the driver SIGKILLed and restarted, with a reader on the database throughout.
The full form (20 sweeps, the table in ``benchmarks/results/soak.txt``) is ``python -m tests.soak``."""

from __future__ import annotations

from tests.soak.faults import STACK_FAULTS
from tests.soak.run import SoakSpec, run_soak_sweep
from tests.soak.table import soak_table


def test_a_short_soak_loses_nothing_doubles_nothing_and_leaves_nothing(tmp_path):
    spec = SoakSpec(seed=0, n_trials=len(STACK_FAULTS), workers=2, node_removals=1, driver_kills=1)
    report = run_soak_sweep(spec, tmp_path / "soak")
    table = soak_table([report])
    assert report.problems == [], table
    assert (report.lost, report.duplicated, report.leftovers, report.reader_errors) == (0, 0, 0, 0), table
    assert report.budget_used == spec.n_trials and report.reader_polls > 0
    assert (report.node_removals, report.driver_kills) == (1, 1), table
    # The faults met: every trial that booted ended as its fault demands, or was cut short by a
    # cluster fault and re-queued; at least seven kinds were seen through to their end.
    assert all(view.outcome in ("expected", "chaos") for view in report.views)
    assert len({view.fault.name for view in report.views if view.outcome == "expected"}) >= 7, table
