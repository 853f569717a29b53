"""Boot a submission folder as the organisers' harness would, and time it with their own client.

``check_folder`` copies the folder into an empty temporary folder and boots it there as the harness runs a
manifest: from that folder, its ``serve`` argv (``python`` is the check's interpreter), the manifest's env over
a clean one (only ``PATH``, ``HOME``, the locale, ``TMPDIR`` and ``CUDA_VISIBLE_DEVICES``: no ``GEMMA_SWEEP_*``,
no ``PYTHONPATH``, nothing that names this checkout), on its port, until ``GET /v1/models`` answers. With
``fresh`` it is the organisers' machine as near as this one gets:

- a new virtual environment built from the manifest's ``dependencies`` alone is the interpreter. Its ``pip
  install`` runs with a clean environment (no ``PIP_*``, an empty HOME: none of this user's configuration or
  cache; the system's pip configuration, which names this machine's index, as the organisers' machine has
  its own), or, given a wheelhouse (``sweep.submit --wheelhouse``), from those wheels alone, no index, in the
  isolated view below with no network;
- the stack boots in an isolated view of this machine (``_sandbox``): the folder's copy, that environment,
  the system's programs and libraries read-only, an empty HOME and ``/tmp``, nothing else. A path it needs
  outside that view is missing there, and the check names it.

Then it times the stack with the organisers' client (``bench_serving``, ``engine.bench``) on the held-out
prompts (a fresh boot's first run: a private re-run's stand-in) and the public ones, at the claim's sizes,
scores PPL on the claim's references as their ``ppl_endpoint.py`` does, sends the audit request, and stops
the stack. Every temporary folder goes whatever happens (a failure, Ctrl-C, SIGTERM).

One boot is one draw of a private re-run: the check says whether this draw lands within 5% of the claim,
beside the claim's P(VERIFIED), and gives no verdict. It passes (``True``) when the folder booted, was timed,
scored under the gate and answered the audit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from engine.bench import PplResult, audit, bench_serving, measure_ppl, open_client
from engine.config import BenchProfile, Manifest, PplRecord, parse_manifest
from engine.install import install_stack
from engine.launch import OWNER_ENV, EngineProcess, LaunchConfig
from errors import EngineError, UsageError
from sweep.interrupts import raise_interrupt
from sweep.judgement import TPS_TOLERANCE, over_gate, within_tolerance
from sweep.submission._claimfile import CLAIM_FILE, ClaimFile, read_claim
from sweep.submission._folder import FOLDER_MARK
from sweep.submission._install import SYSTEM_PATH, fresh_python
from sweep.submission._sandbox import isolated, missing_paths

__all__ = ["CLEAN_ENV", "CheckOptions", "check_folder"]

# What passes from this environment into the one a submission boots in: what any process needs, and the GPUs
# this check may use
CLEAN_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES")
# A fresh boot prepares its model before it listens: this long on top of the profile's boot timeout
_PREPARE_ALLOWANCE_S = 1800.0
_PROGRESS_S = 1.0


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    fresh: bool  # a new virtual environment from the dependencies, HOME an empty folder
    python: str  # without ``fresh``: the interpreter `python` means
    port: int | None  # None: the manifest's
    bench_python: str | None  # None: engine.install sglang-bench's
    bench_script: str | None
    tokenizer: str | None  # None: the served model's own folder (its GET /v1/models root), else model_id
    wheelhouse: Path | None = None  # with ``fresh``: install from these wheels alone, no index


@contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs, so that the cleanup below runs on it too."""
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_bytes()[-4096:].decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def _boot(engine: EngineProcess, *, out: Console) -> float:
    """Start the stack and wait until it serves, its log's last line as the progress line; seconds it took."""
    engine.start()
    result: list[float] = []
    failure: list[BaseException] = []

    def wait() -> None:
        try:
            result.append(engine.wait_ready())
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as it is
            failure.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    began = time.monotonic()
    with out.status("booting") as status:
        while waiter.is_alive():
            waiter.join(_PROGRESS_S)
            status.update(f"booting ({time.monotonic() - began:.0f} s): {_last_line(engine.log_path)[:100]}")
    if failure:
        raise failure[0]
    return result[0]


def _tokenizer(base_url: str, model_id: str) -> str:
    """The tokenizer bench_serving counts with: the served model's own folder where the stack names one that
    exists here (GET /v1/models' ``root``: vLLM's --model, the reference stack's prepared checkpoint), else
    the manifest's model_id."""
    try:
        models = httpx.get(f"{base_url}/v1/models", timeout=10.0).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return model_id
    roots = [m.get("root") for m in models if isinstance(m, dict)]
    return next((r for r in roots if isinstance(r, str) and (Path(r) / "tokenizer_config.json").is_file()), model_id)


