"""Claims of goodput over fresh boots (``sweep.claims._serving``): a serving study over a stub whose latencies are
known, searched, promoted and confirmed over interleaved fresh boots on real Ray, SQLite and HTTP, each boot running
the study's load levels. The stub serves one request at a time (``STUB_SERIAL=1``): alone a request takes one
service, known in advance; at 2 in flight the second waits for the first, two services. The SLO bounds end-to-end
latency a margin above one service: 1 in flight holds it, 2 miss it. Over a steady stub the claim at 1 in flight
reaches the target and is recommended; over a stub whose every boot reads far apart (``STUB_BOOT_NOISE``, large
against that margin) a re-run may land either side of the bound, and it is not."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import optuna
import pandas as pd
from rich.console import Console

from benchmarks._draw import drawn_boots
from dashboards.best import write_best
from dashboards.data import load_study_data
from dashboards.table import trials_frame
from engine.bench import percentiles
from engine.measurement import LoadLevel, LoadRequest
from sweep.claims import (
    confirm,
    goodput_reading,
    held_load,
    load_evidence,
    promote,
    ratio_reading,
    serving_claims,
)
from sweep.claims.cli import main as claims_main
from sweep.judgement import Slo
from sweep.search import load_study
from sweep.store import BootRecord, open_storage, read_record
from tests.stacks import stub_manifest, stub_profile
from tests.stacks.stub_server import StubKnobs, request_time
from tests.sweep.kit import run_in_process, write_manifest, write_study

# a service of 8 tokens at 150 ms a step (less for the stub's default window): long beside what a busy machine adds to
# a request, its HTTP and scheduling (no drafts: both configurations serve alike)
STEP_S, OUTPUT_LEN = 0.15, 8
MARGIN = math.log(1.5)  # the e2e bound, this far above one service (log): 1 in flight within it, 2 (twice) over
NOISY = 0.8  # a noisy boot's speed: exp(N(0, 0.8)), so that one boot in three reads more than the margin slower
# The study's target and the confirming boots of each point. Few boots can understate a large noise: over the noisy
# stub the chosen point's odds are about 0.7, and simulated through these claims (the draws of the fast test below,
# 500 seeds) they read at least 0.95 over 4 boots about once in 100 draws
TARGET, CONFIRM = 0.95, 4


def _service_s() -> float:
    knobs = StubKnobs.from_env(stub_manifest().env)
    return request_time(knobs, tokens=OUTPUT_LEN, base_s=STEP_S, overhead_s=0.0)


def _serial_level(concurrency: int, service_s: float) -> LoadLevel:
    """A run of ``concurrency`` requests at once on a server that serves one at a time, each taking ``service_s``:
    the i-th waits i services, then streams its tokens one step apart."""
    latencies = [(i + 1) * service_s for i in range(concurrency)]
    step = service_s / OUTPUT_LEN
    requests = tuple(LoadRequest(ttft_s=lat - service_s + step, tpot_s=step, latency_s=lat) for lat in latencies)
    return LoadLevel(
        workload=f"c{concurrency}",
        concurrency=concurrency,
        request_rate=None,
        prompts="public",
        prompt_chars=None,
        output_len=OUTPUT_LEN,
        output_tokens=OUTPUT_LEN * concurrency,
        wall_s=max(latencies),
        ttft_ms=percentiles([r.ttft_s for r in requests]),
        tpot_ms=percentiles([r.tpot_s for r in requests]),
        itl_ms=percentiles([]),
        e2e_ms=percentiles(latencies),
        requests=requests,
    )


def _served(boot_sd: float, *, run_id: str, seed: int, rounds: int) -> list[BootRecord]:
    """Boots of two configurations whose every request takes one service moved by the boot's draw (N(0, boot_sd),
    ``benchmarks._draw``'s), each running 1 and 2 requests at once."""
    boots = drawn_boots({1: (10.0, 10.0), 2: (10.0, 10.0)}, rounds=rounds, boot_sd=boot_sd, seed=seed, run_id=run_id)
    return [
        replace(b, load=tuple(_serial_level(c, _service_s() * 10.0 / (b.tps or 10.0)) for c in (1, 2))) for b in boots
    ]


