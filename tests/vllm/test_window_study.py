"""Stock vLLM as a study's stack: a two-trial window study, end to end, on real vLLM.

``python -m sweep.run`` boots vLLM twice through the sweep's own path (Ray worker, run_trial,
EngineProcess): the baseline window (512) and a small one (32). Both trials must measure TPS,
PPL and the speculative-decoding counters from /metrics, the small window must raise PPL, and
no vLLM process may outlive the sweep. The only two vLLM boots of the suite.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import REPO_ROOT
from sweep.store import open_storage

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

STUDY = """\
name = "window-vllm-ci"
manifest = "vllm-cpu"
sampler = "grid"
seed = 1                   # the grid's first point is 32, right after the baseline (512)
n_trials = 2

[gate]
ppl_max_ratio = 1.05

[profile]
name = "quick"
num_prompts = 2
output_len = 64
ppl_records = 2
warmup_requests = 1
warmup_output_len = 8

[fidelity]
mode = "full"              # both trials measured to the end: what this test compares

[promotion]
candidates = 0             # the search alone: promotion has its own tests

[space.sliding_window]
choices = [32, 512]
"""


def processes_with_env(fragment: str) -> list[int]:
    """Live processes whose environment mentions ``fragment`` (vLLM's children inherit its env)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if fragment.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def study(vllm_venv, tmp_path_factory):
    folder = tmp_path_factory.mktemp("window-vllm")
    (folder / "window-vllm-ci.toml").write_text(STUDY)
    url = f"sqlite:///{folder / 'sweeps.db'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "sweep.run", "--study", str(folder / "window-vllm-ci.toml"), "--storage", url],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    storage = open_storage(url)
    try:
        records = {r.knobs["sliding_window"]: r for r in storage.records("window-vllm-ci")}
    finally:
        storage.close()
    return folder, result, records


def test_the_sweep_completes_both_trials_on_real_vllm(study):
    folder, result, records = study
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(records) == [32, 512]
    for window, record in records.items():
        assert record.status == "complete", f"window {window}: {record.reason}\n{record.log_tail}"
    assert records[512].is_baseline and not records[32].is_baseline
    for record in records.values():
        log = Path(record.env["VLLM_CACHE_ROOT"]).parent / "engine.log"
        assert log.is_file() and "Starting vLLM server" in log.read_text()
        assert log.resolve().is_relative_to(folder.resolve())  # caches stay in the run folder
        assert not Path(record.env["TMPDIR"]).exists()  # the sockets' short folder went with the trial


def test_both_trials_measure_tps_and_ppl_and_the_small_window_raises_ppl(study):
    _, _, records = study
    for record in records.values():
        m = record.measurement
        assert m.completion_tokens == 2 * 64 and record.tps > 0
        assert m.num_ppl_records == 2 and m.ppl_target_tokens > 32
    assert records[32].ppl > records[512].ppl * 1.01, (records[32].ppl, records[512].ppl)


def test_the_window_reached_vllm_as_an_hf_override(study):
    _, _, records = study
    for window, record in records.items():
        argv = record.argv
        assert json.loads(argv[argv.index("--hf-overrides") + 1]) == {"sliding_window": window}


def test_the_acceptance_counters_come_from_vllms_metrics(study):
    _, _, records = study
    for record in records.values():
        m = record.measurement
        assert m.drafted_tokens > 0 and 0 <= m.accepted_tokens <= m.drafted_tokens
        assert m.acceptance_rate == pytest.approx(m.accepted_tokens / m.drafted_tokens)


def test_no_vllm_process_outlives_the_sweep(study):
    folder, _, _ = study
    assert processes_with_env(str(folder)) == []
