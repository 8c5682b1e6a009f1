"""Real distributed PyTorch across subprocess nodes: torch.distributed's gloo back end (CPU,
Debian's python3-torch) finds its peers from what trainq gives each node, an all-reduce
gives the right sum, and a few steps of DDP leave the same weights on every node."""

from __future__ import annotations

import re

import pytest

from tests.support.daemon import Daemon, trainer

SYSTEM_PYTHON = "/usr/bin/python3"  # where apt's python3-torch is (tests/run installs it)


@pytest.mark.parametrize("nodes", [2, 4])
def test_an_all_reduce_and_ddp_across_nodes(daemon: Daemon, nodes: int) -> None:
    spec = {
        "command": [SYSTEM_PYTHON, trainer("torch_allreduce.py")],
        "instance_count": nodes,
        "max_retries": 0,
    }
    job = daemon.submit(spec)
    done = daemon.wait_state(job["id"], timeout=240)
    assert done["state"] == "COMPLETED", done
    expected = nodes * (nodes + 1) // 2
    digests = set()
    for node in range(1, nodes + 1):
        out = daemon.cli("logs", str(job["id"]), "--node", str(node)).stdout
        assert f"algo-{node} rank {node - 1} of {nodes}: sum {expected}\n" in out, out
        found = re.search(r"weights ([0-9a-f]{16})", out)
        assert found is not None, out
        digests.add(found.group(1))
    assert len(digests) == 1  # every node holds the same weights
