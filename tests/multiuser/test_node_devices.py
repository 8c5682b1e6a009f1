"""Each node of a job of several nodes runs as the job's owner and opens its own GPUs only,
not its sibling nodes' (an eBPF device program on the node's own cgroup inside the
attempt's; a devices cgroup v1 per node where the host has one)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, python_job
from tests.support.gpu_devices import ALLOWED, DENIED
from tests.support.users import submit_as, trainq_as

pytestmark = pytest.mark.multiuser


def probe_nodes(
    daemon: Daemon, accounts: Accounts, shared_dir: Path, nodes: list[str]
) -> list[tuple[list[int], dict[str, Any], int]]:
    """Two nodes of two GPUs each: per node, its GPUs, its report and the report's owner."""
    spec = python_job(
        "device_probe.py", *nodes, instance_count=2, gpus=2, working_dir=str(shared_dir)
    )
    job = submit_as(daemon, accounts.alice, spec)
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    given = sorted(done["attempts"][0]["gpus"])
    found = []
    for rank, node in enumerate(done["nodes"]):
        report_file = Path(node["job_dir"]) / "output" / "data" / "devices.json"
        report = json.loads(report_file.read_text())
        found.append((given[2 * rank : 2 * rank + 2], report, os.stat(report_file).st_uid))
    return found


@pytest.mark.parametrize("host", ["gpu_host", "bpf_gpu_host"])
def test_each_node_opens_its_own_gpus_only(
    host: str, request: pytest.FixtureRequest, accounts: Accounts, shared_dir: Path
) -> None:
    workstation, gpu_nodes = request.getfixturevalue(host)
    *gpu_paths, ctl = gpu_nodes
    for own, report, owner in probe_nodes(workstation, accounts, shared_dir, gpu_nodes):
        assert owner == accounts.alice.uid  # the node ran as the job's owner
        assert len(own) == 2
        for index, path in enumerate(gpu_paths):
            assert report[path] == (ALLOWED if index in own else DENIED), (path, own)
        assert report[ctl] == ALLOWED
        assert report["escape_v2"] in ("EACCES", "EPERM")
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0
