"""The serving wing: a study's front re-measured under serving load (``python -m sweep.transfer``).

    _args      the command line, parsed once into ``TransferArgs`` (``parse_args``)
    _points    what is booted (the baseline and the front's fastest points, ``choose_points``) and the
               workloads of each boot (``workloads``)
    _boots     one point's fresh boot, warmed as the harness warms, timed level by level (``run_point``)
    _rank      ranks by challenge TPS and by output tok/s at each level (``rank``)
    _output    ``transfer.json``, the table, a line a point
    _chart     the chart, drawn by the dashboards' own command
    _resume    the points an earlier run into the same folder finished (``kept_points``)
    _maxload   the highest load a configuration holds under an SLO on a running stack: its levels' repeated runs
               (``probe_levels``), decided and bisected by ``sweep.judgement``'s ``verdict`` and ``max_load``
    _command   the command: checks, ``--dry-run``, the boots in order, resume (``main``)

The rules it judges by are ``sweep.judgement``'s: the SLO, goodput, the serving front (``serving_front``, there
rather than here so that the search's console, a floor below, shows the same one) and the max-load decision (re-exported
here; there so that the claims, a floor below, decide a claim's boots by it too). A load level is
``engine.measurement.LoadLevel``; which prompts it gets is ``engine.bench.level_prompts``.
"""

from sweep.judgement import DEFAULT_CONFIDENCE, LevelVerdict, MaxLoad, max_load, verdict
from sweep.serving._args import TransferArgs, parse_args
from sweep.serving._command import main
from sweep.serving._maxload import probe_levels

__all__ = [
    "DEFAULT_CONFIDENCE",
    "LevelVerdict",
    "MaxLoad",
    "TransferArgs",
    "main",
    "max_load",
    "parse_args",
    "probe_levels",
    "verdict",
]
