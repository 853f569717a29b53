"""Start a serving stack pinned to chosen CPUs, and warmed up before anyone can time it.

Standard library only: a submission folder carries a copy of this file (``python stackwrap.py``) and
runs it with whatever Python the organisers use; the launcher runs it as ``python -I
engine/stackside/_stackwrap.py`` (``engine.launch.build_launch``)::

    python -I engine/stackside/_stackwrap.py --listen HOST:PORT [--upstream-port Q] [--cpus SPEC]
        [--warmup-prompts N] [--warmup-max-tokens M] [--warmup-seed S] [--warmup-kind plain|ngram]
        [--model NAME] [--mark PATH] -- STACK_ARGV...

``--cpus``: ``none`` (default), ``numa`` (the CPUs of the NUMA node of the GPUs this process sees, read
from sysfs; node 0 where no GPU is visible, every CPU where the kernel shows no nodes) or a list such as
``2-7,10``. The wrapper pins itself before the stack starts, so every process and thread of the stack
inherits the mask. A list naming a CPU this process may not use is an error (exit 2), as is any
malformed SPEC.

``--warmup-prompts 0`` (default): after pinning, the wrapper execs the stack, which listens on PORT
itself: no proxy, no extra process.

``--mark PATH``: the wrapper makes the file PATH once the stack is warm (after the bridge's warm-up, else once
``GET /v1/models`` answers on PORT, which Q then names; the wrapper stays the stack's parent instead of
exec'ing it), and waits a moment before serving: the stack's processes freeze their garbage collector's heap
then (``engine/stackside/stackhooks/sitecustomize.py``, ``STACK_GC=freeze``).

``--warmup-prompts N`` (the warm-up bridge of the challenge's winning entry): the stack starts as a
child listening on 127.0.0.1:Q; once its ``GET /v1/models`` answers, the wrapper sends N synthetic chat
completions of M tokens (prompts drawn from seed S out of a word list of its own: never a benchmark
prompt; ``--warmup-kind ngram``: each prompt a phrase of those words said over and over, so that an n-gram
drafter finds matches and compiles what it runs on a match before any request is timed), and only then binds HOST:PORT and copies bytes both ways between it and Q. A harness that waits
for ``/v1/models`` on PORT therefore starts timing a warm stack. The wrapper exits with the stack's status
(128 + the signal's number for a stack killed by a signal); a stack that exits, or answers badly, during
the warm-up makes it exit non-zero at once, saying so.

Process groups and signals: when the wrapper leads its own process group (the launcher starts it in a
session of its own), the stack stays in that group, so a signal to the group (the launcher's stop, the
reaper) reaches every process directly; a signal to the wrapper alone (a harness that stops the pid it
started) is passed on to the whole group, once a signal. Otherwise (a harness that started
``python serve.py`` in its own group) the stack gets a group of its own, which the wrapper forwards
SIGTERM, SIGINT and SIGHUP to, so the harness's stop reaches the stack's children as well.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = [
    "SPEC_RULE",
    "WARMUP_KINDS",
    "SpecError",
    "format_cpus",
    "main",
    "parse_cpus",
    "resolve_cpus",
    "synthetic_prompts",
]

# The shape of an explicit list; the knob registry's ``cpu_affinity`` pattern is the same rule.
SPEC_RULE = r"\d+(-\d+)?(,\d+(-\d+)?)*"
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_POLL_S = 0.25
_MAX_CPUS = 8192  # the kernel's largest NR_CPUS; a list past it is a typo, not a machine
_REQUEST_TIMEOUT_S = 600.0
_STOP_GRACE_S = 10.0
# Plain words, none taken from a benchmark set: the warm-up prompts are made of these and digits only.
_WORDS = (
    "amber basket cedar delta ember falcon garnet harbor island jasper kettle lantern meadow nickel orchid "
    "pebble quarry raven saddle timber umber velvet willow xenon yonder zephyr anchor bramble copper dune "
    "falcon glacier hollow ivory juniper kelp linen marble nectar oak prism quill ridge slate thistle "
    "tundra vessel walnut yarrow zinc"
).split()


class SpecError(ValueError):
    """A ``--cpus`` SPEC that is malformed or names CPUs this process may not use."""


def parse_cpus(text: str) -> set[int]:
    """``2-7,10`` as the set of CPUs it names (the kernel's cpulist format)."""
    text = text.strip()
    if not re.fullmatch(SPEC_RULE, text):
        raise SpecError(f"CPU list {text!r} is malformed: expected 'none', 'numa' or a list such as '2-7,10'")
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise SpecError(f"CPU list {text!r}: range {part!r} runs backwards")
        if last >= _MAX_CPUS:
            raise SpecError(f"CPU list {text!r}: CPU {last} is past any machine's ({_MAX_CPUS} CPUs at most)")
        cpus.update(range(first, last + 1))
    return cpus


def format_cpus(cpus: set[int] | list[int]) -> str:
    """A set of CPUs in the kernel's cpulist format: ``{0, 1, 2, 5}`` -> ``0-2,5``."""
    ordered, parts = sorted(cpus), []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _gpu_numa_nodes(env: dict[str, str], sysfs: Path) -> set[int]:
    """NUMA nodes of the GPUs ``CUDA_VISIBLE_DEVICES`` names (all, where it is unset), via nvidia-smi's
    PCI bus ids; empty where no GPU is visible or nvidia-smi cannot tell."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    wanted = None if visible is None else [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None or wanted == []:
        return set()
    try:
        done = subprocess.run(
            [smi, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    nodes = set()
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3 or (wanted is not None and not {cells[0], cells[1]} & set(wanted)):
            continue
        domain, _, rest = cells[2].partition(":")  # 00000000:19:00.0 -> 0000:19:00.0
        try:
            bus = f"{int(domain, 16):04x}:{rest.lower()}"
        except ValueError:
            continue
        node = _read(sysfs / "bus/pci/devices" / bus / "numa_node")
        if node is not None and node.lstrip("-").isdigit():
            nodes.add(max(0, int(node)))  # -1: a machine of one node
    return nodes


def _numa_cpus(env: dict[str, str], sysfs: Path) -> set[int]:
    nodes = _gpu_numa_nodes(env, sysfs) or {0}
    cpus: set[int] = set()
    for node in sorted(nodes):
        listed = _read(sysfs / f"devices/system/node/node{node}/cpulist")
        if listed is None:
            if (sysfs / "devices/system/node").is_dir():
                raise SpecError(f"'numa': NUMA node {node} lists no CPUs in {sysfs}/devices/system/node")
            return set(range(os.cpu_count() or 1))  # the kernel shows no nodes: one node holding every CPU
        if listed:
            cpus |= parse_cpus(listed)
    return cpus


def resolve_cpus(
    spec: str, *, allowed: set[int] | None = None, env: dict[str, str] | None = None, sysfs: Path = Path("/sys")
) -> set[int] | None:
    """The CPUs a SPEC pins to (None for ``none``); raises SpecError for a malformed SPEC or one naming CPUs
    outside ``allowed`` (default: the CPUs this process may use)."""
    spec = spec.strip()
    if spec == "none":
        return None
    allowed = os.sched_getaffinity(0) if allowed is None else allowed
    if spec == "numa":
        cpus = _numa_cpus(dict(os.environ) if env is None else env, sysfs) & allowed
        if not cpus:
            raise SpecError(
                f"'numa': the GPU's NUMA node has no CPU this process may use (allowed: {format_cpus(allowed)})"
            )
        return cpus
    cpus = parse_cpus(spec)
    missing = cpus - allowed
    if missing:
        raise SpecError(
            f"CPU list {spec!r} names CPU(s) {format_cpus(missing)}, which this machine does not have or this "
            f"process may not use (allowed: {format_cpus(allowed)})"
        )
    return cpus


WARMUP_KINDS = ("plain", "ngram")


def synthetic_prompts(count: int, seed: int, kind: str = "plain") -> list[str]:
    """``count`` warm-up prompts drawn from ``seed``: words of this module's own list and numbers, of
    varied length, so a stack warms the shapes it will serve without seeing a benchmark prompt. ``ngram``: a
    phrase of 3-6 of those words repeated 4-8 times, asking for more of it: the prompt and the answer repeat
    n-grams, which a prompt-lookup drafter matches."""
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        if kind == "ngram":
            phrase = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 6)))
            said = ", ".join([phrase] * rng.randint(4, 8))
            prompts.append(f"Warm-up {i}: go on repeating this: {said}, {phrase},")
        else:
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 48)))
            prompts.append(f"Warm-up {i}: {words} {rng.randint(0, 10**6)}.")
    return prompts


# --- the bridge --------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"stackwrap: {message}", file=sys.stderr, flush=True)


class _Stack:
    """The stack as the wrapper's child, and the signals the wrapper passes on to it."""

    def __init__(self, argv: list[str]) -> None:
        self.own_group = os.getpgrp() == os.getpid()
        self.signalled: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None
        for sig in _SIGNALS:
            signal.signal(sig, self._on_signal)
        # A group of its own only where the wrapper leads none: see the module's docstring.
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=not self.own_group)

    def _on_signal(self, sig: int, _frame: object) -> None:
        first = sig not in self.signalled
        self.signalled.append(sig)
        if self.proc is None:
            return
        try:
            if not self.own_group:
                os.killpg(self.proc.pid, sig)
            elif first:
                # the wrapper alone may have been signalled: the group gets it too (the wrapper once more, which
                # is not passed on again; a stack signalled twice by a group-wide stop ends as it would once)
                os.killpg(os.getpgrp(), sig)
        except ProcessLookupError:
            pass

    def status(self) -> int | None:
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def exited(self, *, wait_s: float) -> int | None:
        """The exit status, waiting up to ``wait_s`` for it; None while the stack runs."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None
        return self.status()

    def stop(self) -> int:
        """TERM the stack (its group, where it has one), KILL it after a grace period; its exit status."""
        assert self.proc is not None
        for sig, wait_s in ((signal.SIGTERM, _STOP_GRACE_S), (signal.SIGKILL, _STOP_GRACE_S)):
            if self.proc.poll() is not None:
                break
            try:
                os.kill(self.proc.pid, sig) if self.own_group else os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait()
        return self.status() or 1


def _http(url: str, body: dict[str, object] | None = None, *, timeout: float) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - a loopback URL we built
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait_models(stack: _Stack, base: str) -> str | None:
    """Poll ``/v1/models`` until it answers 200; the first model's id. None if the stack exited first."""
    while stack.status() is None:
        try:
            status, raw = _http(f"{base}/v1/models", timeout=5.0)
            if status == 200:
                data = json.loads(raw)["data"]
                return str(data[0]["id"]) if data else ""
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            pass  # not listening yet, or not answering in shape yet
        time.sleep(_POLL_S)
    return None


