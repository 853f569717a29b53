"""Helpers of the security tests: who listens where, and which process went through a shell."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["AUDIT_DIR", "LOOPBACK", "Listener", "audit_env", "listeners", "off_loopback", "shell_spawns"]

AUDIT_DIR = Path(__file__).resolve().parent / "audit"  # its sitecustomize.py logs every spawn
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "busybox"}


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str
    ip: str
    port: int


def listeners(processes: Iterable[psutil.Process]) -> list[Listener]:
    """Every listening TCP socket and every bound, unconnected UDP socket of these processes (a connected
    UDP socket, such as a browser's DNS query, takes datagrams from its one peer only: a client, not a
    listener)."""
    found = []
    for process in processes:
        try:
            name = process.name()
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN or (
                    conn.type == socket.SOCK_DGRAM and conn.laddr and not conn.raddr
                ):
                    found.append(Listener(process.pid, name, conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def off_loopback(found: Iterable[Listener]) -> list[Listener]:
    return [listener for listener in found if listener.ip not in LOOPBACK]


def audit_env(log: Path) -> dict[str, str]:
    """Env entries that make every Python process started with them log its spawns to ``log``."""
    path = os.pathsep.join(filter(None, [str(AUDIT_DIR), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "GEMMA_AUDIT_LOG": str(log)}


def shell_spawns(log: Path) -> list[dict]:
    """Audit records of processes started through a shell (``shell=True``, ``os.system``, ...)."""
    if not log.exists():
        return []
    bad = []
    for line in log.read_text().splitlines():
        record = json.loads(line)
        program = record["executable"] or (record["argv"] or [""])[0]
        if record["event"] == "os.system" or os.path.basename(program) in SHELLS:
            bad.append(record)
    return bad