def test_the_odds_of_meeting_the_slo_fall_with_the_boots_noise_against_its_margin():
    slo = Slo(e2e_ms=1000 * _service_s() * math.exp(MARGIN))
    for boot_sd, recommended in ((0.01, True), (NOISY, False)):
        promotion = _served(boot_sd, run_id="p1", seed=1, rounds=2)
        confirming = _served(boot_sd, run_id="c1", seed=2, rounds=CONFIRM)
        claims = serving_claims(
            confirming, slo=slo, gate=3.0, target=TARGET, floor=0.02, runs=[*promotion, *confirming]
        )
        for claim in claims.values():
            # at 1 in flight a request takes one service, within the bound; at 2 the second takes two, over it
            assert claim.workload == "c1" and claim.boots == CONFIRM and claim.machine is not None
            assert claim.meets is recommended and claim.p_verified is not None
            assert (claim.p_verified >= TARGET) is recommended and claim.p_ppl == 1.0  # every PPL under the gate
        for trial in (1, 2):  # the known knee, over the promotion's and the confirmation's boots
            found = held_load([*promotion, *confirming], trial, slo)
            assert found is not None and (found.concurrency == 1 if recommended else found.concurrency in (None, 1))


def _claimed(tmp_path, *, noise: float):
    """A serving study over the stub with boot-to-boot noise ``noise``, searched, promoted (2 configurations x 2
    boots) and its choice confirmed (CONFIRM boots of it and of its control): its spec, database URL and claims."""
    manifest = write_manifest(tmp_path, STUB_SERIAL="1", STUB_DECODE_STEP_S=str(STEP_S), STUB_BOOT_NOISE=str(noise))
    profile = stub_profile(tmp_path, num_prompts=2, output_len=OUTPUT_LEN).with_overrides(
        {"load_concurrency": (1, 2), "load_num_prompts": 2, "load_output_len": OUTPUT_LEN}, source="test"
    )
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=profile,
        name="goodput",
        space={"centroid_top_k": {"choices": [32, 64]}},
        sampler="grid",
        serving={"e2e_ms": 1000 * _service_s() * math.exp(MARGIN), "percentile": 99},
        promotion={
            "candidates": 2,
            "boots": 2,
            "confirm_boots": CONFIRM,
            "confirm_max_boots": CONFIRM,
            "target": TARGET,
        },
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_in_process(study, url, tmp_path / "runs")
    spec, out = load_study(study), Console(quiet=True)
    storage = open_storage(url)
    try:
        promote(spec, storage, out=out, run_dir=tmp_path / "runs")
        view = confirm(spec, storage, out=out, run_dir=tmp_path / "runs")
    finally:
        storage.close()
    assert view is not None and view.confirmation is not None and view.unfinished() is None
    return spec, url, view


