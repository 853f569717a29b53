"""``python -m sweep.submit --study NAME``: the submission folder; ``--check DIR``: boot it as the organisers would.

Writing (``sweep.submission``): the study's VERIFIED point of the highest claim, by default into
``runs/exports/<study>/submission/``; with no VERIFIED point it exits 1 naming why, unless
``--allow-unverified`` (then the point of the highest P(VERIFIED), labelled so in its README).

Checking (``sweep.submission``): ``--check DIR`` copies the folder into an empty temporary folder and boots it
there as the organisers' harness runs a manifest (its ``serve`` argv, the manifest's env over a clean one, on
its port, ``--port`` moves it), times it with their own client (``bench_serving``: from ``python -m
engine.install sglang-bench``, or ``--bench-python`` / ``--bench-script``) on the held-out and the public
prompts, scores PPL, sends the audit request, and says whether this one draw lands within 5% of the claim,
beside its P(VERIFIED): one boot gives no verdict. ``python`` is this interpreter (or ``--python``) and HOME
this machine's; with ``--fresh`` the interpreter is a new virtual environment built from the manifest's
``dependencies`` alone (pip in a clean environment), and the stack boots in an isolated view of this machine
(bubblewrap: the folder, that environment, the system's programs and libraries, HOME and /tmp empty), as on a
machine that never ran this project; a path it needs outside that view is named.

``--wheelhouse DIR``: writing, the wheels the folder's dependencies resolve to are collected there (``pip
wheel``); checking with ``--fresh``, the folder is installed from them alone, no index and no network: the
check of a folder on a machine that reaches no index. The folder itself keeps its pins.

Exit status: 0 written (or, checking, the folder booted, was timed, scored under the gate and answered the
audit), 1 nothing to submit (or the stack failed to install, boot or answer, or its PPL is over the gate), 2
bad input.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from cli import command
from sweep.runs import RUN_DIR

__all__ = ["CheckArgs", "WriteArgs", "main", "parse_args"]


@dataclass(frozen=True, kw_only=True)
class WriteArgs:
    """``--study``: write the study's submission folder."""

    study: str
    storage: str
    out: Path | None
    manifest: str | None
    allow_unverified: bool
    wheelhouse: Path | None  # collect the folder's wheels there


@dataclass(frozen=True, kw_only=True)
class CheckArgs:
    """``--check DIR``: boot a submission folder as the organisers would, and time it."""

    folder: Path
    fresh: bool
    port: int | None
    python: str
    bench_python: str | None
    bench_script: str | None
    tokenizer: str | None
    wheelhouse: Path | None  # with ``fresh``: install from these wheels alone


def parse_args(argv: list[str] | None = None) -> WriteArgs | CheckArgs:
    from sweep.store import DEFAULT_STORAGE_URL

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
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="with --check: in a new virtual environment built from the manifest's dependencies alone, HOME an "
        "empty folder",
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        metavar="DIR",
        help="with --study: collect the wheels of the folder's dependencies into DIR; with --check --fresh: install "
        "from DIR alone, no index",
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
        "(default: the served model's own folder, as GET /v1/models names it, else the manifest's model_id)",
    )
    ns = parser.parse_args(argv)
    if (ns.study is None) == (ns.check is None):
        parser.error("give --study (write a submission) or --check DIR (boot one), one of the two")
    if ns.fresh and ns.check is None:
        parser.error("--fresh goes with --check DIR")
    if ns.wheelhouse is not None and ns.check is not None and not ns.fresh:
        parser.error("--wheelhouse with --check goes with --fresh (the new environment installs from it)")
    if ns.wheelhouse is not None and ns.check is not None and not ns.wheelhouse.is_dir():
        parser.error(f"--wheelhouse {ns.wheelhouse}: no such folder")
    if (ns.bench_python is None) != (ns.bench_script is None):
        parser.error("--bench-python and --bench-script go together")
    if ns.port is not None and not 1 <= ns.port <= 65535:
        parser.error(f"--port must be a TCP port, got {ns.port}")
    if ns.study is not None:
        return WriteArgs(
            study=ns.study,
            storage=ns.storage,
            out=ns.out,
            manifest=ns.manifest,
            allow_unverified=ns.allow_unverified,
            wheelhouse=ns.wheelhouse,
        )
    return CheckArgs(
        folder=ns.check,
        fresh=ns.fresh,
        port=ns.port,
        python=ns.python,
        bench_python=ns.bench_python,
        bench_script=ns.bench_script,
        tokenizer=ns.tokenizer,
        wheelhouse=ns.wheelhouse,
    )


