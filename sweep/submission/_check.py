"""Boot a submission folder as the organisers' harness would, and time it with their own client.

``check_folder`` copies the folder into an empty temporary folder and boots it there as the harness runs a
manifest: from that folder, its ``serve`` argv (``python`` is the check's interpreter), the manifest's env over
a clean one (only ``PATH``, ``HOME``, the locale, ``TMPDIR`` and ``CUDA_VISIBLE_DEVICES``: no ``GEMMA_SWEEP_*``,
no ``PYTHONPATH``, nothing that names this checkout; the one variable added is the owner mark by which
``engine.process`` finds a stack its checker lost), on its port, until ``GET /v1/models`` answers. With
``fresh`` it is the organisers' machine as near as this one gets: a new virtual environment built from the
manifest's ``dependencies`` alone (plain ``pip install``, with this machine's pip configuration: the index
the README's install uses) is the interpreter, and ``HOME`` an empty folder, so the folder finds nothing this
machine prepared (its model, caches). Then it times the stack with the organisers' client (``bench_serving``,
``engine.organisers``) on the held-out prompts (a fresh boot's first run: a private re-run's stand-in) and
the public ones, at the claim's sizes, scores PPL on the claim's references as their ``ppl_endpoint.py``
does, sends the audit request, and stops the stack. Every temporary folder goes whatever happens (a failure,
Ctrl-C, SIGTERM).

One boot is one draw of a private re-run: the check says whether this draw lands within 5% of the claim,
beside the claim's P(VERIFIED), and gives no verdict. It passes (``True``) when the folder booted, was timed,
scored under the gate and answered the audit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
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

from engine.bench import PplResult, measure_ppl, open_client
from engine.data import PplRecord
from engine.install import install_stack
from engine.launch import LaunchConfig
from engine.manifest import Manifest, parse_manifest
from engine.organisers import audit, bench_serving
from engine.process import EngineProcess
from engine.profiles import BenchProfile
from errors import EngineError, InstallError, UsageError
from sweep.interrupts import raise_interrupt
from sweep.judgement import TPS_TOLERANCE, over_gate, within_tolerance
from sweep.submission._claimfile import CLAIM_FILE, ClaimFile, read_claim
from sweep.submission._folder import FOLDER_MARK

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


@contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs, so that the cleanup below runs on it too."""
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stream(argv: list[str], *, cwd: Path, env: dict[str, str], title: str, out: Console) -> None:
    """Run one step, its last output line as the progress line; its output's tail in the error if it fails."""
    began, lines = time.monotonic(), []
    with out.status(title) as status:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.strip():
                    status.update(f"{title} ({time.monotonic() - began:.0f} s): {line.strip()[:100]}")
            code = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: the step goes too
                proc.kill()
                proc.wait()
    if code != 0:
        raise InstallError(f"{title} failed (exit {code}):\n{''.join(lines[-25:]).rstrip()}")
    out.print(f"  {title}: {time.monotonic() - began:.0f} s", markup=False)


def _fresh_python(root: Path, dependencies: list[str], *, folder: Path, out: Console) -> Path:
    """A new virtual environment under ``root`` with ``dependencies`` installed as the organisers' ``pip
    install`` would, from the folder (a relative path in them is the folder's); its interpreter."""
    venv = root / "venv"
    # pip with this machine's configuration (its index, find-links, constraints): HOME and PIP_* stay; nothing
    # of this checkout goes in
    pip_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    _stream(
        [sys.executable, "-m", "venv", str(venv)],
        cwd=root,
        env=pip_env,
        title="a new virtual environment",
        out=out,
    )
    python = venv / "bin" / "python"
    if dependencies:
        _stream(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", *dependencies],
            cwd=folder,
            env=pip_env,
            title=f"pip install of the manifest's {len(dependencies)} dependencies",
            out=out,
        )
    return python


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
    clean = {k: os.environ[k] for k in CLEAN_ENV if k in os.environ}
    if options.fresh:
        home, tmp = root / "home", root / "tmp"
        home.mkdir()
        tmp.mkdir()
        out.print(
            f"checking {source} in a fresh environment: its {len(manifest.dependencies)} dependencies in a new virtual "
            "environment, HOME an empty folder",
            markup=False,
        )
        python = _fresh_python(root, manifest.dependencies, folder=copy, out=out)
        clean |= {"HOME": str(home), "TMPDIR": str(tmp), "PATH": os.pathsep.join([str(python.parent), clean["PATH"]])}
    else:
        python = Path(options.python)
    argv = [str(python) if manifest.serve[0] == "python" else manifest.serve[0], *manifest.serve[1:]]
    launch = LaunchConfig(
        argv=argv,
        env={**manifest.env, "PORT": str(port)},
        cwd=copy,
        host="127.0.0.1",
        port=port,
        served_model_name=manifest.served_model_name,
        manifest_name=manifest.name,
        base_env=clean,
    )
    out.print(
        f"booting it as the organisers' harness runs it: in an empty folder, `{' '.join(manifest.serve)}`, the "
        f"manifest's env over a clean one, port {port}",
        markup=False,
    )
    timeout = profile.boot_timeout_s + (_PREPARE_ALLOWANCE_S if options.fresh else 0.0)
    engine = EngineProcess(launch, log_path=root / "serve.log", boot_timeout_s=timeout)
    try:
        try:
            out.print(f"  ready after {_boot(engine, out=out):.1f} s", markup=False)
        except EngineError as exc:
            out.print(f"the stack's log, its last lines:\n{exc.log_tail or engine.log_tail()}", markup=False)
            raise
        tokenizer = Path(options.tokenizer or _tokenizer(launch.base_url, manifest.model_id))
        timed = {}
        # the held-out prompts first: a fresh boot's first run, on prompts nobody timed, is the private re-run's
        # stand-in; then the public ones, which their public run times
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
                    work=root,
                )
        with out.status("scoring PPL as their ppl_endpoint.py does"):
            with open_client(launch.base_url, timeout_s=profile.request_timeout_s) as client:
                ppl = measure_ppl(client, model=manifest.served_model_name, records=records)
        ids = audit(launch.base_url, model=manifest.served_model_name, record=records[0])
    finally:
        engine.stop()
    return _report(claim, timed=timed, ppl=ppl, ids=ids, profile=profile, out=out)


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
