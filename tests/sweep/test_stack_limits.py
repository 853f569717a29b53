"""A study may not ask a stack for a knob value it would refuse at boot: every knob of every
manifest the project ships (and the test stub), swept one step past what its stack accepts
(the knob registry's range, or the stack's own limit there), is refused by ``python -m sweep.run``
with exit 2 and the limit named, before anything boots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import KNOBS, MANIFESTS_DIR, baseline_knobs, consumed_knobs, load_manifest
from sweep.run import main
from tests.stacks import STUB_MANIFEST

MANIFESTS = [*sorted(MANIFESTS_DIR.glob("*.json")), STUB_MANIFEST]


def _cases() -> list[tuple[Path, str, str, list, str]]:
    """(manifest, knob, case, the space's values, what the refusal must name)."""
    cases = []
    for path in MANIFESTS:
        manifest = load_manifest(path)
        baseline = baseline_knobs(manifest)
        for name in consumed_knobs(manifest):
            knob = KNOBS[name].for_stack(manifest.stack)
            if knob.type == "int":
                low, high = knob.bounds
                cases.append((path, name, "above", {"low": low, "high": high + 1}, f"out of range {knob.range_text}"))
                cases.append((path, name, "below", {"low": low - 1, "high": high}, f"out of range {knob.range_text}"))
            elif knob.type == "choice":
                cases.append(
                    (
                        path,
                        name,
                        "unknown choice",
                        {"choices": [baseline[name], "no-such-choice"]},
                        f"one of {list(knob.choices)}",
                    )
                )
            else:
                cases.append((path, name, "not a boolean", {"choices": [baseline[name], "maybe"]}, "true or false"))
    return cases


def _study(folder: Path, manifest: Path, knob: str, space: dict) -> Path:
    path = folder / "limits.toml"
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in space.items())
    path.write_text(
        f'manifest = {json.dumps(str(manifest))}\nn_trials = 2\nprofile = "quick"\n'
        f'[gate]\nppl_max_ratio = 1.05\n[fidelity]\nmode = "full"\n[space.{knob}]\n{table}\n'
    )
    return path


def test_the_walk_covers_the_reference_stacks_own_limit():
    # The one knob with a stack limit today: without it the walk below would not test that layer.
    limited = [(p.stem, k) for p, k, case, _, named in _cases() if case == "above" and "limit of stack" in named]
    assert ("reference", "num_speculative_tokens") in limited


@pytest.mark.parametrize(
    ("manifest", "knob", "case", "space", "named"), _cases(), ids=[f"{p.stem}-{k}-{c}" for p, k, c, _, _ in _cases()]
)
def test_a_range_beyond_the_stacks_limit_exits_2_naming_the_limit(tmp_path, capsys, manifest, knob, case, space, named):
    assert main(["--study", str(_study(tmp_path, manifest, knob, space)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert named in err and f"knob {knob!r}" in err, err


def test_the_reference_stack_takes_its_whole_limit_and_refuses_the_registrys_wider_range(tmp_path, capsys):
    reference = MANIFESTS_DIR / "reference.json"
    low, high = KNOBS["num_speculative_tokens"].for_stack("reference").bounds
    assert high < KNOBS["num_speculative_tokens"].maximum  # a stack accepting less is the point
    assert (
        main(
            [
                "--study",
                str(_study(tmp_path, reference, "num_speculative_tokens", {"low": low, "high": high})),
                "--dry-run",
            ]
        )
        == 0
    )
    wider = {"low": low, "high": KNOBS["num_speculative_tokens"].maximum}
    assert main(["--study", str(_study(tmp_path, reference, "num_speculative_tokens", wider)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"out of range {low}..{high}, the limit of stack 'reference'" in err and "knobs.toml" in err, err
