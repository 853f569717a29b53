"""No subprocess goes through a shell: a static check over the source, and argv/env that would
mean something to a shell reaching a process untouched.

The runtime check over a whole sweep (every process it starts, through audit hooks) is in
``test_sweep.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import REPO_ROOT, parse_manifest
from engine.launch import EngineProcess, build_launch
from errors import EngineBootError

SOURCE_DIRS = ("engine", "sweep", "dashboards", "benchmarks", "tests")
# Calls that always run a shell (or build a command line for one).
SHELL_CALLS = {
    "os.system",
    "os.popen",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "asyncio.create_subprocess_shell",
    "pty.spawn",
}


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    return None


def shell_uses(source: str, filename: str = "<source>") -> list[str]:
    """Every shell-running call in a module: ``shell=`` anything but False, or a shell API."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func, aliases)
        if name in SHELL_CALLS:
            found.append(f"{filename}:{node.lineno}: {name}()")
        for keyword in node.keywords:
            if keyword.arg == "shell" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                found.append(f"{filename}:{node.lineno}: {name}(shell={ast.unparse(keyword.value)})")
    return found


def test_the_checker_finds_every_form_of_shell_use():
    source = """
import os, subprocess as sp
from os import system as run
from subprocess import Popen
os.system("ls")
run("ls")
os.popen("ls")
sp.run("ls", shell=True)
Popen("ls", shell=flag)
sp.getoutput("ls")
sp.run(["ls"], shell=False)
"""
    assert [line.split(": ", 1)[1] for line in shell_uses(source)] == [
        "os.system()",
        "os.system()",
        "os.popen()",
        "subprocess.run(shell=True)",
        "subprocess.Popen(shell=flag)",
        "subprocess.getoutput()",
    ]


def test_no_source_file_runs_a_shell():
    files = [p for d in SOURCE_DIRS for p in (REPO_ROOT / d).rglob("*.py")]
    assert len(files) > 50  # the scan really covered the project
    found = [use for path in files for use in shell_uses(path.read_text(), str(path.relative_to(REPO_ROOT)))]
    assert found == []


# Strings a shell would expand, split or redirect; a process started without one sees them as-is.
_SHELL_TEXT = st.lists(
    st.sampled_from(
        [
            "$(touch pwned)",
            "`touch pwned`",
            "; touch pwned",
            "&& touch pwned",
            "| touch pwned",
            "> pwned",
            "$HOME",
            "${PATH}",
            "'",
            '"',
            "\\",
            "*",
            "~",
            "#",
            "\n",
            " ",
            "a b",
            "é",
            "{}",
        ]
    ),
    min_size=1,
    max_size=4,
).map("".join)
_ECHO = "import json, os, sys; print('ARGS ' + json.dumps([sys.argv[1:], os.environ['PROBE']]))"


@settings(max_examples=12, deadline=None)
@given(arg=_SHELL_TEXT, value=_SHELL_TEXT)
def test_argv_and_env_reach_the_stack_verbatim(arg, value, tmp_path_factory):
    folder = tmp_path_factory.mktemp("noshell")
    manifest = parse_manifest(
        {
            "name": "echo",
            "model_id": "m",
            "served_model_name": "m",
            "serve": ["{python}", "-c", _ECHO, arg],
            "env": {"PROBE": value},
        }
    )
    launch = dataclasses.replace(build_launch(manifest), cwd=folder)
    engine = EngineProcess(launch, log_path=folder / "engine.log", boot_timeout_s=30)
    engine.start()
    with pytest.raises(EngineBootError, match="exited with status 0 during boot"):
        engine.wait_ready()
    printed = next(line for line in (folder / "engine.log").read_text().splitlines() if line.startswith("ARGS "))
    assert json.loads(printed[5:]) == [[arg], value]
    assert not (folder / "pwned").exists()
