"""Fair share counts a job of several CPU nodes one CPU slot per node, both while trainqd
runs and as rebuilt from the attempts when it starts again (README.md, "Several nodes")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.support.daemon import Daemon, running_daemon

SLEEP = ["sleep", "1"]
GROUPS = [{"name": "a", "instance_count": 2}, {"name": "b", "instance_count": 1}]


def cpu_slot_hours(daemon: Daemon) -> float:
    users = daemon.get("/v1/users").json()["users"]
    (root,) = [u for u in users if u["user"] == "root"]
    hours: float = root["cpu_slot_hours"]
    return hours


def hours_ran(job: dict[str, Any]) -> float:
    assert job["state"] == "COMPLETED", job
    (attempt,) = job["attempts"]
    ran = datetime.fromisoformat(attempt["ended_at"]) - datetime.fromisoformat(
        attempt["started_at"]
    )
    return ran.total_seconds() / 3600


def test_cpu_gangs_count_a_slot_per_node_after_a_restart() -> None:
    with running_daemon(gpus="fake:1", config={"cpu_slots": 3}) as daemon:
        nodes = {
            3: daemon.submit({"command": SLEEP, "instance_count": 3}),
            1: daemon.submit({"command": SLEEP}),
        }
        groups = daemon.submit({"command": SLEEP, "instance_groups": GROUPS})
        used = sum(
            slots * hours_ran(daemon.wait_state(job["id"], timeout=60))
            for slots, job in [*nodes.items(), (3, groups)]
        )
        # Decay over the test's few seconds (half-life: 7 days) is far below the tolerance.
        assert cpu_slot_hours(daemon) == pytest.approx(used, rel=1e-3)
        daemon.restart()
        assert cpu_slot_hours(daemon) == pytest.approx(used, rel=1e-3)