def _profile(stored: dict[str, Any], folder: Path) -> BenchProfile:
    """The claim's profile, its data files in the folder (``FOLDER_MARK``) found there."""
    return BenchProfile.from_record(
        {k: v.replace(FOLDER_MARK, str(folder)) if isinstance(v, str) else v for k, v in stored.items()}
    )


def check_folder(source: Path, options: CheckOptions, out: Console) -> bool:
    """Boot a copy of the submission folder ``source`` and measure it (see the module's docstring); whether it
    passed. Raises UsageError for a folder this tool did not write, EngineError or InstallError for a stack
    that does not install, boot or answer."""
    try:
        data = json.loads((source / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--check {source}: not a submission folder of this tool ({exc})") from None
    manifest = parse_manifest(data, source=source / "manifest.json")
    claim = read_claim(source / CLAIM_FILE)
    profile = _profile(claim.profile, source)
    _, records = profile.load_data()
    if options.bench_python:
        assert options.bench_script is not None  # parse_args: the two go together
        bench_python, script = Path(options.bench_python), options.bench_script
    else:
        sglang = install_stack("sglang-bench")
        bench_python, script = sglang.python, sglang.versions["bench_serving"]
    port = options.port or manifest.port
    root = Path(tempfile.mkdtemp(prefix="submission-check-"))
    try:
        with _terminated_as_interrupt():
            return _run(
                source,
                root,
                manifest=manifest,
                claim=claim,
                profile=profile,
                records=records,
                bench=(bench_python, script),
                port=port,
                options=options,
                out=out,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True, kw_only=True)
class _Interpreter:
    """What the folder's ``python`` is and the environment it boots in."""

    python: Path
    env: dict[str, str]  # the clean environment under the manifest's env
    shown: list[Path]  # the folders of the isolated view it boots in; empty: not isolated


def _run(
    source: Path,
    root: Path,
    *,
    manifest: Manifest,
    claim: ClaimFile,
    profile: BenchProfile,
    records: list[PplRecord],
    bench: tuple[Path, str],
    port: int,
    options: CheckOptions,
    out: Console,
) -> bool:
    copy = root / "submission"
    shutil.copytree(source, copy)
    interpreter = _fresh(source, root, copy, manifest, options, out) if options.fresh else _given(options)
    launch = _launch(manifest, interpreter, copy, port)
    out.print(
        f"booting it as the organisers' harness runs it: in an empty folder, `{' '.join(manifest.serve)}`, the "
        f"manifest's env over a clean one, port {port}",
        markup=False,
    )
    prepare_s = _PREPARE_ALLOWANCE_S if options.fresh else 0.0
    engine = EngineProcess.for_profile(launch, profile, log_path=root / "serve.log", extra_boot_s=prepare_s)
    try:
        _boot_naming_missing_paths(engine, shown=interpreter.shown, out=out)
        tokenizer = Path(options.tokenizer or _tokenizer(launch.base_url, manifest.model_id))
        timed = _timed(launch, manifest, profile, bench=bench, tokenizer=tokenizer, work=root, out=out)
        with out.status("scoring PPL as their ppl_endpoint.py does"):
            with open_client(launch.base_url, timeout_s=profile.request_timeout_s) as client:
                ppl = measure_ppl(client, model=manifest.served_model_name, records=records)
        ids = audit(launch.base_url, model=manifest.served_model_name, record=records[0])
    finally:
        engine.stop()
    return _report(claim, timed=timed, ppl=ppl, ids=ids, profile=profile, out=out)


def _clean() -> dict[str, str]:
    return {k: os.environ[k] for k in CLEAN_ENV if k in os.environ}


def _given(options: CheckOptions) -> _Interpreter:
    """The check's own interpreter, in this environment's clean part."""
    return _Interpreter(python=Path(options.python), env=_clean(), shown=[])


def _fresh(
    source: Path, root: Path, copy: Path, manifest: Manifest, options: CheckOptions, out: Console
) -> _Interpreter:
    """A new virtual environment of the manifest's dependencies, an empty HOME, the isolated view's folders."""
    home = root / "home"
    home.mkdir()
    (root / "tmp").mkdir()
    out.print(
        f"checking {source} in a fresh environment: its {len(manifest.dependencies)} dependencies in a new virtual "
        "environment, booted in an isolated view of this machine (the folder, that environment, the system's "
        "programs and libraries; HOME and /tmp empty)",
        markup=False,
    )
    python = fresh_python(root, manifest.dependencies, folder=copy, wheelhouse=options.wheelhouse, out=out)
    clean = _clean() | {"HOME": str(home), "TMPDIR": "/tmp", "PATH": os.pathsep.join([str(python.parent), SYSTEM_PATH])}
    return _Interpreter(python=python, env=clean, shown=[copy, python.parent.parent, home])


def _launch(manifest: Manifest, interpreter: _Interpreter, copy: Path, port: int) -> LaunchConfig:
    """The manifest's ``serve`` from the folder's copy, ``python`` the interpreter's, isolated where it is."""
    argv = [str(interpreter.python) if manifest.serve[0] == "python" else manifest.serve[0], *manifest.serve[1:]]
    if interpreter.shown:  # the engine's owner mark stays on the sandbox's own process, which takes the stack with it
        argv = isolated(argv, writable=interpreter.shown, cwd=copy, unset=[OWNER_ENV])
    return LaunchConfig(
        argv=argv,
        env={**manifest.env, "PORT": str(port)},
        cwd=copy,
        host="127.0.0.1",
        port=port,
        served_model_name=manifest.served_model_name,
        manifest_name=manifest.name,
        base_env=interpreter.env,
    )


def _boot_naming_missing_paths(engine: EngineProcess, *, shown: list[Path], out: Console) -> None:
    """Boot the stack; where it fails, its log's last lines, and the paths outside the isolated view it looked
    for named in the error."""
    try:
        out.print(f"  ready after {_boot(engine, out=out):.1f} s", markup=False)
    except EngineError as exc:
        tail = exc.log_tail or engine.log_tail()
        out.print(f"the stack's log, its last lines:\n{tail}", markup=False)
        outside = missing_paths(tail, shown=shown) if shown else []
        if outside:
            raise type(exc)(
                f"{exc}\nIn the isolated view it looked for {', '.join(outside)}: outside the folder, a path of "
                "the machine that wrote it, which the organisers' machine does not have",
                log_tail=tail,
            ) from None
        raise


def _timed(
    launch: LaunchConfig,
    manifest: Manifest,
    profile: BenchProfile,
    *,
    bench: tuple[Path, str],
    tokenizer: Path,
    work: Path,
    out: Console,
) -> dict[str, float]:
    """TPS by the organisers' bench_serving: the held-out prompts first (a fresh boot's first run, on prompts
    nobody timed, is the private re-run's stand-in), then the public ones, which their public run times."""
    timed = {}
    for name, path in (("held-out", profile.heldout_prompts), ("public", profile.prompts)):
        with out.status(f"timing the {name} prompts with the organisers' bench_serving"):
            timed[name] = bench_serving(
                bench[0],
                bench[1],
                base_url=launch.base_url,
                model=manifest.served_model_name,
                tokenizer=tokenizer,
                prompts=profile.path(path),
                profile=profile,
                work=work,
            )
    return timed


def _report(
    claim: ClaimFile,
    *,
    timed: dict[str, float],
    ppl: PplResult,
    ids: list[int],
    profile: BenchProfile,
    out: Console,
) -> bool:
    target, gate = claim.claim_tps, claim.gate
    for name, tps in timed.items():
        out.print(
            f"  TPS, {name} prompts (the organisers' bench_serving, {profile.num_prompts} x {profile.output_len} "
            f"tokens): {tps:.2f}; claim {target:.2f} ({tps / target - 1:+.1%})",
            markup=False,
        )
    under = gate is not None and not over_gate(ppl.ppl, gate)
    out.print(
        f"  PPL (as their ppl_endpoint.py, {ppl.records} records, {ppl.target_tokens} tokens): {ppl.ppl:.4f}"
        + ("; no gate known" if gate is None else f"; gate {gate:.4f}, {'under' if under else 'OVER'} it"),
        markup=False,
    )
    out.print(f"  audit (/v1/completions, return_token_ids): {len(ids)} token ids back", markup=False)
    gap = timed["held-out"] / target - 1
    lands = within_tolerance(timed["held-out"], target)  # the organisers' rule, on one draw
    out.print(
        f"this draw {'lands' if lands else 'misses'}: its held-out run (one private re-run's "
        f"stand-in) reads {gap:+.1%} of the claim, {'within' if lands else 'outside'} "
        f"{TPS_TOLERANCE:.0%}; {claim.odds_text()}. One boot is one draw, no verdict; {claim.label} submission",
        markup=False,
    )
    return under
