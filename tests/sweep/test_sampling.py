import optuna
import pytest

from sweep.search import SAMPLERS, load_study
from sweep.search._dryrun import plan_trials
from sweep.search._sampling import make_sampler, sampler_exhausted, suggest_knobs
from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study


def study(tmp_path, **fields):
    return load_study(
        write_study(tmp_path, manifest=write_manifest(tmp_path), profile=stub_profile(tmp_path), **fields)
    )


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_draws_inside_the_space_after_the_baseline(tmp_path, sampler):
    spec = study(
        tmp_path,
        sampler=sampler,
        seed=1,
        n_trials=5,
        space={"centroid_top_k": {"low": 8, "high": 64, "step": 8}, "sliding_window": {"choices": [64, 512]}},
    )
    plan = plan_trials(spec)
    assert plan[0].is_baseline and plan[0].knobs == {}  # the baseline: the manifest as it is
    assert plan[0].effective == spec.baseline()
    assert len(plan) == 5
    for planned in plan[1:]:
        assert not planned.is_baseline
        assert spec.space["centroid_top_k"].contains(planned.knobs["centroid_top_k"])
        assert planned.knobs["sliding_window"] in (64, 512)


def test_a_grid_visits_each_point_once_then_ends(tmp_path):
    spec = study(tmp_path, sampler="grid", space={"centroid_top_k": {"choices": [8, 16, 32]}})
    plan = plan_trials(spec)
    assert sorted(p.knobs["centroid_top_k"] for p in plan if not p.is_baseline) == [8, 16, 32]


def test_a_resumed_study_draws_on_instead_of_replaying_its_first_draws(tmp_path):
    spec = study(tmp_path, sampler="random", seed=5, n_trials=4, space={"centroid_top_k": {"low": 1, "high": 2048}})

    def draws(sampler):
        s = optuna.create_study(sampler=sampler)
        return [s.ask().suggest_int("centroid_top_k", 1, 2048) for _ in range(4)]

    assert draws(make_sampler(spec)) == draws(make_sampler(spec))  # seeded: reproducible
    assert draws(make_sampler(spec, resumed_trials=3)) != draws(make_sampler(spec))


def test_a_grid_resumed_by_another_driver_still_measures_each_point_once(tmp_path):
    # A resumed study's sampler gets a moved-on seed, which reshuffles Optuna's grid: a grid that
    # kept track of its points by their place in the shuffle measured some twice and others never.
    space = {"centroid_top_k": {"choices": [4, 8, 16, 32, 64, 128]}, "sliding_window": {"choices": [64, 512]}}
    spec = study(tmp_path, sampler="grid", seed=1, space=space)
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="g")
    measured = []

    def run(sampler, trials=None):
        s = optuna.load_study(study_name="g", storage=storage, sampler=sampler)
        while not sampler_exhausted(sampler, s) and (trials is None or trials > 0):
            trial = s.ask()
            knobs = suggest_knobs(trial, spec, baseline=False)
            measured.append((knobs["centroid_top_k"], knobs["sliding_window"]))
            s.tell(trial, 1.0)
            trials = None if trials is None else trials - 1

    run(make_sampler(spec), trials=5)
    run(make_sampler(spec, resumed_trials=5))
    assert sorted(measured) == sorted((c, w) for c in space["centroid_top_k"]["choices"] for w in (64, 512))
