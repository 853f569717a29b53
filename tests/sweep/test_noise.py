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
            _boot(
                trial,
                r,
                runs,
                run_id="p",
                claimed_tps=500.0,
                claimed_ppl=2.3,
                gate=2.42,
                prompts="h",
                first=order[0],
                public_tps=tps["public"],
                tps=tps["heldout"],
            )
        )
    return out


def _boot(trial: int, r: int, runs: list[dict], **fields) -> BootRecord:
    """A complete boot, the ``r``-th of its run, whose telemetry holds ``runs``."""
    return BootRecord(
        study_name="n",
        trial_number=trial,
        repeat=r,
        order=r,
        status="complete",
        refs="r",
        profile="q",
        ppl=2.3,
        telemetry={"runs": runs},
        **fields,
    )


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


def _fixed(trial, *, boots, runs, boot_sd, run_sd, seed, stall=None):
    """Boots of ``runs`` runs in one fixed order (benchmarks.noise's slices); ``stall(rng)``: seconds of stalls a
    run gains on top of its steady time, recorded in its step distribution."""
    rng = random.Random(seed)
    out = []
    for r in range(boots):
        u = rng.gauss(0, boot_sd)
        entries = []
        for j in range(runs):
            steady = 512 * PROMPTS / (500 * math.exp(0.03 * j + u + rng.gauss(0, run_sd)))
            stalled = stall(rng) if stall else 0.0
            wall = steady + stalled
            times = {"stall_s": stalled, "stall_share": stalled / wall, "stalled": stalled > 0.02 * wall}
            entries.append(
                {
                    "label": "public",
                    "tps": 512 * PROMPTS / wall,
                    "wall_s": wall,
                    "stack": {"step_times": {**times, "p50_ms": 4.0, "p99_ms": 5.0}},
                }
            )
        out.append(
            _boot(
                trial,
                r,
                entries,
                run_id="noise",
                claimed_tps=0.0,
                claimed_ppl=0.0,
                gate=None,
                prompts="slice 2",
                first="public",
                public_tps=entries[0]["tps"],
                tps=entries[1]["tps"],
            )
        )
    return out


def test_boots_of_one_fixed_order_split_into_boot_and_run_over_all_their_runs():
    (parts,) = decompose(_fixed(0, boots=60, runs=4, boot_sd=0.04, run_sd=0.02, seed=3))
    assert parts.runs == 240 and parts.df == 59
    assert parts.boot == pytest.approx(0.04, rel=0.25)
    assert parts.run == pytest.approx(0.02, rel=0.15)


def test_with_two_runs_in_one_order_the_split_is_the_fit_of_the_claims():
    from sweep.claims import fit

    boots = _fixed(0, boots=12, runs=2, boot_sd=0.03, run_sd=0.02, seed=4)
    (parts,) = decompose(boots)
    spread = fit(boots, floor=0.0).spreads[0]
    assert (parts.boot, parts.run) == pytest.approx((spread.sigma_boot, spread.sigma_run))


def test_run_noise_that_stalls_made_falls_once_their_time_is_taken_out():
    # runs steady to 0.5%, but one run in three gains 1-3 s of frozen steps
    boots = _fixed(
        0, boots=20, runs=4, boot_sd=0.01, run_sd=0.005, seed=5, stall=lambda r: r.uniform(1, 3) * (r.random() < 0.33)
    )
    (parts,) = decompose(boots)
    assert parts.run > 0.03
    assert parts.run_without_stalls is not None and parts.run_without_stalls < 0.01
    assert 0 < parts.stalled_runs < 80 and parts.stall_share > 0.01
    # slow steps instead (every step of a run slower): the run noise stays where it is
    (steady,) = decompose(_fixed(0, boots=20, runs=4, boot_sd=0.01, run_sd=0.04, seed=6))
    assert steady.run_without_stalls == pytest.approx(steady.run)
    assert steady.stalled_runs == 0
