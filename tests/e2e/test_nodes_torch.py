"""Real distributed PyTorch across subprocess nodes: torch.distributed's gloo back end (CPU,
Debian's python3-torch) finds its peers from what trainq gives each node, an all-reduce
gives the right sum, a few steps of DDP leave the same weights on every node, and DDP
training stopped mid-way resumes from each node's checkpoints to exactly the weights of a
run never stopped."""

from __future__ import annotations

import re

import pytest

from tests.support.daemon import Daemon, trainer
from tests.support.ddp import (
    STALL_AFTER,
    STEPS,
    final_weights,
    node_logs,
    pause_mid_way_and_resume,
)

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


def ddp(nodes: int, *args: str) -> dict[str, object]:
    command = [SYSTEM_PYTHON, trainer("torch_ddp.py"), str(STEPS), *args]
    return {"command": command, "instance_count": nodes, "max_retries": 0}


@pytest.mark.parametrize("nodes", [2, 4])
def test_ddp_stopped_mid_way_resumes_to_the_weights_of_a_run_never_stopped(
    daemon: Daemon, nodes: int
) -> None:
    reference = daemon.submit(ddp(nodes))["id"]
    job_id = daemon.submit(ddp(nodes, "--stall-after", str(STALL_AFTER)))["id"]
    pause_mid_way_and_resume(daemon, job_id, nodes, timeout=240)
    assert daemon.wait_state(reference, timeout=240)["state"] == "COMPLETED"
    assert final_weights(daemon, job_id, nodes) == final_weights(daemon, reference, nodes)


def test_ddp_retried_after_a_crash_resumes_to_the_weights_of_a_run_never_stopped(
    daemon: Daemon,
) -> None:
    reference = daemon.submit(ddp(2))["id"]
    crashing = {**ddp(2, "--crash-after", str(STALL_AFTER)), "max_retries": 1}
    crashing["retry_backoff_seconds"] = 0
    job_id = daemon.submit(crashing)["id"]
    done = daemon.wait_state(job_id, timeout=240)
    assert done["state"] == "COMPLETED", done
    assert len(done["attempts"]) == 2
    first = done["attempts"][0]
    assert (first["exit_code"], first["retried"]) == (139, True)
    for node, out in enumerate(node_logs(daemon, job_id, 2), start=1):
        # A node stopped by the other's crash before it saved step 3 resumes all from 2.
        found = re.match(rf"algo-{node} resumed from step (\d+): ", out)
        assert found is not None, out
        assert int(found.group(1)) in (STALL_AFTER - 1, STALL_AFTER), out
    assert daemon.wait_state(reference, timeout=240)["state"] == "COMPLETED"
    assert final_weights(daemon, job_id, 2) == final_weights(daemon, reference, 2)
