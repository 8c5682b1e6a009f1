"""DDP training across a job's nodes (tests/trainers/torch_ddp.py), seen from outside: what
each node printed, the weights they ended with, and a run paused mid-way and resumed."""

from __future__ import annotations

import re

from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

STEPS = 8  # torch_ddp.py's steps in every test run of it
STALL_AFTER = 3  # where a run to be paused stalls (--stall-after)


def node_logs(daemon: Daemon, job_id: int, nodes: int) -> list[str]:
    """Each node's stdout in the job's last attempt (the engine may warn on stderr), from
    the API: polled while torch's nodes share the CPUs, a CLI per node would slow them."""
    logs = []
    for node in range(1, nodes + 1):
        answer = daemon.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stdout", "node": node})
        assert answer.status_code == 200, answer.text
        logs.append(answer.text)
    return logs


def final_weights(daemon: Daemon, job_id: int, nodes: int) -> str:
    """The digest of the weights every node ended with, the same on all of them."""
    digests = set()
    for out in node_logs(daemon, job_id, nodes):
        found = re.search(rf"weights ([0-9a-f]{{16}}) after step {STEPS}\n", out)
        assert found is not None, out
        digests.add(found.group(1))
    assert len(digests) == 1, digests
    return digests.pop()


def pause_mid_way_and_resume(daemon: Daemon, job_id: int, nodes: int, timeout: float) -> None:
    """Hold the job (SIGTERM to every node) once its last node stalls after step
    STALL_AFTER, unsaved, while the others saved it and wait for the last in the next step;
    release it, and see it complete from the step every node saved, STALL_AFTER - 1."""

    def mid_way() -> bool:
        logs = node_logs(daemon, job_id, nodes)
        return f"algo-{nodes} stalls after step {STALL_AFTER}\n" in logs[-1] and all(
            f"algo-{n} step {STALL_AFTER} loss" in out for n, out in enumerate(logs[:-1], start=1)
        )

    wait_for(mid_way, timeout=timeout, what=f"every node to be at step {STALL_AFTER}")
    held = daemon.cli("hold", str(job_id))
    assert held.returncode == 0, held.stderr
    paused = daemon.wait_state(job_id, "PENDING", timeout=timeout)
    assert paused["attempts"][0]["outcome"] == "preempted"
    released = daemon.cli("release", str(job_id))
    assert released.returncode == 0, released.stderr

    done = daemon.wait_state(job_id, timeout=timeout)
    assert done["state"] == "COMPLETED", done
    assert [a["number"] for a in done["attempts"]] == [1, 2]
    resumed = STALL_AFTER - 1
    for node, out in enumerate(node_logs(daemon, job_id, nodes), start=1):
        assert out.startswith(f"algo-{node} resumed from step {resumed}: "), out
        assert f"algo-{node} step {resumed} loss" not in out  # not trained again
        assert f"algo-{node} step {resumed + 1} loss" in out
