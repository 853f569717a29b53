"""record_grid runs sweep.run in its own run folder: the database must stay where the user named it."""

from benchmarks.record_grid import parse_args


def test_a_relative_sqlite_path_means_the_callers_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parse_args(["--storage", "sqlite:///runs/grid/quiet.db"])
    assert args.storage == f"sqlite:///{tmp_path.resolve()}/runs/grid/quiet.db"


def test_absolute_and_other_urls_are_left_alone(tmp_path):
    for url in (f"sqlite:///{tmp_path}/a.db", "sqlite:///:memory:", "postgresql://u@host/db"):
        assert parse_args(["--storage", url]).storage == url
