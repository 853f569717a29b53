"""A real Ray cluster for the sweep's tests, started once per session.

Three nodes on this machine: a head with no CPUs (drivers only), one node advertising
``accelerator_type:A10G`` and one advertising ``accelerator_type:L4``; no GPUs. Token
authentication is off for this private, loopback-only cluster (Ray 2.60 turns it on by default).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster


@dataclass
class TestCluster:
    cluster: Cluster
    a10g: object  # ray._private.node.Node
    l4: object

    @property
    def address(self) -> str:
        return self.cluster.address


def start_cluster(temp_dir: str, **nodes: dict) -> tuple[Cluster, dict[str, object]]:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Ray's files (and the address file ray.init(address="auto") reads) go under RAY_TMPDIR,
    # so this cluster neither touches /tmp/ray nor is found by anyone else's ray.init().
    os.environ["RAY_TMPDIR"] = temp_dir
    # Workers import the project as the nodes' processes find it: on a real cluster it is
    # installed on every node; here the nodes inherit this checkout on PYTHONPATH.
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    added = {name: cluster.add_node(**args) for name, args in nodes.items()}
    cluster.wait_for_nodes()
    return cluster, added


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[TestCluster]:
    # Unix socket paths must stay short: a pytest tmp_path would overflow them.
    temp_dir = tempfile.mkdtemp(prefix="gsray", dir="/tmp")
    cluster, nodes = start_cluster(
        temp_dir,
        a10g={"num_cpus": 2, "resources": {"accelerator_type:A10G": 1}},
        l4={"num_cpus": 2, "resources": {"accelerator_type:L4": 1}},
    )
    try:
        yield TestCluster(cluster=cluster, a10g=nodes["a10g"], l4=nodes["l4"])
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def ray_connected(ray_cluster: TestCluster) -> Iterator[TestCluster]:
    """This process joined the session's cluster as a driver (for in-process sweeps)."""
    if not ray.is_initialized():
        ray.init(address=ray_cluster.address, logging_level="WARNING", log_to_driver=False)
    yield ray_cluster
