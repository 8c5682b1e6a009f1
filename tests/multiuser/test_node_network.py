"""Under a root trainqd each node of a job of several nodes is in a network namespace of its
own on a bridge of its attempt's (monitor/netns.py): its peers reach it, nobody else does.
Another user's job that knows a node's address and port (they are predictable) cannot
connect to it, and the bridge is gone once the attempt ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, pids_alive, python_job
from tests.support.users import submit_as, trainq_as
from tests.support.waiting import wait_for
from trainqd.monitor import netns

pytestmark = pytest.mark.multiuser

# Bob's job: connect to the address and port given, and say how it went.
KNOCK = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as exc:
    print("refused:", exc)
"""


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_another_users_job_cannot_reach_a_node(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    spec = python_job("gang_node.py", "sleep", instance_count=2, working_dir=str(shared_dir))
    gang = submit_as(workstation, accounts.alice, spec)
    nodes = workstation.job(gang["id"])["nodes"]
    pid_file = Path(nodes[0]["job_dir"]) / "model" / "pid"
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(), what="the first node to listen"
    )
    node_pid = int(pid_file.read_text())
    env = environment_of(node_pid)
    address, port = env["TRAINQ_NODE_ADDRESS"], env["PADDLE_PORT"]
    assert os.stat(f"/proc/{node_pid}").st_uid == accounts.alice.uid
    # Its own network: not the host's.
    assert os.readlink(f"/proc/{node_pid}/ns/net") != os.readlink("/proc/self/ns/net")

    knock = {
        "command": ["python3", "-c", KNOCK, address, port],
        "working_dir": str(shared_dir),
        "max_retries": 0,
    }
    attempt = submit_as(workstation, accounts.bob, knock)
    done = workstation.wait_state(attempt["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    # Nor from the host itself: it has no route to the bridge (whatever answers there, if
    # anything, is where the host's default route leads: never the node).
    accounts.bob.run(["python3", "-c", KNOCK, address, port], cwd=str(shared_dir))
    node_log = workstation.cli("logs", str(gang["id"]), "--node", "1").stdout
    assert "listening" in node_log
    assert "accepted" not in node_log  # no knock reached it

    assert workstation.job(gang["id"])["state"] == "RUNNING"  # untouched
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves on
    bridge = netns.bridge_name(str(workstation.state_dir / "jobs"), gang["id"], 1)
    assert Path(f"/sys/class/net/{bridge}").exists()
    assert trainq_as(workstation, accounts.alice, "stop", str(gang["id"])).returncode == 0
    assert workstation.wait_state(gang["id"], timeout=30)["state"] == "STOPPED"
    assert not pids_alive([node_pid])
    assert not Path(f"/sys/class/net/{bridge}").exists()
