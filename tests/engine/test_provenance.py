"""What a stack ran with, for a submission's pins: the manifest's dependencies and everything they require, as the
stack's own interpreter has them installed, read from real distribution metadata; and the threads it computed on."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

from engine.host import KEYS, pins, provenance
from engine.stackside import free_port


def _distribution(site: Path, name: str, version: str, *, requires: list[str] = (), direct: dict | None = None) -> None:
    """An installed distribution as pip leaves one: its ``.dist-info`` folder (no code needed to read it)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    if direct is not None:
        (info / "direct_url.json").write_text(json.dumps(direct))


def test_each_dependency_and_what_it_requires_is_pinned_as_the_stacks_interpreter_has_it(tmp_path):
    site = tmp_path / "site"
    token = "ghp_0a1b2c3d4e5f6a7b"
    _distribution(
        site,
        "stack-core",
        "0.22.1rc1.dev307+g3e8afdf78",  # a commit in the version: part of the code, kept
        requires=["stack-kernels>=1", "jinja2", 'stack-extra; extra == "extra"', 'stack-old; python_version < "3"'],
        direct={"url": f"https://{token}@wheels.example/stack_core.whl", "archive_info": {}},
    )
    _distribution(site, "stack-kernels", "2.13.0+cu129")  # a build for one accelerator: that build is pinned
    _distribution(site, "stack-extra", "1.0")
    _distribution(site, "stack-old", "1.0")
    _distribution(
        site,
        "stack-git",
        "3.0",
        direct={"url": "https://git.example/r", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
    )
    _distribution(
        site, "stack-local", "4.0", direct={"url": "file:///somewhere/stack-local", "dir_info": {"editable": True}}
    )
    env = {**os.environ, "PYTHONPATH": str(site)}

    unnamed = f"https://ci:{token}@wheels.example/nameless.whl"  # a URL with no name: nothing answers to it
    found, note = pins(
        ["stack-core", "stack-git", "stack-local", "not-installed-here", unnamed], python=sys.executable, env=env
    )

    jinja, markupsafe = (importlib.metadata.distribution(n) for n in ("jinja2", "markupsafe"))
    assert found == {
        "stack-core": "stack-core @ https://***@wheels.example/stack_core.whl",
        "stack-kernels": "stack-kernels==2.13.0+cu129",
        "stack-git": "stack-git @ git+https://git.example/r@abc123",
        # a folder on this machine: named by it, for the submission to refuse (sweep.submission's pins)
        "stack-local": "stack-local @ file:///somewhere/stack-local",
        # what jinja2 requires comes with it, as this interpreter has both
        "jinja2": f"{jinja.metadata['Name']}=={jinja.version}",
        "markupsafe": f"{markupsafe.metadata['Name']}=={markupsafe.version}",
    }
    assert token not in json.dumps(found)
    # an extra nobody asked for and a marker false here add nothing; a name not installed is said
    assert note == "not installed where the stack runs: https://ci:***@wheels.example/nameless.whl, not-installed-here"
    assert pins([], python=sys.executable) == ({}, None)
    assert (
        pins(["jinja2"], python=str(tmp_path / "no-python"))[1] == "reading the installed packages: FileNotFoundError"
    )


def test_the_threads_a_stack_computed_on_are_recorded_and_a_value_that_is_no_count_is_said_so():
    # nothing listens there: the stack's own version is unread (a note), the rest is read all the same
    url = f"http://127.0.0.1:{free_port()}"
    for env, threads in [({"OMP_NUM_THREADS": "2"}, 2), ({}, None), ({"OMP_NUM_THREADS": "all"}, None)]:
        found = provenance(url, argv=[sys.executable], env=env, stack="openai")
        assert set(found) == set(KEYS) and found["threads"] == threads, found
        assert any("'all' is not a count of threads" in n for n in found["notes"]) == (
            env.get("OMP_NUM_THREADS") == "all"
        )
