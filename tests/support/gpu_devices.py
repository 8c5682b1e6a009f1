"""Simulated GPUs with real device nodes, made by a root trainqd, for the tests of what a
job may open (tests/multiuser/test_gpu_devices.py, test_node_devices.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.accounts import ADMINS
from tests.support.daemon import Daemon, running_daemon

NVIDIA_MAJOR = 195
ALLOWED = "ENXIO"  # the cgroup let the open through; no driver answers
DENIED = "EPERM"  # the devices cgroup refused it


@contextmanager
def gpu_daemon(shared_dir: Path, env: dict[str, str]) -> Iterator[tuple[Daemon, list[str]]]:
    """A root trainqd with four simulated GPUs whose device nodes it makes itself, in a
    directory the test users can reach: nvidia0..3 and nvidiactl, as the NVIDIA driver
    makes them."""
    nodes = shared_dir / "dev"
    config = {"admin_group": ADMINS, "fake_gpu_device_dir": str(nodes)}
    with running_daemon(gpus="fake:4", config=config, env=env) as daemon:
        yield daemon, [str(nodes / f"nvidia{n}") for n in range(4)] + [str(nodes / "nvidiactl")]
    # Gone again at trainqd's clean shutdown, directory and all: trainqd made them.
    assert not nodes.exists()
