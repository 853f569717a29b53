"""How a stack is started once its launch is known: placeholders filled, its port, the wrapper. Standard library only.

Two starters use it, so that a submission boots exactly as the sweep's trials booted: the launcher
(``engine.launch.build_launch``), and the ``serve.py`` of a submission folder (``engine/stackside/_serve.py``),
beside which the folder carries a copy of this file and of ``engine/stackside/_stackwrap.py``. ``start`` does the part
they share:

- the warm-up bridge is on when ``WARMUP_NUM_PROMPTS`` is above 0, unless the stack bridges itself
  (``WARMUP_BRIDGE=1``, the winning entry's convention); with it, the stack listens on a free port of its
  own on 127.0.0.1 (its ``{host}``, ``{port}`` and ``PORT``) and the wrapper on the launch's host and port;
- every placeholder of the stack's argv and env is filled (``{port}``, ``{host}``, and the starter's own:
  ``{python}``, ``{workdir}``, ...), and ``PORT`` is the port the stack binds;
- the stack is started through ``stackwrap.py`` where the env asks for the bridge, for CPU affinity
  (``CPU_AFFINITY`` other than ``none``) or for a garbage collector frozen once the stack is warm
  (``STACK_GC=freeze``: the wrapper makes the file ``STACK_GC_MARK`` then), with the bridge's settings from
  ``WARMUP_MAX_TOKENS``, ``WARMUP_SEED`` and ``WARMUP_KIND``;
- where the env sets ``STACK_GC`` to anything but ``default`` (the knob ``gc_policy``), or ``STACK_GC_LOG``
  (the launcher's record of every collection), the hooks' folder (``stackhooks``: ``sitecustomize.py``) goes
  first on the stack's ``PYTHONPATH``, before the one it would otherwise have.

A value that should be a whole number and is not raises ``StartError``, naming the variable.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Start", "StartError", "bridged", "fill", "free_port", "gc_policy", "start", "whole"]

# Ports handed out by this process and not yet seen in use: the kernel may offer one again
# between our probe and the stack's bind, so the same one is never handed out twice.
_handed_out: set[int] = set()
# The bridge's settings and their defaults: (stackwrap's flag, the env variable, its default)
_BRIDGE = (
    ("--warmup-prompts", "WARMUP_NUM_PROMPTS", 0),
    ("--warmup-max-tokens", "WARMUP_MAX_TOKENS", 1),
    ("--warmup-seed", "WARMUP_SEED", 42),
)
_WARMUP_KINDS = ("plain", "ngram")  # stackwrap.WARMUP_KINDS: this file imports nothing of the project's
_GC_POLICIES = ("default", "freeze", "off")  # or thresholds, T0,T1,T2


class StartError(ValueError):
    """A setting of the stack's env that cannot be honoured as written."""


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` of ``values`` replaced by its value (anything else in braces is left)."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def whole(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, str(default)).strip()
    if not text.isdigit():
        raise StartError(f"{name}={text!r} is not a whole number")
    return int(text)


def bridged(env: Mapping[str, str]) -> bool:
    """Whether the starter runs the warm-up bridge in front of the stack."""
    return whole(env, "WARMUP_NUM_PROMPTS", 0) > 0 and env.get("WARMUP_BRIDGE") != "1"


def gc_policy(env: Mapping[str, str]) -> str:
    """``STACK_GC`` as the hooks read it; raises StartError for a value they cannot honour."""
    policy = env.get("STACK_GC", "default").strip() or "default"
    parts = policy.split(",")
    if policy not in _GC_POLICIES and not (len(parts) == 3 and all(p.strip().isdigit() for p in parts)):
        raise StartError(f"STACK_GC={policy!r}: expected one of {list(_GC_POLICIES)} or thresholds T0,T1,T2")
    return policy


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, and that this process has not handed out before."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise OSError(f"no free port found on {host}")


@dataclass(frozen=True, kw_only=True)
class Start:
    """What to start: ``argv`` (through the wrapper where it is needed), the stack's own ``stack_argv``, the
    ``env`` laid over the starter's, and the port the stack itself binds."""

    argv: list[str]
    stack_argv: list[str]
    env: dict[str, str]
    stack_port: int
    values: dict[str, str] = field(default_factory=dict)  # every placeholder's value, as filled


def start(
    argv: list[str],
    env: Mapping[str, str],
    *,
    host: str,
    port: int,
    model: str,
    values: Mapping[str, str],
    python: str,
    stackwrap: str,
    hooks: str,
    pythonpath: str | None = None,
) -> Start:
    """The stack ``argv`` with ``env`` started to serve on ``host``:``port`` (see the module's docstring);
    ``values``: the starter's own placeholders; ``python`` and ``stackwrap``: the interpreter and the path the
    wrapper runs with; ``hooks``: the hooks' folder; ``pythonpath``: the ``PYTHONPATH`` the stack inherits
    where ``env`` sets none."""
    bridge = bridged(env)
    policy = gc_policy(env)
    kind = env.get("WARMUP_KIND", "plain").strip()
    if kind not in _WARMUP_KINDS:
        raise StartError(f"WARMUP_KIND={kind!r}: expected one of {list(_WARMUP_KINDS)}")
    stack_host, stack_port = ("127.0.0.1", free_port("127.0.0.1")) if bridge else (host, port)
    filled = {**values, "host": stack_host, "port": str(stack_port)}
    stack_env = {key: fill(value, filled) for key, value in env.items()}
    stack_env["PORT"] = str(stack_port)
    if policy != "default" or "STACK_GC_LOG" in env:
        stack_env["PYTHONPATH"] = os.pathsep.join(filter(None, [hooks, stack_env.get("PYTHONPATH", pythonpath)]))
    mark = None
    if policy == "freeze":
        mark = os.path.join(filled.get("tmpdir") or tempfile.gettempdir(), f"gc-warm-{stack_port}")
        stack_env["STACK_GC_MARK"] = mark
    stack_argv = [fill(item, filled) for item in argv]
    affinity = env.get("CPU_AFFINITY", "none").strip()
    started = stack_argv
    if bridge or affinity != "none" or mark:
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        wrapper = [python, "-I", stackwrap, "--listen", listen, "--cpus", affinity]
        if bridge or mark:
            wrapper += ["--upstream-port", str(stack_port)]
        if bridge:
            wrapper += ["--model", model, "--warmup-kind", kind]
            wrapper += [item for flag, name, default in _BRIDGE for item in (flag, str(whole(env, name, default)))]
        if mark:
            wrapper += ["--mark", mark]
        started = [*wrapper, "--", *stack_argv]
    return Start(argv=started, stack_argv=stack_argv, env=stack_env, stack_port=stack_port, values=filled)
