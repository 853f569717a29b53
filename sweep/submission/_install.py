"""A folder's dependencies installed as the organisers' ``pip install`` would, and its wheelhouse.

Both run pip in a clean environment: an empty HOME (none of this user's configuration, no cache), the system's
``PATH``, no ``PIP_*`` of the caller's but one kind: where this machine's pip finds packages (its index, extra
indexes and find-links, read from every configuration pip reads here, the user's included), passed as
``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` / ``PIP_FIND_LINKS``: the stand-in for the organisers' own index
(on this project's machines the index is configured in the user's pip.conf). What reaches the network (a
proxy) stays. From a wheelhouse nothing of it applies: ``pip install --no-index --find-links`` with no
configuration file and none of those variables, in the isolated view without network.

    fresh_python    a new virtual environment with the dependencies installed; its interpreter
    collect_wheels  ``sweep.submit --wheelhouse DIR``: the wheels those dependencies resolve to (``pip wheel``),
                    so that a machine with no index installs the folder from them
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from errors import InstallError
from sweep.submission._sandbox import isolated

__all__ = ["SYSTEM_PATH", "collect_wheels", "fresh_python"]

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# What pip keeps of this environment: how to reach the network, nothing of this machine's files
_NETWORK_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
# Where packages come from, as `pip config list` names the settings, and the variable that passes each
_SOURCES = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL", "find-links": "PIP_FIND_LINKS"}


def _package_sources() -> dict[str, str]:
    """This machine's index, extra indexes and find-links as pip resolves them here (the caller's variables over
    the configuration files), as variables; {} where pip cannot tell."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    files: dict[str, str] = {}
    variables: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.rpartition(".")
        if name in _SOURCES and scope in (":env:", "global", "install", "wheel", "download"):
            (variables if scope == ":env:" else files)[_SOURCES[name]] = value.strip().strip("'\"")
    return files | variables


def _clean_env(home: Path, *, sources: bool = True) -> dict[str, str]:
    env = {"PATH": SYSTEM_PATH, "HOME": str(home), "TMPDIR": tempfile.gettempdir(), "LANG": "C.UTF-8"}
    env |= {k: os.environ[k] for k in _NETWORK_ENV if k in os.environ}
    return env | (_package_sources() if sources else {})


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


def fresh_python(root: Path, dependencies: list[str], *, folder: Path, wheelhouse: Path | None, out: Console) -> Path:
    """A new virtual environment under ``root`` with ``dependencies`` installed from the folder (a relative path
    in them is the folder's), as the module's docstring says; its interpreter."""
    venv, home = root / "venv", root / "pip-home"
    home.mkdir()
    env = _clean_env(home, sources=wheelhouse is None)
    _stream([sys.executable, "-m", "venv", str(venv)], cwd=root, env=env, title="a new virtual environment", out=out)
    python = venv / "bin" / "python"
    if not dependencies:
        return python
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir"]
    title = f"pip install of the manifest's {len(dependencies)} dependencies"
    if wheelhouse is None:
        _stream([*pip, *dependencies], cwd=folder, env=env, title=title, out=out)
        return python
    argv = [*pip, "--no-index", "--find-links", str(wheelhouse), *dependencies]
    sandboxed = isolated(argv, writable=[venv, home, folder], readable=[wheelhouse], cwd=folder, network=False)
    env |= {"PIP_CONFIG_FILE": os.devnull, "TMPDIR": "/tmp"}
    _stream(sandboxed, cwd=folder, env=env, title=f"{title} from the wheelhouse alone (no index, no network)", out=out)
    return python


def collect_wheels(dependencies: list[str], wheelhouse: Path, *, folder: Path, out: Console) -> list[Path]:
    """The wheels ``dependencies`` (the folder's, a relative path the folder's) resolve to, built or fetched into
    ``wheelhouse`` from this machine's index in a clean environment; the wheels it holds."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    if dependencies:
        with tempfile.TemporaryDirectory(prefix="wheelhouse-home-") as home:
            _stream(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--disable-pip-version-check",
                    "--no-cache-dir",
                    "--wheel-dir",
                    str(wheelhouse.resolve()),
                    *dependencies,
                ],
                cwd=folder,
                env=_clean_env(Path(home)),
                title=f"the wheels of the folder's {len(dependencies)} dependencies",
                out=out,
            )
    return sorted(wheelhouse.glob("*.whl"))
