"""One serving stack as a process group: start, wait until ready, stop. ``EngineProcess``.

Call order: ``start()`` -> ``wait_ready()`` -> (requests to ``base_url``) -> ``stop()``. As a
context manager, entering starts and waits (stopping again if boot fails) and leaving stops.
``stop()`` may be called at any point and more than once.

- The stack runs in its own session (``start_new_session``), so its process group holds every
  child it spawns; stop signals the whole group: TERM, then KILL after a grace period, and only
  returns once no live member is left, which also frees its port.
- stdout and stderr go to one log file through a scrubbing pipe (``LogPipe``): a secret
  the stack echoes never lands on disk. Errors carry the log's last lines.
- Readiness is ``GET /v1/models`` answering 200 and listing the served model name. The poll
  notices at once when the process has exited, and stops the group at the boot timeout.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import httpx

from engine.config import BenchProfile
from engine.host import group_members
from engine.launch._config import LaunchConfig
from engine.launch._logpipe import LogPipe
from engine.secrets import Scrubber, redact_argv
from errors import EngineBootError, EngineStopError

__all__ = ["OWNER_ENV", "EngineProcess", "read_log_tail", "stop_groups"]

# Every process of a stack carries the pid of the process that started it (children inherit
# the env), so a watchdog can find the stack of a dead owner without having seen it start.
OWNER_ENV = "GEMMA_SWEEP_ENGINE_OWNER"

_running: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


def read_log_tail(path: Path, *, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def stop_groups(
    pgids: Iterable[int],
    *,
    grace_s: float,
    kill_wait_s: float = 10.0,
    reap: Callable[[], object] = lambda: None,
    on_kill: Callable[[list[int]], None] = lambda live: None,
) -> list[int]:
    """TERM each process group, KILL what is left after ``grace_s``; return the groups that still
    have a live member ``kill_wait_s`` after the KILL (empty: all gone).

    A group with no live member is never signalled, so that an id reused since is left alone.
    ``reap`` runs at each poll (a parent must reap its own child, else it lingers as a zombie
    member); ``on_kill`` is told which groups outlived their grace, before they are killed.
    """
    live = [g for g in pgids if group_members(g)]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        if not live:
            break
        if sig == signal.SIGKILL:
            on_kill(live)
        for pgid in live:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while True:
            reap()
            live = [g for g in live if group_members(g)]
            if not live or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    return live


def _port_in_use(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


class EngineProcess:
    """One stack's process group (the call order: the module's docstring). A boot for a measurement is built by
    ``for_profile``; the constructor's timings are the process's own (tests of the stop, a stub's grace)."""

    def __init__(
        self,
        launch: LaunchConfig,
        *,
        log_path: Path,
        boot_timeout_s: float = 600.0,
        stop_grace_s: float = 10.0,
        poll_interval_s: float = 0.2,
    ) -> None:
        self.launch = launch
        self.log_path = Path(log_path)
        self.boot_timeout_s = boot_timeout_s
        self.stop_grace_s = stop_grace_s
        self.poll_interval_s = poll_interval_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: LogPipe | None = None
        self._started_at = 0.0
        self._stopped = False

    @classmethod
    def for_profile(
        cls, launch: LaunchConfig, profile: BenchProfile, *, log_path: Path, extra_boot_s: float = 0.0
    ) -> EngineProcess:
        """The stack ``launch`` starts, booted to be measured by ``profile``: ready within the profile's boot
        timeout, plus ``extra_boot_s`` for what the stack does first that the profile cannot know of (a fresh
        submission folder preparing its model); its output in ``log_path``."""
        return cls(launch, log_path=log_path, boot_timeout_s=profile.boot_timeout_s + extra_boot_s)

    # --- state ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        """None while the process runs (or before start), else its exit status."""
        return self._proc.poll() if self._proc else None

    def exit_status(self, *, wait_s: float = 0.0) -> int | None:
        """The exit status, waiting up to ``wait_s`` for it; None while it still runs."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 40) -> str:
        if self._log is not None:
            self._log.settle()
        return read_log_tail(self.log_path, lines=lines)

    def _name(self) -> str:
        return f"engine {self.launch.manifest_name!r} (pid {self.pid}, port {self.launch.port})"

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("EngineProcess.start() called twice")
        if _port_in_use(self.launch.host, self.launch.port):
            raise EngineBootError(
                f"engine {self.launch.manifest_name!r}: port {self.launch.port} on "
                f"{self.launch.host} is already in use by another process"
            )
        env = {**self.launch.process_env(), OWNER_ENV: str(os.getpid())}
        self._log = LogPipe(self.log_path, Scrubber(env, self.launch.argv))  # what the stack could echo
        log = self._log.open()
        self._log.note(f"[gemma-sweep] starting in {self.launch.cwd}: {redact_argv(self.launch.argv)}\n")
        try:
            self._proc = subprocess.Popen(
                self.launch.argv,
                cwd=self.launch.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineBootError(
                f"engine {self.launch.manifest_name!r}: cannot start {self.launch.argv[0]!r} "
                f"in {self.launch.cwd}: {exc.strerror or exc}"
            ) from None
        finally:
            os.close(log)  # the stack holds the write end now: the pipe ends when its group does
            if self._proc is None:
                self._log.close()
        self._started_at = time.monotonic()
        _running.add(self)

    def wait_ready(self) -> float:
        """Block until the stack serves; return seconds since start. Stops it on failure."""
        if self._proc is None:
            raise RuntimeError("EngineProcess.wait_ready() before start()")
        deadline = self._started_at + self.boot_timeout_s
        url = f"{self.base_url}/v1/models"
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self._fail(f"{self._name()} exited with status {code} during boot")
                try:
                    response = client.get(url)
                    if response.status_code == 200:
                        self._check_models(response)
                        self._log.settle()  # type: ignore[union-attr]  # what it printed at boot, in the file
                        return time.monotonic() - self._started_at
                except httpx.HTTPError:
                    pass  # not listening yet
                if time.monotonic() >= deadline:
                    self._fail(
                        f"{self._name()} was not ready after {self.boot_timeout_s:g} s "
                        f"(GET {url}); its process group was stopped"
                    )
                time.sleep(self.poll_interval_s)

    def _check_models(self, response: httpx.Response) -> None:
        try:
            served = [m["id"] for m in response.json()["data"]]
        except (ValueError, KeyError, TypeError):
            self._fail(f"{self._name()}: GET /v1/models answered malformed JSON: {response.text[:200]!r}")
        if self.launch.served_model_name not in served:
            self._fail(
                f"{self._name()} serves {served}, not the manifest's served_model_name "
                f"{self.launch.served_model_name!r}"
            )

    def _fail(self, message: str) -> NoReturn:
        self.stop()
        raise EngineBootError(f"{message} (log: {self.log_path})", log_tail=self.log_tail())

    def stop(self) -> float:
        """TERM the group, KILL it after the grace period; return seconds it took."""
        if self._proc is None or self._stopped:
            return 0.0
        began = time.monotonic()
        pgid = self._proc.pid
        if stop_groups([pgid], grace_s=self.stop_grace_s, reap=self._proc.poll, on_kill=self._note_kill):
            raise EngineStopError(f"{self._name()}: process group {pgid} survived SIGKILL")
        self._proc.wait()
        self._log.close()  # type: ignore[union-attr]  # every writer is gone: the last line goes in
        self._stopped = True  # the group id may belong to someone else from now on
        _running.discard(self)
        return time.monotonic() - began

    def _note_kill(self, _live: list[int]) -> None:
        self._log.note(f"[gemma-sweep] still running {self.stop_grace_s:g} s after TERM: KILL\n")  # type: ignore[union-attr]

    def __enter__(self) -> EngineProcess:
        self.start()
        self.wait_ready()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@atexit.register
def _stop_leftovers() -> None:
    # An interrupted driver or worker must not leave stacks holding ports and memory.
    for engine in list(_running):
        engine.stop()