def _warm_up(stack: _Stack, base: str, *, model: str, prompts: list[str], max_tokens: int) -> str | None:
    """Send the warm-up requests one at a time; None when all answered 200, else what went wrong."""
    for i, text in enumerate(prompts, start=1):
        if stack.signalled:
            return "stopped by a signal during the warm-up"
        body = {
            "model": model,
            "messages": [{"role": "user", "content": text}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
            "stream": False,
            "ignore_eos": True,
        }
        try:
            status, raw = _http(f"{base}/v1/chat/completions", body, timeout=_REQUEST_TIMEOUT_S)
        except OSError as exc:
            status, raw = None, str(exc).encode()
        if status != 200 or stack.status() is not None:
            # a dropped connection may come a moment before the exit is visible
            exited = stack.exited(wait_s=1.0)
            if exited is not None:
                return f"the stack exited with status {exited} during warm-up request {i} of {len(prompts)}"
            answer = f"HTTP {status}" if status else "no answer"
            return f"warm-up request {i} of {len(prompts)}: {answer}: {raw[:200]!r}"
    return None


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _relay(client: socket.socket, upstream_port: int) -> None:
    """One connection: bytes both ways between the client and the stack, until both sides are done."""
    try:
        upstream = socket.create_connection(("127.0.0.1", upstream_port))
    except OSError:
        client.close()
        return
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise SpecError(f"--listen {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


_MARK_WAIT_S = 1.0  # after the mark: the stack's processes see it within their poll (0.2 s) and freeze


def _mark(path: str | None) -> None:
    """Tell the stack's processes it is warm (``--mark``), and give them a moment to act on it."""
    if path:
        Path(path).touch()
        time.sleep(_MARK_WAIT_S)
        _say(f"marked the stack warm ({path})")


def _watch(args: argparse.Namespace) -> int:
    """No bridge, a mark: the stack as a child serving on PORT itself, the mark made once it answers."""
    host, _ = _address(args.listen)
    stack = _Stack(args.stack)
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://[{local}]:{args.upstream_port}" if ":" in local else f"http://{local}:{args.upstream_port}"
    if _wait_models(stack, base) is None:
        _say(f"the stack exited with status {stack.status()} before it answered GET /v1/models")
        return stack.status() or 1
    _mark(args.mark)
    while (code := stack.exited(wait_s=_POLL_S)) is None:
        pass
    return code


def _bridge(args: argparse.Namespace) -> int:
    host, port = _address(args.listen)
    stack = _Stack(args.stack)
    base = f"http://127.0.0.1:{args.upstream_port}"
    began = time.monotonic()
    served = _wait_models(stack, base)
    if served is None:
        _say(f"the stack exited with status {stack.status()} before it answered GET /v1/models")
        return stack.status() or 1
    model = args.model or served
    ready = time.monotonic()
    _say(
        f"stack ready on 127.0.0.1:{args.upstream_port} after {ready - began:.1f} s; warming up with {args.warmup_prompts} prompts"
    )
    prompts = synthetic_prompts(args.warmup_prompts, args.warmup_seed, args.warmup_kind)
    failed = _warm_up(stack, base, model=model, prompts=prompts, max_tokens=args.warmup_max_tokens)
    if failed:
        _say(f"{failed}; stopping the stack")
        code = stack.stop()
        return code or 1
    _mark(args.mark)
    try:
        listener = socket.create_server(
            (host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, backlog=128
        )
    except OSError as exc:
        _say(f"cannot listen on {host}:{port} ({exc}); stopping the stack")
        stack.stop()
        return 1
    _say(f"warm-up of {len(prompts)} requests done in {time.monotonic() - ready:.1f} s; serving on {host}:{port}")
    listener.settimeout(_POLL_S)
    with listener:
        while stack.status() is None:
            try:
                conn, _ = listener.accept()
            except OSError:  # the poll's timeout (socket.timeout), or a connection that failed as it came
                continue
            conn.settimeout(None)
            threading.Thread(target=_relay, args=(conn, args.upstream_port), daemon=True).start()
    return stack.status() or 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stackwrap", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT the harness reaches the stack on")
    p.add_argument("--upstream-port", type=int, help="the stack's own port on 127.0.0.1 (the bridge's)")
    p.add_argument("--cpus", default="none", help="none | numa | a CPU list such as 2-7,10")
    p.add_argument("--warmup-prompts", type=int, default=0, help="synthetic requests before serving (0: no bridge)")
    p.add_argument("--warmup-max-tokens", type=int, default=1)
    p.add_argument("--warmup-seed", type=int, default=42)
    p.add_argument("--warmup-kind", choices=WARMUP_KINDS, default="plain", help="plain words, or repeated n-grams")
    p.add_argument("--model", help="the served model's name (default: the first GET /v1/models lists)")
    p.add_argument("--mark", help="a file made once the stack is warm (its processes freeze their heap then)")
    p.add_argument("stack", nargs=argparse.REMAINDER, help="-- then the stack's argv")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.stack = args.stack[1:] if args.stack[:1] == ["--"] else args.stack
    if not args.stack:
        parser.error("no stack to start: give its argv after --")
    if args.warmup_prompts < 0 or args.warmup_max_tokens < 1:
        parser.error("--warmup-prompts must be >= 0 and --warmup-max-tokens >= 1")
    if (args.warmup_prompts or args.mark) and args.upstream_port is None:
        parser.error("the warm-up bridge (--warmup-prompts > 0) and --mark need --upstream-port, the stack's own port")
    try:
        _address(args.listen)
    except SpecError as exc:
        parser.error(str(exc))
    try:
        cpus = resolve_cpus(args.cpus)
    except SpecError as exc:
        parser.error(f"--cpus {args.cpus!r}: {exc}")
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
        _say(f"pinned to CPU(s) {format_cpus(cpus)} (--cpus {args.cpus})")
    if not args.warmup_prompts and not args.mark:
        try:
            os.execvp(args.stack[0], args.stack)
        except OSError as exc:
            _say(f"cannot start {args.stack[0]!r}: {exc.strerror or exc}")
            return 127
    return _bridge(args) if args.warmup_prompts else _watch(args)


if __name__ == "__main__":
    sys.exit(main())
