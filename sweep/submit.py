"""``python -m sweep.submit --study NAME``: the submission folder; ``--check DIR``: boot it as the organisers would.

Writing (``sweep.submission``): the study's VERIFIED point of the highest claim, by default into
``runs/exports/<study>/submission/``; with no VERIFIED point it exits 1 naming why, unless
``--allow-unverified`` (then the point of the highest P(VERIFIED), labelled so in its README).

Checking: ``--check DIR`` copies the folder to an empty temporary folder and boots it there as the
organisers' harness runs a manifest: from that folder, its ``serve`` argv (``python`` is this
interpreter, or ``--python``), the manifest's env over a clean one (only ``PATH``, ``HOME``, the
locale, ``TMPDIR``, ``PYTHONPATH``, ``CUDA_VISIBLE_DEVICES`` and the variables a folder's README
names, ``GEMMA_SWEEP_CHECKPOINT``, ``GEMMA_SWEEP_CACHE``, ``GEMMA_SWEEP_REPO``, pass through), on its
port (``--port`` moves it), until ``GET /v1/models`` answers. Then it times the stack with their own
client (``bench_serving``, ``engine.organisers``: from ``python -m engine.install sglang-bench``, or
``--bench-python`` / ``--bench-script`` where it is installed otherwise) on the claim's public
prompts at the claim's sizes, scores PPL on the claim's references as their ``ppl_endpoint.py``
does, sends the audit request, stops the stack and prints the expected verdict against the claim.

Exit status: 0 written (or, checking, a verdict of VERIFIED expected), 1 nothing to submit (or
INVALID expected, or the stack failed), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from errors import ConfigError, EngineError, GemmaSweepError, InstallError, UsageError

__all__ = ["CLEAN_ENV", "SubmitArgs", "main", "parse_args"]

RUN_DIR = Path("runs")
# What passes from this environment into the clean one a submission boots in: what any process
# needs, where its dependencies live, and the variables a submission's README names.
CLEAN_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "PYTHONPATH",
    "CUDA_VISIBLE_DEVICES",
    "GEMMA_SWEEP_CHECKPOINT",
    "GEMMA_SWEEP_CACHE",
    "GEMMA_SWEEP_REPO",
    "VLLM_USE_FLASHINFER_SAMPLER",
)


@dataclass(frozen=True, kw_only=True)
class SubmitArgs:
    study: str | None
    storage: str
    out: Path | None
    manifest: str | None
    allow_unverified: bool
    check: Path | None
    port: int | None
    python: str
    bench_python: str | None
    bench_script: str | None
    tokenizer: str | None


def parse_args(argv: list[str] | None = None) -> SubmitArgs:
    from sweep.storage import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.submit", description=__doc__.splitlines()[0])
    parser.add_argument("--study", help="the study (name or .toml path): write its submission folder")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--out", type=Path, help="the folder to write (default runs/exports/<study>/submission)")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument(
        "--allow-unverified",
        action="store_true",
        help="with no VERIFIED point, write the one of the highest P(VERIFIED), labelled so",
    )
    parser.add_argument(
        "--check", type=Path, metavar="DIR", help="boot a submission folder as the organisers would, and time it"
    )
    parser.add_argument("--port", type=int, help="with --check: the port to boot on (default the manifest's)")
    parser.add_argument(
        "--python", default=sys.executable, help="with --check: the interpreter `python` means (default this one)"
    )
    parser.add_argument(
        "--bench-python",
        help="with --check: the interpreter bench_serving runs in (default: engine.install sglang-bench's)",
    )
    parser.add_argument(
        "--bench-script", help="with --check: the path of sglang's bench_serving.py (with --bench-python)"
    )
    parser.add_argument(
        "--tokenizer",
        help="with --check: the tokenizer folder bench_serving counts prompts with "
        "(default: the claim's, the reference checkpoint's for its stacks)",
    )
    ns = parser.parse_args(argv)
    if (ns.study is None) == (ns.check is None):
        parser.error("give --study (write a submission) or --check DIR (boot one), one of the two")
    if (ns.bench_python is None) != (ns.bench_script is None):
        parser.error("--bench-python and --bench-script go together")
    if ns.port is not None and not 1 <= ns.port <= 65535:
        parser.error(f"--port must be a TCP port, got {ns.port}")
    return SubmitArgs(
        study=ns.study,
        storage=ns.storage,
        out=ns.out,
        manifest=ns.manifest,
        allow_unverified=ns.allow_unverified,
        check=ns.check,
        port=ns.port,
        python=ns.python,
        bench_python=ns.bench_python,
        bench_script=ns.bench_script,
        tokenizer=ns.tokenizer,
    )


def _write(args: SubmitArgs, out: Console) -> int:
    import optuna

    from sweep.claims import PROMOTION_ATTR, claims_of
    from sweep.spec import load_study
    from sweep.storage import open_existing
    from sweep.storage_url import shown_url
    from sweep.submission import NothingToSubmit, choose, write_submission
    from sweep.verification import latest_verdicts

    spec = load_study(args.study, manifest=args.manifest)  # type: ignore[arg-type]
    storage = open_existing(args.storage)
    try:
        try:
            study = optuna.load_study(study_name=spec.name, storage=storage.optuna)
        except KeyError:
            raise UsageError(
                f"study {spec.name!r} not found in {shown_url(args.storage)}: run the sweep first"
            ) from None
        plan = study.user_attrs.get(PROMOTION_ATTR)
        # the study's verifications are later runs: they measure how far a level moves between runs (p_later)
        view = (
            claims_of(plan, storage.boots("promotion", spec.name), storage.boots("verification", spec.name))
            if plan
            else None
        )
        records = storage.records(spec.name, token_ids=False)
        verdicts = latest_verdicts(storage, spec.name)
        stored = study.user_attrs.get("manifest_json")
    finally:
        storage.close()
    if not isinstance(stored, dict):
        raise UsageError(f"study {spec.name!r} stored no manifest (a study of an older version of this tool)")
    claims = {c.trial_number: c for c in view.claims} if view else {}
    try:
        choice = choose(records, verdicts=verdicts, claims=claims, allow_unverified=args.allow_unverified)
    except NothingToSubmit as exc:
        out.print(f"nothing to submit: {exc}", markup=False)
        return 1
    promoted = choice.claim is not None and plan is not None
    profile = plan["profile"] if promoted else choice.record.profile  # type: ignore[index]
    gate = view.gate if promoted else choice.record.gate  # type: ignore[union-attr]
    checkpoint = None  # the model's folder: what a vLLM stack serves, whose tokenizer bench_serving counts with
    if "{reference_checkpoint}" in json.dumps(stored) or "engine.reference.serve" in stored.get("serve", []):
        from engine.reference.prepare import prepare_model

        checkpoint = str(prepare_model().checkpoint_dir)
    folder = args.out or RUN_DIR / "exports" / spec.name / "submission"
    store = shown_url(args.storage)
    commands = [
        f"python -m sweep.run --study {args.study} --storage {store}",
        f"python -m sweep.claims --study {spec.name} --storage {store}",
        f"python -m sweep.verify --study {args.study} --storage {store} --trials {choice.record.trial_number} --repeats 3",
        f"python -m sweep.submit --study {args.study} --storage {store}"
        + (" --allow-unverified" if not choice.verified else ""),
        f"python -m sweep.submit --check {folder}",
    ]
    measured = [b.provenance for b in (view.boots if view else []) if b.trial_number == choice.record.trial_number]
    written = write_submission(
        folder,
        choice,
        stored=stored,
        model_id=spec.manifest.model_id,
        study=spec.name,
        profile=dict(profile),
        gate=gate,
        commands=commands,
        checkpoint=checkpoint,
        provenance=next((p for p in measured if p), choice.record.provenance),
        between=view.between if view else None,
    )
    out.print(
        f"submission of trial {choice.record.trial_number} ({choice.label}): TPS to report {choice.tps:.2f}"
        + (f", P(VERIFIED) {choice.claim.p_verified:.2f}" if choice.claim else ""),
        markup=False,
    )
    for path in written:
        out.print(f"  {path}", markup=False)
    return 0


def _check(args: SubmitArgs, out: Console) -> int:
    from engine.bench import measure_ppl, open_client
    from engine.install import install_stack
    from engine.launch import LaunchConfig
    from engine.manifest import parse_manifest
    from engine.organisers import audit, bench_serving
    from engine.process import EngineProcess
    from engine.profiles import BenchProfile
    from sweep.estimate import TPS_TOLERANCE
    from sweep.judgement import over_gate

    source = args.check.expanduser().resolve()  # type: ignore[union-attr]
    try:
        data = json.loads((source / "manifest.json").read_text())
        claim = json.loads((source / "claim.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--check {source}: not a submission folder of this tool ({exc})") from None
    profile = BenchProfile.from_record(claim["profile"])
    prompts, records = profile.load_data()
    tokenizer = args.tokenizer or claim["tokenizer"]
    if tokenizer is None:
        raise UsageError(f"--check {source}: bench_serving needs the model's tokenizer folder: pass --tokenizer")
    if args.bench_python:
        assert args.bench_script is not None  # parse_args: the two go together
        bench_python, script = Path(args.bench_python), args.bench_script
    else:
        sglang = install_stack("sglang-bench")
        bench_python, script = sglang.python, sglang.versions["bench_serving"]
    work = Path(tempfile.mkdtemp(prefix="submission-check-"))
    copy = work / "submission"
    shutil.copytree(source, copy)
    manifest = parse_manifest(data, source=copy / "manifest.json")
    port = args.port or manifest.port
    argv = [args.python if manifest.serve[0] == "python" else manifest.serve[0], *manifest.serve[1:]]
    clean = {k: os.environ[k] for k in CLEAN_ENV if k in os.environ}
    launch = LaunchConfig(
        argv=argv,
        env={**manifest.env, "PORT": str(port), "HF_HUB_OFFLINE": "1"},
        cwd=copy,
        host="127.0.0.1",
        port=port,
        served_model_name=manifest.served_model_name,
        manifest_name=manifest.name,
        base_env=clean,
    )
    out.print(
        f"checking {source} as the organisers' harness runs it: in {copy}, `{' '.join(manifest.serve)}`, "
        f"the manifest's env over a clean one, port {port}",
        markup=False,
    )
    engine = EngineProcess(launch, log_path=work / "serve.log", boot_timeout_s=profile.boot_timeout_s)
    engine.start()
    try:
        out.print(f"  ready after {engine.wait_ready():.1f} s", markup=False)
        # the held-out prompts first: a fresh boot's first run, on prompts nobody timed, is the organisers'
        # private re-run; then the public ones, which their public run times
        timed = {
            name: bench_serving(
                bench_python,
                script,
                base_url=launch.base_url,
                model=manifest.served_model_name,
                tokenizer=Path(tokenizer),
                prompts=profile.path(path),
                profile=profile,
                work=work,
            )
            for name, path in (("held-out", profile.heldout_prompts), ("public", profile.prompts))
        }
        with open_client(launch.base_url, timeout_s=profile.request_timeout_s) as client:
            ppl = measure_ppl(client, model=manifest.served_model_name, records=records)
        ids = audit(launch.base_url, model=manifest.served_model_name, record=records[0])
    finally:
        engine.stop()
    gap = timed["held-out"] / claim["claim_tps"] - 1
    gate = claim["gate"]
    ok = abs(gap) <= TPS_TOLERANCE and gate is not None and not over_gate(ppl.ppl, gate)
    for name, tps in timed.items():
        out.print(
            f"  TPS, {name} prompts (the organisers' bench_serving, {profile.num_prompts} x {profile.output_len} tokens): "
            f"{tps:.2f}; claim {claim['claim_tps']:.2f} ({tps / claim['claim_tps'] - 1:+.1%})",
            markup=False,
        )
    out.print(
        f"  PPL (as their ppl_endpoint.py, {ppl.records} records, {ppl.target_tokens} tokens): {ppl.ppl:.4f}"
        + ("" if gate is None else f"; gate {gate:.4f}"),
        markup=False,
    )
    out.print(f"  audit (/v1/completions, return_token_ids): {len(ids)} token ids back", markup=False)
    odds = (
        ""
        if claim["p_verified"] is None
        else f" (the claim's P(VERIFIED): {claim['p_verified']:.2f}"
        + ("" if claim.get("p_later") is None else f"; for a later run {claim['p_later']:.2f}")
        + ")"
    )
    out.print(
        f"expected verdict: {'VERIFIED' if ok else 'INVALID'}: this boot's held-out run (a private re-run's stand-in) "
        f"{'lands' if abs(gap) <= TPS_TOLERANCE else 'does not land'} within {TPS_TOLERANCE:.0%} of the claim"
        + ("" if gate is None or not over_gate(ppl.ppl, gate) else ", and its PPL is over the gate")
        + f"{odds}; one boot, so one draw of a private re-run; {claim['label']} submission",
        markup=False,
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    try:
        return _check(args, out) if args.check is not None else _write(args, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (EngineError, InstallError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except GemmaSweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
