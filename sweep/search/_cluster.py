"""The Ray session a sweep runs in: an existing cluster, or a local instance started and stopped.

Joining (``--ray-address``) keeps the cluster's own settings, token authentication included.
A local instance is private to this run: it binds 127.0.0.1, keeps its files under the run
folder (or, where that path is too long for Ray's unix sockets, in a short per-user folder under
the system's temp dir), and starts without the dashboard and without token authentication (Ray 2.60 turns that
on by default and writes ``~/.ray/auth_token``), unless the user set ``RAY_AUTH_MODE``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict

import ray
from ray._private import ray_constants

from errors import ClusterError
from sweep.search._spec import Resources
from sweep.search._worker import ACCELERATOR_PREFIX

__all__ = ["check_capacity", "ray_session"]

# A unix socket path holds at most 107 bytes, and Ray puts its sockets at
# <temp dir>/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store: 70 bytes after the dir.
_SOCKET_PATH_MAX = 107
_SOCKET_TAIL = 70


def _local_temp_dir(preferred: Path) -> Path:
    path = preferred.resolve()
    if len(str(path)) + _SOCKET_TAIL > _SOCKET_PATH_MAX:
        path = Path(tempfile.gettempdir()) / f"gemma-sweep-ray-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _InitArgs(TypedDict, total=False):
    """The arguments of ``ray.init`` that depend on joining a cluster or starting a local one."""

    address: str
    _temp_dir: str
    _node_ip_address: str
    include_dashboard: bool


@contextmanager
def ray_session(*, address: str | None, temp_dir: Path) -> Iterator[None]:
    if ray.is_initialized():  # a caller (a test) already joined a cluster for us
        yield
        return
    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        # ray.init turns 127.0.0.1 into the host's outward address and then listens on every
        # interface, with token authentication off. Ray's single-host mode (its default on macOS
        # and Windows) keeps every process of the instance on loopback.
        ray_constants.ENABLE_RAY_CLUSTER = False
        kwargs: _InitArgs = {
            "_temp_dir": str(_local_temp_dir(temp_dir)),
            "_node_ip_address": "127.0.0.1",
            "include_dashboard": False,
        }
    else:
        kwargs = {"address": address}
    try:
        ray.init(**kwargs, logging_level=logging.WARNING, log_to_driver=False, configure_logging=True)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        if address is None:
            raise
        raise ClusterError(f"--ray-address {address!r}: cannot join the Ray cluster: {exc}") from None
    try:
        yield
    finally:
        ray.shutdown()


def check_capacity(resources: Resources) -> None:
    """Refuse a study no live node of the cluster can host, naming what the nodes offer."""
    wanted = {"CPU": resources.num_cpus, "GPU": resources.num_gpus}
    if resources.accelerator_type:
        wanted[ACCELERATOR_PREFIX + resources.accelerator_type] = 0.001
    offers = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    if any(all(offer.get(k, 0) >= v for k, v in wanted.items() if v) for offer in offers):
        return
    seen = sorted(
        {key[len(ACCELERATOR_PREFIX) :] for offer in offers for key in offer if key.startswith(ACCELERATOR_PREFIX)}
    )
    raise ClusterError(
        f"no node of the Ray cluster offers a trial's resources { ({k: v for k, v in wanted.items() if v}) }; "
        f"accelerator types the nodes advertise: {seen or 'none'}"
    )
