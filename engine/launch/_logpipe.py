"""A stack's stdout and stderr, written to its log file through a scrubbing pipe: ``LogPipe``.

The stack writes into a pipe; a thread of the process that started it reads the pipe and appends
what it read to the log file, scrubbed (``engine.secrets.Scrubber``) line by line, so a secret the
stack echoes never lands on disk: not while it runs, not when its owner is SIGKILLed, not when
its node is lost. A line is held back until its end arrives (a secret written in two pieces is
still one line), up to ``MAX_LINE`` bytes; a longer one is cut at its last space.

Call order: ``open()`` (the write end, for the stack's stdout) -> ``note()`` any time ->
``settle()`` when the log must be read -> ``close()`` once the stack's process group is gone.

It cannot stall the stack: the thread only reads, scrubs a line in microseconds and appends; a
failed write (a full disk) drops that text and reading goes on; the pipe holds 1 MiB, so the
stack would block only if this process stopped running for as long as the stack takes to print
a MiB. If this process dies, the stack's writes fail (EPIPE) and never block.
"""

from __future__ import annotations

import fcntl
import os
import select
import termios
import threading
import time
from pathlib import Path
from typing import BinaryIO

from engine.secrets import Scrubber

__all__ = ["MAX_LINE", "LogPipe"]

MAX_LINE = 1 << 16  # a longer line without an end is written scrubbed as it stands
_PIPE_BYTES = 1 << 20
_POLL_S = 0.5  # how soon the thread sees close() when a writer outlives the stack's group


def _unread(fd: int) -> int:
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


class LogPipe:
    def __init__(self, path: Path, scrub: Scrubber) -> None:
        self.path = Path(path)
        self._scrub = scrub
        self._lock = threading.Lock()  # held while a read is processed: settle() knows it is done
        self._held = b""  # the start of a line whose end has not come yet
        self._closing = threading.Event()
        self._read_fd: int | None = None
        self._log: BinaryIO | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> int:
        """Start the reader; returns the write end (the caller passes it to the stack and closes it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.path, "ab", buffering=0)
        self._read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:
            pass  # above the system's pipe-max-size: the default 64 KiB still drains
        self._thread = threading.Thread(target=self._run, name=f"log {self.path}", daemon=True)
        self._thread.start()
        return write_fd

    def note(self, text: str) -> None:
        """A line of the project's own (what starts, what is killed), in order with the stack's."""
        with self._lock:
            self._write(text.encode())

    def settle(self, timeout_s: float = 2.0) -> None:
        """Return once every line the stack has written so far is in the file (or after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._read_fd is None or _unread(self._read_fd) == 0:
                    return
            time.sleep(0.005)

    def close(self, timeout_s: float = 5.0) -> None:
        """Read to the end (every writer gone), write the last line, stop. Bounded: a writer that
        left the stack's group loses what it writes after ``timeout_s``."""
        if self._thread is None:
            return
        self._thread.join(timeout_s)
        self._closing.set()
        self._thread.join(_POLL_S * 4)

    # --- the reader thread --------------------------------------------------------------

    def _run(self) -> None:
        fd = self._read_fd
        assert fd is not None and self._log is not None
        try:
            while not self._closing.is_set():
                if not select.select([fd], [], [], _POLL_S)[0]:
                    continue
                with self._lock:
                    data = os.read(fd, 1 << 16)
                    if not data:
                        break
                    self._take(data)
        except Exception as exc:  # a bug here must not leave the stack blocked on a full pipe
            self._drop_the_rest(fd, exc)
        finally:
            with self._lock:
                self._write(self._held)
                self._held, self._read_fd = b"", None
                os.close(fd)
                self._log.close()

    def _take(self, data: bytes) -> None:
        text = self._held + data
        end = max(text.rfind(b"\n"), text.rfind(b"\r")) + 1
        if end == 0 and len(text) > MAX_LINE:  # cut at a space: no token spans one
            end = (max(text.rfind(b" "), text.rfind(b"\t")) + 1) or len(text)
        self._write(text[:end])
        self._held = text[end:]

    def _write(self, raw: bytes) -> None:
        if not raw:
            return
        text = raw.decode("utf-8", errors="surrogateescape")  # bytes that are not UTF-8 pass as they are
        try:
            self._log.write(self._scrub(text).encode("utf-8", errors="surrogateescape"))  # type: ignore[union-attr]
        except (OSError, ValueError):
            pass  # a full disk (or a note after close): the text is lost, the stack keeps running

    def _drop_the_rest(self, fd: int, exc: Exception) -> None:
        self._held = b""
        note = f"[gemma-sweep] the log pipe failed ({type(exc).__name__}): the rest of the stack's output is dropped\n"
        try:
            self._log.write(note.encode())  # type: ignore[union-attr]
        except OSError:
            pass
        while not self._closing.is_set():
            if select.select([fd], [], [], _POLL_S)[0] and not os.read(fd, 1 << 16):
                return
