"""Judging: the gate's PPL limit on a set of references, by one rule, and a trial's judgement (``Judge``).

**The gate's limit** (``ppl_limit``): an absolute gate is its number; a ratio gate is the ratio times the
baseline's PPL on the references scored, and which baseline PPL applies is one rule (``baseline_ppls``):

- where the references are the sweep's own (``scores_sweep_references``): the search's baseline trial's PPL;
- else the median of the baseline trial's measured boots on them: the baseline promoted with the candidates
  (a promotion whose profile scores other references), or booted first by a verification (held-out ones).

The search, the promotion's plan and claims, the verification and its printed tables all take the limit
from here; the arithmetic is ``sweep.judgement.Gate.limit``.

**A trial's judgement** (``Judge``): the gate it was held to (and the gated length bucket's limit, the ratio
times the baseline trial's PPL in that bucket), its greedy-identity difference from the baseline, and
feasibility, by the rules of ``sweep.judgement``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.config import BenchProfile
from sweep.judgement import Gate, is_feasible
from sweep.store._boot import BootRecord
from sweep.store._identity import differing_prompts
from sweep.store._trial import TrialRecord, identity_comparable, same_profile

__all__ = ["Judge", "baseline_ppls", "ppl_limit", "scores_sweep_references"]


def scores_sweep_references(measured: TrialRecord, profile: BenchProfile) -> bool:
    """Whether ``profile`` scores PPL on the references the sweep measured ``measured`` on (the same file, as many
    records): the one test of whether the search's PPLs, and its gate, hold for boots at that profile."""
    swept = BenchProfile.from_record(measured.profile)
    return (swept.path(swept.refs), swept.ppl_records) == (profile.path(profile.refs), profile.ppl_records)


def baseline_ppls(
    profile: BenchProfile | None, *, baseline: TrialRecord | None, boots: Sequence[BootRecord] = ()
) -> list[float]:
    """The baseline's PPLs on the references ``profile`` scores (None: the sweep's own): the search's baseline
    trial's where they are the sweep's, else its measured boots' among ``boots``."""
    if baseline is None:
        return []
    if profile is None or scores_sweep_references(baseline, profile):
        return [baseline.ppl] if baseline.measured and baseline.ppl is not None else []
    return [b.ppl for b in boots if b.trial_number == baseline.trial_number and b.measured and b.ppl is not None]


def ppl_limit(
    gate: Gate,
    profile: BenchProfile | None = None,
    *,
    baseline: TrialRecord | None,
    boots: Sequence[BootRecord] = (),
) -> float | None:
    """The gate's PPL limit on the references ``profile`` scores (None: the sweep's own), by the rule above; None
    while a ratio gate's baseline is unknown there."""
    return gate.limit(baseline_ppls(profile, baseline=baseline, boots=boots))


def _length_ppl(record: TrialRecord | None, end: int) -> float | None:
    """A measured record's PPL in the length bucket ending at ``end`` tokens; None where it has none."""
    if record is None or not record.measured:
        return None
    bucket = record.figures.length_bucket(end)
    return None if bucket is None else bucket.ppl


@dataclass(frozen=True)
class Judge:
    """What a trial is judged against: the study's gate and the baseline trial's record (token ids
    included, for the identity check)."""

    gate: Gate
    identity_required: bool
    baseline: TrialRecord | None

    @property
    def gate_ppl(self) -> float | None:
        return ppl_limit(self.gate, baseline=self.baseline)

    def identity_diff(self, record: TrialRecord) -> int | None:
        base = self.baseline
        if (
            base is None
            or record.is_baseline
            or not base.measured
            or not record.full  # a partial run's answers are fewer: nothing to compare prompt by prompt
            or not same_profile(record.profile, base.profile)  # other prompts or lengths: nothing to compare
            or not identity_comparable(record.knobs, base.knobs)
        ):
            return None
        mine, theirs = record.figures, base.figures
        if mine.output_token_ids and theirs.output_token_ids:
            return differing_prompts(mine.output_token_ids, theirs.output_token_ids)
        if mine.output_text_sha256 and theirs.output_text_sha256:
            # a stack that returns no token ids: compare the answers' texts
            return differing_prompts(mine.output_text_sha256, theirs.output_text_sha256)
        return None

    def judge(self, record: TrialRecord) -> TrialRecord:
        """Fill the gate, the identity difference and feasibility of a record, in place. A pruned
        record is never feasible: nothing full-fidelity says it is under the gate and on the front."""
        if not record.measured:
            record.feasible = False
            if record.status == "pruned":
                record.gate = self.gate_ppl
            return record
        first_baseline = record.is_baseline and self.baseline is None
        # the first baseline is held to its own PPL: it is the baseline
        record.gate = ppl_limit(self.gate, baseline=record) if first_baseline else self.gate_ppl
        record.identity_diff_prompts = self.identity_diff(record)
        length = None
        if (end := self.gate.length_bucket) is not None:
            record.length_gate = self.gate.length_limit(_length_ppl(record if first_baseline else self.baseline, end))
            length = (_length_ppl(record, end), record.length_gate)
        record.feasible = is_feasible(
            ppl=record.ppl,
            gate=record.gate,
            identity_diff=record.identity_diff_prompts,
            identity_required=self.identity_required,
            length=length,
        )
        return record
