"""Real distributed PyTorch across subprocess nodes: torch.distributed's gloo back end (CPU,
Debian's python3-torch) finds its peers from what trainq gives each node, an all-reduce
gives the right sum, a few steps of DDP leave the same weights on every node, and DDP
training stopped mid-way resumes from each node's checkpoints to exactly the weights of a
run never stopped."""

from __future__ import annotations

import re

import pytest

from tests.support.daemon import Daemon, trainer
from tests.support.waiting import wait_for

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


STEPS = 8


def ddp(nodes: int, *args: str) -> dict[str, object]:
    command = [SYSTEM_PYTHON, trainer("torch_ddp.py"), str(STEPS), *args]
    return {"command": command, "instance_count": nodes, "max_retries": 0}


def node_logs(daemon: Daemon, job_id: int, nodes: int) -> list[str]:
    """Each node's output of the job's last attempt."""
    return [
        daemon.cli("logs", str(job_id), "--node", str(node)).stdout for node in range(1, nodes + 1)
    ]


def final_weights(daemon: Daemon, job_id: int, nodes: int) -> str:
    """The digest of the weights every node ended with, the same on all of them."""
    digests = set()
    for out in node_logs(daemon, job_id, nodes):
        found = re.search(rf"weights ([0-9a-f]{{16}}) after step {STEPS}\n", out)
        assert found is not None, out
        digests.add(found.group(1))
    assert len(digests) == 1, digests
    return digests.pop()


@pytest.mark.parametrize("nodes", [2, 4])
def test_ddp_stopped_mid_way_resumes_to_the_weights_of_a_run_never_stopped(
    daemon: Daemon, nodes: int
) -> None:
    reference = daemon.submit(ddp(nodes))["id"]
    # The last node stalls after step 3 without saving it; the others saved it and wait
    # for the last in step 4. Held there, the nodes hold different last checkpoints.
    job_id = daemon.submit(ddp(nodes, "--stall-after", "3"))["id"]

    def mid_way() -> bool:
        logs = node_logs(daemon, job_id, nodes)
        return f"algo-{nodes} stalls after step 3\n" in logs[-1] and all(
            f"algo-{n} step 3 loss" in out for n, out in enumerate(logs[:-1], start=1)
        )

    wait_for(mid_way, timeout=240, what="every node to be at step 3")
    held = daemon.cli("hold", str(job_id))
    assert held.returncode == 0, held.stderr
    paused = daemon.wait_state(job_id, "PENDING", timeout=60)
    assert paused["attempts"][0]["outcome"] == "preempted"
    assert daemon.cli("release", str(job_id)).returncode == 0

    done = daemon.wait_state(job_id, timeout=240)
    assert done["state"] == "COMPLETED", done
    assert [a["number"] for a in done["attempts"]] == [1, 2]
    for node, out in enumerate(node_logs(daemon, job_id, nodes), start=1):
        # Step 2, the last that every node saved; steps 1 and 2 are not trained again.
        assert out.startswith(f"algo-{node} resumed from step 2: "), out
        assert f"algo-{node} step 2 loss" not in out
        assert f"algo-{node} step 3 loss" in out
    assert daemon.wait_state(reference, timeout=240)["state"] == "COMPLETED"
    assert final_weights(daemon, job_id, nodes) == final_weights(daemon, reference, nodes)
