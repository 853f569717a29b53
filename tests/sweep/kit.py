"""Helpers for the sweep's tests: study files over the stub stack, and in-process runs."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

from engine.config import BenchProfile
from engine.measurement import Measurement
from sweep.claims import StudyClaims, confirm, promote
from sweep.claims._runner import PlannedBoot, _Worker
from sweep.search import SweepConsole, load_study
from sweep.search._driver import StudyResult, run_study
from sweep.store import TrialRecord, open_storage
from tests.stacks import stub_manifest, stub_profile

SWEEP_TESTS = Path(__file__).resolve().parent
FAULT_IF_STUB = SWEEP_TESTS / "fault_if_stub.py"
_MEASUREMENT_FIELDS = {f.name for f in fields(Measurement)}


def write_manifest(
    folder: Path, *, fault_if: str | None = None, prefix_caching: bool | None = None, **env: str
) -> Path:
    """``stub.json`` with env entries replaced, as a file; ``fault_if`` routes it through the
    wrapper that sets STUB_FAULT only for one knob value (e.g. ``CENTROID_TOP_K=16:wrong_tokens``)."""
    manifest = stub_manifest(**env).to_json_dict()
    if prefix_caching is not None:
        manifest["prefix_caching"] = prefix_caching
    if fault_if is not None:
        manifest["serve"] = ["{python}", str(FAULT_IF_STUB)]
        manifest["env"]["STUB_FAULT_IF"] = fault_if
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2))
    return path


def _toml_value(value: Any) -> str:
    return json.dumps(value)  # ints, floats, strings, bools (lowercase) and lists read back as TOML


def write_study(
    folder: Path,
    *,
    manifest: Path,
    profile: BenchProfile,
    space: dict[str, dict[str, Any]],
    gate: dict[str, float] | None = None,
    name: str = "stubstudy",
    **fields: Any,
) -> Path:
    # Full fidelity unless a test asks: a stub stack's timings are a test's own, not the front rule's.
    fields.setdefault("fidelity", {"mode": "full"})
    # No promotion unless a test asks: its boots are the promotion tests' own subject, and time
    fields.setdefault("promotion", {"candidates": 0})
    lines = [f"name = {_toml_value(name)}", f"manifest = {_toml_value(str(manifest))}"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in fields.items() if not isinstance(value, dict)]
    tables = {
        "gate": gate or {"ppl_max_ratio": 1.05},
        "profile": {k: v for k, v in asdict(profile).items() if v is not None},
        **{k: v for k, v in fields.items() if isinstance(v, dict)},
        **{f"space.{knob}": table for knob, table in space.items()},
    }
    for table, values in tables.items():
        lines.append(f"\n[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_in_process(study: Path, storage_url: str, run_dir: Path, **overrides: Any) -> tuple[StudyResult, str]:
    """Run a study with the driver in this process (Ray must already be initialised)."""
    spec = load_study(study, **overrides)
    storage = open_storage(storage_url)
    buffer = io.StringIO()
    try:
        result = run_study(spec, storage, console=SweepConsole(Console(file=buffer, width=200)), run_dir=run_dir)
    finally:
        storage.close()
    return result, buffer.getvalue()


def promoted_stub_study(
    folder: Path,
    *,
    manifest: Path,
    name: str,
    choices: list[int],
    output_len: int = 32,
    target: float | None = None,
    between_prior_df: float | None = None,
) -> tuple[Path, str, StudyClaims | None]:
    """A grid study over ``manifest`` (a stub stack's, ``write_manifest``), searched, promoted (2 candidates x 2
    boots) and its choice confirmed (2 boots of it and its control), in ``folder``: its file, its database URL and
    the study's claims (Ray must already be initialised). ``target``: the P(VERIFIED) it asks; ``between_prior_df``:
    what its stated machine term is worth (None: the defaults)."""
    study = write_study(
        folder,
        manifest=manifest,
        profile=stub_profile(folder, output_len=output_len),
        name=name,
        space={"centroid_top_k": {"choices": choices}},
        sampler="grid",
        promotion={"candidates": 2, "boots": 2, "confirm_boots": 2, "confirm_max_boots": 2}
        | ({} if target is None else {"target": target})
        | ({} if between_prior_df is None else {"between_prior_df": between_prior_df}),
    )
    url = f"sqlite:///{folder / 's.db'}"
    run_in_process(study, url, folder / "runs")
    storage = open_storage(url)
    try:
        spec, out = load_study(study), Console(quiet=True)
        promote(spec, storage, out=out, run_dir=folder / "runs")
        view = confirm(spec, storage, out=out, run_dir=folder / "runs")
    finally:
        storage.close()
    return study, url, view


@contextmanager
def interrupted_at_boot(nth: int) -> Iterator[None]:
    """While the block runs, a run of fresh boots raises KeyboardInterrupt (a Ctrl-C) on its ``nth`` boot instead of
    booting it; the real boot is back afterwards."""
    real, calls = _Worker.boot, []

    def interrupting(self: _Worker, planned: PlannedBoot, *, folder: Path) -> Any:
        calls.append(planned.order)
        if len(calls) == nth:
            raise KeyboardInterrupt
        return real(self, planned, folder=folder)

    setattr(_Worker, "boot", interrupting)  # noqa: B010 - a method replaced on the class for the block
    try:
        yield
    finally:
        setattr(_Worker, "boot", real)  # noqa: B010


def stub_processes(marker: str) -> list[psutil.Process]:
    """Live stub servers whose environment carries ``marker`` (a test's own folder)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            if "stub" in cmdline and any(marker in v for v in process.environ().values()):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def measured_record(
    number: int,
    tps: float | None,
    ppl: float | None,
    *,
    study: str = "s",
    knobs: dict[str, Any] | None = None,
    **fields: Any,
) -> TrialRecord:
    """A record as the driver stores it: a measured one (a minimal measurement with these figures),
    or, without figures, a failed one. ``fields`` set any other field of the record or measurement."""
    metrics = {k: fields.pop(k) for k in list(fields) if k in _MEASUREMENT_FIELDS}
    measurement = (
        None
        if tps is None
        else Measurement(
            **{
                "tps": tps,
                "ppl": ppl,
                "ppl_mean_record": ppl,
                "completion_tokens": 64,
                "tps_wall_s": 1.0,
                "ppl_target_tokens": 64,
                "num_prompts": 1,
                "num_ppl_records": 1,
                **metrics,
            }
        )
    )
    status = fields.pop("status", "complete" if measurement else "failed")
    return TrialRecord(
        study_name=study,
        trial_number=number,
        status=status,
        knobs=knobs if knobs is not None else {"centroid_top_k": 8 * (number + 1)},
        measurement=measurement,
        **fields,
    )