def test_a_goodput_claim_over_a_steady_stub_is_recommended(ray_connected, tmp_path, capsys):
    spec, url, view = _claimed(tmp_path, noise=0.0)
    slo = spec.serving
    assert slo is not None and view.plan.slo == slo
    # every boot of the promotion and of the confirmation ran the study's levels, in order, on the stub
    boots = [*view.boots, *view.confirmation.boots]
    assert all([level.workload for level in b.load] == ["c1", "c2"] for b in boots)
    assert all(len(level.requests) == 2 for b in boots for level in b.load)
    chosen = view.serving_recommended
    assert chosen is not None and chosen is view.confirmation.serving[view.confirmation.plan.chosen]
    # at 1 in flight every request meets the bound, at 2 the second waits a service and misses: the claim is at c1
    assert chosen.workload == "c1" and chosen.concurrency == 1 and chosen.boots == CONFIRM
    assert chosen.p_verified is not None and chosen.p_verified >= view.target and chosen.meets
    assert chosen.machine is not None and chosen.goodput_machine is not None  # the odds of a run on another machine
    assert chosen.p_within_run is not None and chosen.p_within_run >= view.target
    # the goodput reported is the confirming boots' level (their geometric mean), inside one re-run's interval
    mine = [b for b in view.confirmation.boots if b.trial_number == chosen.trial_number]
    read = [goodput_reading("c1", slo)(b) for b in mine]
    assert math.isclose(chosen.goodput, statistics.geometric_mean(r.heldout for r in read if r is not None))
    assert chosen.goodput_low is not None and chosen.goodput_high is not None
    assert chosen.goodput_low < chosen.goodput < chosen.goodput_high
    ratios = [r.heldout for b in mine if (r := ratio_reading("c1", slo)(b)) is not None]
    assert max(ratios) <= 1 and chosen.ratio_high is not None and chosen.ratio_high <= 1
    # the highest load each promoted configuration holds, from its boots: 1 in flight (2 wait twice a service)
    for trial in view.plan.trials:
        found = held_load(boots, trial, slo)
        assert found is not None and found.concurrency == 1, found

    # the claim is re-read from the database alone: the plan carries the SLO, the boots their levels
    storage = open_storage(url)
    try:
        again = load_evidence(storage, "goodput").claims
        stored = read_record(optuna.load_study(study_name="goodput", storage=storage.optuna))
    finally:
        storage.close()
    assert again is not None and again.serving_recommended == chosen
    assert stored.promotion is not None and stored.promotion.slo == slo
    summary = {c["trial"]: c for c in stored.serving_claims or ()}
    assert summary[chosen.trial_number]["recommended"] and summary[chosen.trial_number]["level"] == "c1"

    # the command prints the claim: goodput at the level, its interval, the odds of meeting the SLO, the verdict
    assert claims_main(["--study", "goodput", "--storage", url]) == 0
    printed = capsys.readouterr().out
    assert f"serving claim: trial {chosen.trial_number}, goodput {chosen.goodput:.3f} req/s at c1" in printed
    assert f"90% interval of a re-run {chosen.interval_text()}" in printed
    assert f"{slo.text()} at that load {chosen.p_verified:.2f}" in printed and printed.rstrip().endswith("recommended")
    assert f"trial {chosen.trial_number} holds up to 1 in flight under the SLO" in printed

    # the exports show what the console printed: best/README.md (the note's markdown too) and trials.csv
    storage = open_storage(url)
    try:
        data = load_study_data(storage, "goodput")
    finally:
        storage.close()
    assert write_best(data, tmp_path / "export", storage=url)
    readme = (tmp_path / "export" / "best" / "README.md").read_text()
    outcome = next(line.strip() for line in printed.splitlines() if line.startswith("serving claim:"))
    assert f"**{outcome}**" in readme and f"- trial {chosen.trial_number} holds up to 1 in flight" in readme
    trials_frame(data).to_csv(tmp_path / "export" / "trials.csv", index=False)
    row = pd.read_csv(tmp_path / "export" / "trials.csv").set_index("number").loc[chosen.trial_number]
    assert f"goodput {row['goodput_claim']:.3f} req/s at {row['goodput_claim_level']}" in outcome
    assert f"at that load {row['goodput_claim_p']:.2f}" in outcome
    assert row["goodput_claim_recommended"] and row["goodput_held_load"] == 1


def test_a_goodput_claim_over_a_noisy_stub_is_not_recommended(ray_connected, tmp_path, capsys):
    spec, url, view = _claimed(tmp_path, noise=NOISY)
    assert view.serving_recommended is None
    chosen = view.confirmation.serving.get(view.confirmation.plan.chosen)
    assert chosen is not None and chosen.p_verified is not None and chosen.p_verified < view.target
    # the boots' own spread says why: a re-run's SLO ratio may land on either side of the bound
    assert chosen.ratio_low is not None and chosen.ratio_high is not None and chosen.ratio_low < 1 < chosen.ratio_high
    assert claims_main(["--study", "goodput", "--storage", url]) == 1
    printed = capsys.readouterr().out
    assert f"serving claim: trial {chosen.trial_number}" in printed
    assert f"not recommended (under the target {view.target:g}" in printed
