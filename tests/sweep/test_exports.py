"""The sweep's closing export: skipped, and said so, where the dashboards are not installed; a failing
export is reported, never a failed sweep."""

from __future__ import annotations

import importlib.util
import io
import subprocess

from rich.console import Console

from sweep.search import _exports as exports


def _console() -> tuple[Console, io.StringIO]:
    text = io.StringIO()
    return Console(file=text, soft_wrap=True, highlight=False), text


def test_without_the_dashboards_package_the_export_is_skipped_before_anything_runs(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "dashboards" else real(name, *a))

    def no_child(*args, **kwargs):
        raise AssertionError(f"ran {args[0]!r} without the dashboards package")

    monkeypatch.setattr(subprocess, "run", no_child)
    out, text = _console()
    exports.export_results("ctk", "sqlite:///nowhere.db", out=out, run_dir=tmp_path)
    assert "exports skipped: this installation has no dashboards package" in text.getvalue()


def test_a_failing_export_is_reported_with_its_last_line(tmp_path):
    out, text = _console()
    # The dashboards are installed here; a database that does not exist makes their command fail.
    exports.export_results("ctk", f"sqlite:///{tmp_path / 'missing.db'}", out=out, run_dir=tmp_path)
    shown = text.getvalue()
    assert "exports failed (exit 2: " in shown and "no database file there" in shown, shown
