"""Where each trial's time went, read back from the sweep's database.

Two clocks are stored per trial. Optuna's ``datetime_start`` / ``datetime_complete`` are the
driver's own: the ``ask`` that created the trial and the ``tell`` after its row was written,
so their difference is the trial as the driver saw it (Ray dispatch, the worker's run, the
result's way back, the row write). The ``measurements`` row holds ``engine.bench.run_trial``'s
phases (boot, warmup, tps, ppl, stop, total) timed inside the worker. What the driver saw
beyond ``total`` is orchestration: Ray, the driver and the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import optuna

from errors import StudyNotFoundError
from sweep.store import TrialRecord, open_existing

__all__ = ["ENGINE_PHASES", "TrialTiming", "load_timeline"]

# run_trial's phases in the order they run; "stream" only with a profile's stream pass.
ENGINE_PHASES = ("boot", "warmup", "tps", "stream", "ppl", "stop")


@dataclass(frozen=True, kw_only=True)
class TrialTiming:
    number: int
    knobs: dict[str, Any]
    status: str  # the measurement row's: complete | failed
    is_baseline: bool
    asked: datetime
    written: datetime  # the measurements row's insert, in Optuna's clock (naive local time)
    told: datetime
    phases: dict[str, float]  # run_trial's timings_s: ENGINE_PHASES + "total"

    @property
    def wall_s(self) -> float:
        return (self.told - self.asked).total_seconds()

    @property
    def engine_s(self) -> float:
        return sum(self.phases.get(p, 0.0) for p in ENGINE_PHASES)

    @property
    def in_trial_rest_s(self) -> float:
        """run_trial's own time outside the phases: data loading, knob checks, process spawn."""
        return self.phases.get("total", 0.0) - self.engine_s

    @property
    def orchestration_s(self) -> float:
        """The driver's view minus the worker's: Ray dispatch and return, row write, tell."""
        return self.wall_s - self.phases.get("total", 0.0)

    @property
    def before_row_s(self) -> float:
        """Orchestration up to the row: Ray dispatch, the worker's imports, the result's way
        back, and the wait while the driver closed other trials."""
        return (self.written - self.asked).total_seconds() - self.phases.get("total", 0.0)

    @property
    def row_to_tell_s(self) -> float:
        """From the row's insert to the tell: the driver's database work for this trial."""
        return (self.told - self.written).total_seconds()


def _written(record: TrialRecord) -> datetime:
    """When the record's row was inserted, in Optuna's clock (naive local time)."""
    assert record.created_at is not None  # a record read back from the database has its insert time
    return record.created_at.astimezone().replace(tzinfo=None)


def load_timeline(storage_url: str, study_name: str) -> list[TrialTiming]:
    """The study's finished trials that have a row, in the order the driver asked for them."""
    storage = open_existing(storage_url)
    try:
        try:
            study = optuna.load_study(study_name=study_name, storage=storage.optuna)
        except KeyError:
            names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage.optuna))
            raise StudyNotFoundError(
                f"study {study_name!r} not found in {storage_url}; studies there: {names or 'none'}"
            ) from None
        rows = {r.trial_number: r for r in storage.records(study_name)}
        trials = study.get_trials(deepcopy=False)
    finally:
        storage.close()
    timeline = [
        TrialTiming(
            number=t.number,
            knobs=dict(rows[t.number].knobs),
            status=rows[t.number].status,
            is_baseline=rows[t.number].is_baseline,
            asked=t.datetime_start,
            written=_written(rows[t.number]),
            told=t.datetime_complete,
            phases=dict(rows[t.number].timings),
        )
        for t in trials
        if t.number in rows and t.datetime_start is not None and t.datetime_complete is not None
    ]
    return sorted(timeline, key=lambda t: t.asked)
