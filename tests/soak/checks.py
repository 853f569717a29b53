"""What must hold after a soak sweep, read back from the database, the run folder and /proc.

Each check returns problems as sentences (an empty list is a pass), so one run reports every
broken promise at once instead of stopping at the first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import optuna
import psutil
from optuna.trial import TrialState

from engine.config import BenchProfile, load_ppl_records
from engine.host import group_members
from sweep.store import TrialRecord, open_storage
from tests.soak.chaos import MARKER_ENV, cmdline, marked_processes
from tests.soak.faults import FAULTS_BY_NAME, Fault
from tests.stacks.stub_server import token_logprob

__all__ = ["StudyCheck", "TrialView", "check_leftovers", "check_study", "duplicate_boots", "injected_trials"]

_SOAK_LINE = re.compile(r"soak: trial (\d+) pid (\d+) pgid (\d+) fault (\w+)")
_PORT_LINE = re.compile(r"stub: serving .* on [\d.]+:(\d+)")
LOST_TO_NODE = "worker lost mid-trial"
LOST_TO_DRIVER = "the driver stopped before the trial finished"


@dataclass(frozen=True)
class TrialView:
    """One trial that booted a stack: the fault it got, and what the sweep recorded for it."""

    number: int
    fault: Fault
    pgids: tuple[int, ...]  # one per boot attempt seen in its log
    ports: tuple[int, ...]
    log: str
    outcome: str  # expected | chaos | unexpected | missing


def injected_trials(trials_dir: Path, rows: dict[int, TrialRecord]) -> list[TrialView]:
    views = []
    for folder in sorted(trials_dir.glob("trial-*")):
        log = (folder / "engine.log").read_text(errors="replace") if (folder / "engine.log").exists() else ""
        found = _SOAK_LINE.findall(log)
        if not found:
            continue  # dispatched, but its worker died before the stack started
        number, fault = int(found[0][0]), FAULTS_BY_NAME[found[0][3]]
        row = rows.get(number)
        if row is None:
            outcome = "missing"
        elif row.fail_kind in ("lost", "interrupted"):
            outcome = "chaos"
        else:
            outcome = "expected" if fault.matches(status=row.status, reason=row.reason, log=log) else "unexpected"
        views.append(
            TrialView(
                number=number,
                fault=fault,
                pgids=tuple(int(f[2]) for f in found),
                ports=tuple(int(p) for p in _PORT_LINE.findall(log)),
                log=log,
                outcome=outcome,
            )
        )
    return views


def duplicate_boots(views: list[TrialView], rows: list[TrialRecord]) -> list[str]:
    """Boots the resume rules do not allow, counted from the stacks' own start lines (one per boot
    in its trial's log): a trial number boots once (a retry gets a number of its own), and knobs
    whose stack failed (``engine``) never boot again."""
    found = [f"trial {v.number} booted {len(v.pgids)} times" for v in views if len(v.pgids) > 1]
    by_number = {r.trial_number: r for r in rows}
    failed_at: dict[str, int] = {}
    for view in sorted(views, key=lambda v: v.number):
        row = by_number.get(view.number)
        if row is None:
            continue
        key = repr(sorted(row.knobs.items()))
        if key in failed_at:
            found.append(f"trial {view.number} booted knobs whose stack failed in trial {failed_at[key]}")
        elif row.fail_kind == "engine":
            failed_at[key] = view.number
    return found


def _expected_ppl(profile: BenchProfile, window: int) -> float:
    """The PPL the stub's model gives these reference records at this window."""
    records = load_ppl_records(profile.path(profile.refs), limit=profile.ppl_records)
    nll = tokens = 0.0
    for record in records:
        prompt = [*record.context_token_ids, *record.target_token_ids]
        start = len(record.context_token_ids)
        nll -= sum(token_logprob(prompt[i], i, window) for i in range(start, len(prompt)))
        tokens += len(record.target_token_ids)
    return math.exp(nll / tokens)


@dataclass
class StudyCheck:
    problems: list[str]
    views: list[TrialView]
    rows: list[TrialRecord]
    lost: int  # trials that ran (or were asked for) and left no row
    duplicated: int  # boots the resume rules do not allow (duplicate_boots)
    budget_used: int


