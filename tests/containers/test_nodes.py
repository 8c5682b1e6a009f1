"""Container jobs of several nodes: one container per node on a network of the engine's
made for the attempt (`--internal`, no port published), each named and aliased by its host
name so every node resolves the others; the containers and the network go with the attempt,
and a failing node ends the others. Real distributed PyTorch (gloo) runs across them: an
all-reduce, and DDP training paused mid-way that resumes to the weights of a run never
stopped."""

from __future__ import annotations

import os
import re
import signal
from typing import Any

import pytest

from tests.support.containers import TORCH_IMAGE, Engine, container_job, firewall_tables
from tests.support.daemon import Daemon
from tests.support.ddp import STALL_AFTER, STEPS, final_weights, pause_mid_way_and_resume
from tests.support.nodes import gang_monitor
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers


def gang(mode: str, *args: str, **spec: Any) -> dict[str, Any]:
    return container_job("gang_node.py", mode, *args, network=None, **spec)


def networks(engine: Engine) -> list[str]:
    listed = engine.run("network", "ls", "--format", "{{.Name}}").stdout.split()
    return [name for name in listed if name.startswith("trainq-")]


@pytest.mark.parametrize("which", ["podman_daemon", "docker_daemon"])
def test_container_nodes_meet_by_name(
    which: str, request: pytest.FixtureRequest, engine: Engine
) -> None:
    daemon: Daemon = request.getfixturevalue(which)
    job = daemon.submit(gang("sum", instance_count=3, max_retries=0))
    done = daemon.wait_state(job["id"], timeout=120)
    assert done["state"] == "COMPLETED", daemon.cli("logs", str(job["id"])).stdout
    logs = [daemon.cli("logs", str(job["id"]), "--node", str(n)).stdout for n in (1, 2, 3)]
    assert "algo-1 served total=3" in logs[0]
    assert "algo-2 got total=3" in logs[1]
    assert "algo-3 got total=3" in logs[2]
    wait_for(lambda: not engine.job_containers(), timeout=30, what="the containers to go")
    assert networks(engine) == []
    assert firewall_tables() == []


def test_a_failing_container_node_ends_the_others(podman_daemon: Daemon, engine: Engine) -> None:
    job = podman_daemon.submit(gang("fail", "2", "3", instance_count=3, max_retries=0))
    done = podman_daemon.wait_state(job["id"], timeout=120)
    assert done["state"] == "FAILED"
    assert (done["attempts"][0]["outcome"], done["attempts"][0]["exit_code"]) == ("exited", 3)
    assert done["failure_reason"].startswith("algo-3: ")
    wait_for(lambda: not engine.job_containers(), timeout=60, what="the containers to go")
    assert networks(engine) == []


def test_a_container_gang_whose_monitor_vanished_leaves_nothing(
    podman_daemon: Daemon, engine: Engine
) -> None:
    job = podman_daemon.submit(gang("sleep", instance_count=2, max_retries=0))
    wait_for(lambda: len(engine.job_containers()) == 2, timeout=60, what="both containers")
    assert len(networks(engine)) == 1
    os.kill(gang_monitor(podman_daemon, job["id"]), signal.SIGKILL)
    # trainqd takes the attempt for lost: its containers and its network go.
    wait_for(lambda: not engine.job_containers(), timeout=90, what="the containers to go")
    wait_for(lambda: not networks(engine), timeout=30, what="the network to go")
    wait_for(lambda: not firewall_tables(), timeout=30, what="its firewall to go")
    podman_daemon.cli("stop", str(job["id"]))
    assert podman_daemon.wait_state(job["id"], timeout=60)["state"] == "STOPPED"
    assert not networks(engine)


def torch_job(trainer: str, *args: str, nodes: int) -> dict[str, Any]:
    spec = {"image": TORCH_IMAGE, "instance_count": nodes, "max_retries": 0}
    return container_job(trainer, *args, network=None, **spec)


@pytest.mark.parametrize(
    ("which", "nodes"), [("podman_daemon", 2), ("podman_daemon", 4), ("docker_daemon", 2)]
)
def test_a_torch_all_reduce_and_ddp_across_container_nodes(
    which: str, nodes: int, request: pytest.FixtureRequest, engine: Engine
) -> None:
    daemon: Daemon = request.getfixturevalue(which)
    job = daemon.submit(torch_job("torch_allreduce.py", nodes=nodes))
    done = daemon.wait_state(job["id"], timeout=240)
    assert done["state"] == "COMPLETED", daemon.cli("logs", str(job["id"])).stdout
    expected = nodes * (nodes + 1) // 2  # each rank's rank + 1, summed by gloo
    digests = set()
    for node in range(1, nodes + 1):
        out = daemon.cli("logs", str(job["id"]), "--stdout", "--node", str(node)).stdout
        # Over the attempt's network, the peers found by their host names alone.
        assert f"algo-{node} rank {node - 1} of {nodes}: sum {expected}\n" in out, out
        found = re.search(r"weights ([0-9a-f]{16})", out)
        assert found is not None, out
        digests.add(found.group(1))
    assert len(digests) == 1  # DDP: every node holds the same weights
    wait_for(lambda: not engine.job_containers(), timeout=60, what="the containers to go")
    assert networks(engine) == []


def test_ddp_in_containers_paused_mid_way_resumes_to_the_weights_of_a_run_never_stopped(
    podman_daemon: Daemon, engine: Engine
) -> None:
    reference = podman_daemon.submit(torch_job("torch_ddp.py", str(STEPS), nodes=2))["id"]
    paused = torch_job("torch_ddp.py", str(STEPS), "--stall-after", str(STALL_AFTER), nodes=2)
    job_id = podman_daemon.submit(paused)["id"]
    pause_mid_way_and_resume(podman_daemon, job_id, 2, timeout=240)
    assert podman_daemon.wait_state(reference, timeout=240)["state"] == "COMPLETED"
    assert final_weights(podman_daemon, job_id, 2) == final_weights(podman_daemon, reference, 2)
    wait_for(lambda: not engine.job_containers(), timeout=60, what="the containers to go")
    assert networks(engine) == []
