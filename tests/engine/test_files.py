"""One ladder for reading a file a user wrote: each way it fails is one line naming the file,
raised as the caller's own ConfigError subclass (so each CLI exits 2)."""

import pytest

from engine.files import load_json, load_toml, read_text
from errors import DataError, ManifestError, StudySpecError


@pytest.mark.parametrize(
    ("load", "data", "says"),
    [
        (load_json, None, "cannot read the prompt set: No such file or directory"),
        (load_json, b'{"a": "\xff"}', r"not UTF-8 text \(byte 7: invalid start byte\)"),
        (load_json, b'{"a": ', r"not valid JSON \(Expecting value"),
        (load_json, b"[" * 100_000 + b"]" * 100_000, r"not valid JSON \(nested too deeply\)"),
        (load_json, b"1" * 5000, r"not valid JSON \(Exceeds the limit"),
        (load_toml, b"a = ", r"not valid TOML \(Invalid value"),
        (load_toml, b"a = " + b"[" * 100_000, r"not valid TOML \(nested too deeply\)"),
        (load_toml, b"a = " + b"1" * 5000, r"not valid TOML \(Exceeds the limit"),
    ],
)
@pytest.mark.parametrize("error", [DataError, ManifestError, StudySpecError])
def test_each_way_a_file_fails_to_load_is_the_callers_error_naming_the_file(tmp_path, load, data, says, error):
    path = tmp_path / "input"
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(error, match=rf"^{path}: {says}") as info:
        load(path, error, what="the prompt set")
    assert type(info.value) is error and "\n" not in str(info.value)


def test_a_file_that_loads_is_its_text_or_its_document(tmp_path):
    (tmp_path / "a.json").write_text('{"k": [1, 2]}')
    (tmp_path / "a.toml").write_text("k = [1, 2]\n")
    assert read_text(tmp_path / "a.toml", DataError) == "k = [1, 2]\n"
    assert load_json(tmp_path / "a.json", DataError) == load_toml(tmp_path / "a.toml", DataError) == {"k": [1, 2]}
