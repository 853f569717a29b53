"""Where the noise is (``sweep.claims.decompose``), on boots drawn from a known world: each part it reports
is the part that was put in, and the stable configuration's parts are told apart from the noisy one's."""

from __future__ import annotations

import math
import random

import pytest

from sweep.claims import decompose, heldout_first
from sweep.store import BootRecord

PROMPTS = 24


def _run(label, *, level, prompts, rng, sd, rho, latency=2.0, step_ms=3.0, acceptance=0.92):
    """One timed run: each request's rate is the run's level, its prompt's and an AR(1) left-over of lag-1 ``rho``."""
    requests, start, e = [], 0.0, 0.0
    for p in prompts:
        e = rho * e + rng.gauss(0, sd * math.sqrt(1 - rho * rho))
        rate = math.exp(level + p + e)  # tokens a second
        seconds = 512 / rate
        requests.append([round(start, 4), round(seconds, 4), 512])
        start += seconds
    wall = start
    return {
        "label": label,
        "tps": PROMPTS * 512 / wall,
        "wall_s": wall,
        "requests": requests,
        "stack": {"step_ms": step_ms * rng.lognormvariate(0, 0.01), "acceptance": acceptance},
        "host": {"stack_migrations": 40, "cpu_steal": 0.0},
    }


def _boots(trial, *, boots, boot_sd, run_sd, request_sd, rho, seed):
    rng = random.Random(seed)
    prompts = {
        "public": [rng.gauss(0, 0.08) for _ in range(PROMPTS)],
        "heldout": [rng.gauss(0, 0.08) for _ in range(PROMPTS)],
    }
    out = []
    for r in range(boots):
        u = rng.gauss(0, boot_sd)
        order = ["heldout", "public"] if heldout_first(r) else ["public", "heldout"]
        runs = [
            _run(
                label,
                level=math.log(500) + u + rng.gauss(0, run_sd),
                prompts=prompts[label],
                rng=rng,
                sd=request_sd,
                rho=rho,
            )
            for label in order
        ]
        tps = {run["label"]: run["tps"] for run in runs}
        out.append(
            BootRecord(
                study_name="n",
                trial_number=trial,
                run_id="p",
                repeat=r,
                order=r,
                status="complete",
                claimed_tps=500.0,
                claimed_ppl=2.3,
                gate=2.42,
                prompts="h",
                refs="r",
                profile="q",
                first=order[0],
                public_tps=tps["public"],
                tps=tps["heldout"],
                ppl=2.3,
                telemetry={"runs": runs},
            )
        )
    return out


def test_each_part_is_the_part_put_in():
    (parts,) = decompose(_boots(1, boots=40, boot_sd=0.05, run_sd=0.02, request_sd=0.03, rho=0.4, seed=1))
    assert parts.boots == 40 and parts.runs == 80
    # a run's TPS averages 24 requests: their own noise adds sqrt(1/24) of a request's to the run's part
    assert parts.boot == pytest.approx(0.05, rel=0.3) and parts.run == pytest.approx(0.02, rel=0.5)
    assert parts.prompt == pytest.approx(0.08, rel=0.3)  # the prompts' own spread, fixed for every boot
    assert parts.request == pytest.approx(0.03, rel=0.2)
    assert parts.lag1 == pytest.approx(0.4, abs=0.1)  # requests in streaks
    assert parts.step_ms == pytest.approx(3.0, rel=0.01) and parts.acceptance == pytest.approx(0.92)
    assert parts.acceptance_cv == 0.0 and parts.migrations == 40 and parts.steal == 0.0


def test_independent_requests_have_no_streaks_and_a_noisy_configuration_reads_noisier():
    steady, noisy = decompose(
        [
            *_boots(1, boots=12, boot_sd=0.005, run_sd=0.005, request_sd=0.01, rho=0.0, seed=2),
            *_boots(2, boots=12, boot_sd=0.08, run_sd=0.005, request_sd=0.04, rho=0.6, seed=3),
        ]
    )
    assert abs(steady.lag1) < 0.15 < noisy.lag1
    assert steady.boot < 0.02 < noisy.boot and steady.request < noisy.request
    assert steady.window_cv < noisy.window_cv


def test_boots_without_telemetry_keep_the_boot_and_run_parts_alone():
    bare = [
        b.__class__(**{**b.__dict__, "telemetry": {}})
        for b in _boots(1, boots=4, boot_sd=0.03, run_sd=0.01, request_sd=0.01, rho=0.0, seed=4)
    ]
    (parts,) = decompose(bare)
    assert parts.boot > 0 and parts.runs == 0
    assert (parts.prompt, parts.request, parts.lag1, parts.window_cv, parts.step_ms, parts.migrations) == (None,) * 6
