"""What a transfer boots, and what each boot is timed on: the baseline and the front's fastest points, checked
against the manifest before anything boots, and the workloads of every boot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.bench import Workload
from engine.config import BenchProfile, KnobValues, parse_knobs
from sweep.serving._args import TransferArgs

if TYPE_CHECKING:  # imported where used: Optuna takes seconds to import, and bad input should fail fast
    from sweep.search import StudySpec
    from sweep.store import TrialRecord

__all__ = ["Point", "choose_points", "workloads"]


@dataclass(frozen=True, kw_only=True)
class Point:
    """One configuration to boot: its trial's record, its knobs checked against the manifest."""

    record: TrialRecord
    knobs: KnobValues
    on_front: bool
    label: str

    @property
    def number(self) -> int:
        return self.record.trial_number

    @property
    def challenge_tps(self) -> float:
        assert self.record.tps is not None  # a front point or the baseline, measured to the end
        return self.record.tps


def _label(record: TrialRecord, swept: Sequence[str]) -> str:
    knobs = ", ".join(f"{k}={record.knobs[k]}" for k in swept if k in record.knobs)
    return f"trial {record.trial_number}{' (baseline)' if record.is_baseline else ''}" + (f": {knobs}" if knobs else "")


def choose_points(
    spec: StudySpec, records: Sequence[TrialRecord], front: Sequence[TrialRecord], top: int
) -> list[Point]:
    """The baseline (measured to the end) first, then the ``top`` fastest front points; their knobs checked now,
    before anything boots (a stored value the registry no longer takes is bad input)."""
    chosen = sorted(front, key=lambda r: (-(r.tps or 0.0), r.trial_number))[:top]
    baseline = next((r for r in records if r.is_baseline and r.full), None)
    if baseline is not None:
        chosen = [baseline, *(r for r in chosen if r.trial_number != baseline.trial_number)]
    on_front = {r.trial_number for r in front}
    swept = list(spec.space)
    return [
        Point(
            record=r,
            knobs=parse_knobs(spec.manifest, r.knobs, where=f"trial {r.trial_number}'s stored knobs: "),
            on_front=r.trial_number in on_front,
            label=_label(r, swept),
        )
        for r in chosen
    ]


def workloads(args: TransferArgs, profile: BenchProfile) -> list[Workload]:
    """One workload a concurrency on the public prompts, then the long-context one at concurrency 1."""
    output_len = args.output_len or profile.output_len
    made = [
        Workload(name=f"c{c}", concurrency=c, num_prompts=args.num_prompts, output_len=output_len) for c in args.levels
    ]
    if args.long:
        made.append(
            Workload(name="long-c1", concurrency=1, num_prompts=args.num_prompts, output_len=output_len, prompts="long")
        )
    return made
