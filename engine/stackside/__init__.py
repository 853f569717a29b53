"""What runs in or beside a stack's own processes, standard library only: the rule a stack is started by
(``_startup.py``), the wrapper that pins it, bridges its warm-up and marks it warm (``_stackwrap.py``), the hooks
its Python processes run first (``stackhooks/sitecustomize.py``), the bounds of the step-time histogram it is
asked for (``_stepbuckets.py``), and a submission folder's ``serve.py`` (``_serve.py``); where each file lies
(``STACKWRAP``, ``HOOKS``, ``FOLDER_FILES``: a folder's name for each).

Standard library only because a submission folder carries copies of them (``startup.py``, ``stackwrap.py``,
``stackhooks/``, ``serve.py``) and the organisers' interpreter runs them there; the wrapper runs by its path
(``python -I .../_stackwrap.py --listen HOST:PORT ... -- STACK_ARGV``), here as in a folder.
"""

from engine.stackside._paths import FOLDER_FILES, HOOKS, STACKWRAP
from engine.stackside._stackwrap import (
    SPEC_RULE,
    WARMUP_KINDS,
    SpecError,
    format_cpus,
    parse_cpus,
    resolve_cpus,
    synthetic_prompts,
)
from engine.stackside._startup import Start, StartError, bridged, fill, free_port, gc_policy, start, whole
from engine.stackside._stepbuckets import STEP_BUCKETS

__all__ = [
    "FOLDER_FILES",
    "HOOKS",
    "SPEC_RULE",
    "STACKWRAP",
    "STEP_BUCKETS",
    "WARMUP_KINDS",
    "SpecError",
    "Start",
    "StartError",
    "bridged",
    "fill",
    "format_cpus",
    "free_port",
    "gc_policy",
    "parse_cpus",
    "resolve_cpus",
    "start",
    "synthetic_prompts",
    "whole",
]