def check_study(
    *,
    storage_url: str,
    study: str,
    n_trials: int,
    profile: BenchProfile,
    trials_dir: Path,
    node_removals: int,
    driver_kills: int,
    workers: int,
    reader_complete: dict[int, tuple[float, float]],
) -> StudyCheck:
    storage = open_storage(storage_url)
    try:
        rows = storage.records(study)
        trials = optuna.load_study(study_name=study, storage=storage.optuna).get_trials(deepcopy=False)
        # The budget rule, counted here on its own: trials that ended, less those replaced by a retry.
        retried = {t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs}
        used = sum(1 for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL) and t.number not in retried)
    finally:
        storage.close()
    problems: list[str] = []
    by_number = {r.trial_number: r for r in rows}
    views = injected_trials(trials_dir, by_number)

    duplicated = duplicate_boots(views, rows)
    problems += duplicated
    if used != n_trials:
        problems.append(f"the study ended with {used} trials counted against a budget of {n_trials}")
    lost = {view.number for view in views if view.outcome == "missing"}
    for trial in trials:
        row = by_number.get(trial.number)
        if trial.state not in (TrialState.COMPLETE, TrialState.FAIL):
            problems.append(f"Optuna trial {trial.number} ended {trial.state.name}")
        if row is None:
            lost.add(trial.number)
            continue
        problems += _check_row(row, trial, profile=profile)
    problems += [f"trial {n} ran (or was asked for) but has no measurement row: lost" for n in sorted(lost)]
    for view in views:
        if view.outcome == "unexpected":
            row = by_number[view.number]
            problems.append(f"trial {view.number} ({view.fault.name}) ended {row.status}/{row.fail_kind}: {row.reason}")
    for number, values in reader_complete.items():
        row = by_number.get(number)
        if row is None or row.status != "complete" or (row.tps, row.ppl) != values:
            problems.append(f"trial {number} was read complete with {values} during the run, not so at the end")
    problems += _check_losses(rows, trials, node_removals=node_removals, driver_kills=driver_kills, workers=workers)
    return StudyCheck(
        problems=problems, views=views, rows=rows, lost=len(lost), duplicated=len(duplicated), budget_used=used
    )


def _check_row(row: TrialRecord, trial: optuna.trial.FrozenTrial, *, profile: BenchProfile) -> list[str]:
    where = f"trial {row.trial_number}"
    if row.status == "failed":
        problems = [] if row.reason else [f"{where} failed without a reason"]
        if trial.state != TrialState.FAIL or not trial.user_attrs.get("fail_reason"):
            problems.append(f"{where}: failed row, but Optuna has {trial.state.name} without a fail_reason")
        return problems
    if trial.state != TrialState.COMPLETE or trial.values != [row.tps, row.ppl]:
        return [f"{where}: complete row ({row.tps}, {row.ppl}) but Optuna has {trial.state.name} {trial.values}"]
    problems = []
    swept = {k: v for k, v in row.knobs.items() if k in trial.params}
    if swept != {k: int(v) for k, v in trial.params.items()}:
        problems.append(f"{where}: stored knobs {row.knobs} differ from Optuna's params {trial.params}")
    expected = _expected_ppl(profile, row.knobs["sliding_window"])
    if not math.isclose(row.ppl, expected, rel_tol=1e-9):  # type: ignore[arg-type]
        problems.append(f"{where}: PPL {row.ppl} is not the stack's {expected} for its knobs {row.knobs}")
    tokens = row.metric("completion_tokens")
    if not row.tps or row.tps <= 0 or tokens != profile.num_prompts * profile.output_len:
        problems.append(f"{where}: TPS {row.tps} over {tokens} completion tokens is not a full measurement")
    return problems


def _check_losses(
    rows: list[TrialRecord],
    trials: list[optuna.trial.FrozenTrial],
    *,
    node_removals: int,
    driver_kills: int,
    workers: int,
) -> list[str]:
    """Every loss has a cause the soak inflicted, and its knobs ran again."""
    problems = []
    lost = [r for r in rows if r.fail_kind in ("lost", "interrupted")]
    to_node = [r for r in lost if r.reason and r.reason.startswith(LOST_TO_NODE)]
    to_driver = [r for r in lost if r.reason == LOST_TO_DRIVER]
    for r in lost:
        if r not in to_node and r not in to_driver:
            problems.append(f"trial {r.trial_number} lost ({r.fail_kind}) with no fault to explain it: {r.reason}")
    if len(to_node) > node_removals:  # one worker per node
        problems.append(f"{len(to_node)} trials lost to {node_removals} node removal(s)")
    if len(to_driver) > driver_kills * workers:
        problems.append(f"{len(to_driver)} trials lost to {driver_kills} driver kill(s) with {workers} workers")
    retried = {t.user_attrs.get("retry_of") for t in trials}
    for r in lost:
        earlier = any(o.fail_kind == "lost" and o.knobs == r.knobs and o.trial_number < r.trial_number for o in lost)
        if not earlier and r.trial_number not in retried:
            problems.append(f"trial {r.trial_number} was lost and never re-run")
    return problems


def check_leftovers(views: list[TrialView], *, marker: str) -> list[str]:
    """No stack, child of a stack or reaper alive, no member left in any stack's process group,
    no stack port still listening."""
    stray = marked_processes(marker, words=("stub", "engine.reaper"))
    problems = [f"process {p.pid} ({' '.join(cmdline(p)[:4])}) outlived the sweep" for p in stray]
    for view in views:
        for pgid in view.pgids:
            members = group_members(pgid)
            if members:
                problems.append(f"trial {view.number}: process group {pgid} still has members {members}")
    listening = {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    for view in views:
        for port in view.ports:
            # A port can be handed to someone else's process once ours let it go: only ours count.
            if port in listening and _carries(listening[port], marker):
                problems.append(f"trial {view.number}: port {port} still listening (pid {listening[port]})")
    return problems


def _carries(pid: int | None, marker: str) -> bool:
    if pid is None:
        return True  # an owner we cannot see: assume the worst
    try:
        return psutil.Process(pid).environ().get(MARKER_ENV) == marker
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
