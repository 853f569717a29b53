"""The sweep's public surface, pinned: what other packages (dashboards, verify, benchmarks) import."""

import importlib

import pytest

SURFACE = {
    "sweep.spec": ["DEFAULT_SAMPLER", "SAMPLERS", "Gate", "KnobSpace", "Resources", "StudySpec",
                   "load_study", "study_path"],
    "sweep.storage": ["DEFAULT_STORAGE_URL", "METADATA", "FailKind", "MeasurementRecord", "Storage",
                      "measurements", "open_storage"],
    "sweep.pareto": ["FrontPoint", "dominates", "pareto_front"],
    "sweep.identity": ["LOSSLESS_KNOBS", "differing_prompts", "identity_comparable", "pack_token_ids",
                       "unpack_token_ids"],
    "sweep.sampling": ["make_sampler", "sampler_exhausted", "suggest_knobs"],
    "sweep.driver": ["BaselineFailed", "StudyResult", "SweepStopped", "WorkerSetupFailed", "run_study"],
    "sweep.console": ["Progress", "SweepConsole", "front_records"],
    "sweep.run": ["RunArgs", "main", "parse_args"],
}


@pytest.mark.parametrize("module", sorted(SURFACE))
def test_the_public_names_are_pinned(module):
    loaded = importlib.import_module(module)
    assert sorted(loaded.__all__) == sorted(SURFACE[module])
    for name in loaded.__all__:
        assert hasattr(loaded, name), name