def _write(args: WriteArgs, out: Console) -> int:
    from sweep.reading import read_study
    from sweep.submission import NothingToSubmit, submit_study

    # the study's verifications and calibrations are later runs: they measure how far a level moves (p_later)
    spec, evidence = read_study(args.study, storage=args.storage, manifest=args.manifest)
    folder = args.out or RUN_DIR / "exports" / spec.name / "submission"
    try:
        done = submit_study(
            spec,
            evidence,
            folder,
            allow_unverified=args.allow_unverified,
            commands=lambda choice: _commands(
                args, study=spec.name, trial=choice.record.trial_number, verified=choice.verified
            ),
        )
    except NothingToSubmit as exc:
        out.print(f"nothing to submit: {exc}", markup=False)
        return 1
    claim = done.claim
    out.print(
        f"submission of trial {claim.trial} ({claim.label}): TPS to report {claim.claim_tps:.2f}"
        + ("" if claim.p_verified is None else f", P(VERIFIED) {claim.p_verified:.2f}"),
        markup=False,
    )
    top = [path for path in done.written if path.parent == folder]
    for path in top:
        out.print(f"  {path}", markup=False)
    if len(done.written) > len(top):
        out.print(
            f"  and {len(done.written) - len(top)} file(s) in its folders: the stack's, the check's data", markup=False
        )
    if args.wheelhouse is not None:
        from sweep.submission import collect_wheels, read_dependencies

        wheels = collect_wheels(read_dependencies(folder), args.wheelhouse, folder=folder, out=out)
        out.print(
            f"wheelhouse {args.wheelhouse}: {len(wheels)} wheel(s); check the folder from them alone with "
            f"`python -m sweep.submit --check {folder} --fresh --wheelhouse {args.wheelhouse}`",
            markup=False,
        )
    return 0


def _commands(args: WriteArgs, *, study: str, trial: int, verified: bool) -> list[str]:
    """The commands that reproduce the folder's figures, as another machine would type them: the study by its
    name where it is one of this project's, a file of this machine by its name only."""
    from engine.config import is_plain_name
    from studies import STUDIES_DIR
    from sweep.store import shown_url

    given = Path(args.study)
    named = given.suffix != ".toml" or given.resolve() == (STUDIES_DIR / given.name).resolve()
    spec = study if named and is_plain_name(study) else f"<your copy of {given.name}>"
    store = shown_url(args.storage)
    if store.startswith("sqlite:///") and Path(store.removeprefix("sqlite:///")).is_absolute():
        store = f"sqlite:///<your copy of {Path(store).name}>"
    manifest = f" --manifest <your copy of {Path(args.manifest).name}>" if args.manifest else ""
    where = f"--study {spec} --storage {store}{manifest}"
    return [
        f"python -m sweep.run {where}",
        f"python -m sweep.claims --study {spec} --storage {store}",
        f"python -m sweep.verify {where} --trials {trial} --repeats 3",
        f"python -m sweep.submit {where}" + ("" if verified else " --allow-unverified"),
        "python -m sweep.submit --check <this folder> --fresh",
    ]


def _check(args: CheckArgs, out: Console) -> int:
    from sweep.submission import CheckOptions, check_folder

    source = args.folder.expanduser().resolve()
    options = CheckOptions(
        fresh=args.fresh,
        python=args.python,
        port=args.port,
        bench_python=args.bench_python,
        bench_script=args.bench_script,
        tokenizer=args.tokenizer,
        wheelhouse=args.wheelhouse.resolve() if args.wheelhouse else None,
    )
    return 0 if check_folder(source, options, out) else 1


# Ctrl-C, or SIGTERM while a check runs: what it started is stopped and removed
@command(parse_args, interrupted=True)
def main(args: WriteArgs | CheckArgs) -> int:
    out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    return _check(args, out) if isinstance(args, CheckArgs) else _write(args, out)


if __name__ == "__main__":
    sys.exit(main())
