"""Jobs of several nodes on one box (README.md, "Several nodes"): the nodes start together,
find each other by the names and ports trainq gives them, each has its own contract files
and logs, and the gang ends, stops, times out and survives a restart of trainqd as one."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, pids_alive, python_job
from tests.support.nodes import gang_monitor
from tests.support.waiting import wait_for
from trainqd.monitor import netns


def gang(mode: str, *args: str, **spec: Any) -> dict[str, Any]:
    return python_job("gang_node.py", mode, *args, **spec)


def node_pids(daemon: Daemon, job_id: int, ranks: list[int]) -> list[int]:
    """The pids the nodes of these ranks wrote once running (gang_node.py)."""
    nodes = daemon.job(job_id)["nodes"]
    files = [Path(nodes[rank]["job_dir"]) / "model" / "pid" for rank in ranks]
    wait_for(lambda: all(f.exists() for f in files), what=f"job {job_id}'s nodes to run")
    return [int(f.read_text()) for f in files]


def gone(pids: list[int]) -> bool:
    return not pids_alive(pids)


def resource_config(node: dict[str, Any]) -> dict[str, Any]:
    path = Path(node["job_dir"]) / "input" / "config" / "resourceconfig.json"
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def test_three_nodes_meet_by_name_and_port(daemon: Daemon) -> None:
    job = daemon.submit(gang("sum", instance_count=3, gpus=1, max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    assert len(done["attempts"]) == 1
    assert len(done["attempts"][0]["gpus"]) == 3  # one planner decision for the whole gang
    hosts = ["algo-1", "algo-2", "algo-3"]
    assert [n["name"] for n in done["nodes"]] == hosts
    assert [n["rank"] for n in done["nodes"]] == [0, 1, 2]
    for node in done["nodes"]:
        config = resource_config(node)
        assert config["current_host"] == node["name"]
        assert config["hosts"] == hosts
        assert config["instance_groups"][0]["hosts"] == hosts
    logs = [daemon.cli("logs", str(job["id"]), "--node", str(n)).stdout for n in (1, 2, 3)]
    assert "algo-1 served total=3" in logs[0]  # ranks 1 + 2, sent over TCP
    assert "algo-2 got total=3" in logs[1]
    assert "algo-3 got total=3" in logs[2]
    # Without --node: the first node's.
    assert "served total=3" in daemon.cli("logs", str(job["id"])).stdout
    shown = daemon.cli("show", str(job["id"])).stdout
    assert any(line.split()[:2] == ["algo-3", "homogeneousCluster"] for line in shown.splitlines())
    refused = daemon.cli("logs", str(job["id"]), "--node", "4")
    assert refused.returncode != 0
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_failing_node_ends_the_others(daemon: Daemon) -> None:
    job = daemon.submit(gang("fail", "1", "3", instance_count=3, max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "FAILED", done
    attempt = done["attempts"][0]
    assert (attempt["outcome"], attempt["exit_code"]) == ("exited", 3)
    assert done["failure_reason"].startswith("algo-2: ")
    assert "algo-2 failing with 3" in done["failure_reason"]  # that node's stderr
    # The others, which ran (the failing node reached them) and would never end alone.
    others = node_pids(daemon, job["id"], [0, 2])
    assert gone(others)


def test_a_transient_failure_retries_the_whole_gang(daemon: Daemon) -> None:
    job = daemon.submit(
        gang("fail", "0", "139", instance_count=2, max_retries=1, retry_backoff_seconds=0)
    )
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "FAILED"
    assert [a["exit_code"] for a in done["attempts"]] == [139, 139]
    assert done["attempts"][0]["retried"] is True


def test_stop_ends_every_node(daemon: Daemon) -> None:
    job = daemon.submit(gang("sleep", instance_count=3))
    pids = node_pids(daemon, job["id"], [0, 1, 2])
    assert daemon.cli("stop", str(job["id"])).returncode == 0
    done = daemon.wait_state(job["id"], timeout=30)
    assert done["state"] == "STOPPED"
    assert done["attempts"][0]["outcome"] == "stopped"
    assert gone(pids)


def test_the_time_limit_ends_every_node(daemon: Daemon) -> None:
    job = daemon.submit(gang("sleep", instance_count=2, max_runtime_seconds=2))
    pids = node_pids(daemon, job["id"], [0, 1])
    done = daemon.wait_state(job["id"], timeout=30)
    assert done["state"] == "STOPPED"
    assert done["timed_out"] is True
    assert gone(pids)


def test_nodes_outlive_a_restart_of_trainqd(daemon: Daemon) -> None:
    job = daemon.submit(gang("sleep", instance_count=2, gpus=1))
    pids = node_pids(daemon, job["id"], [0, 1])
    daemon.stop(signal.SIGKILL)
    assert pids_alive(pids) == pids
    daemon.start()
    running = daemon.job(job["id"])
    assert running["state"] == "RUNNING"
    assert [n["gpus"] for n in running["nodes"]] == [[g] for g in sorted(running["gpus"])]
    assert daemon.cli("stop", str(job["id"])).returncode == 0
    assert daemon.wait_state(job["id"], timeout=30)["state"] == "STOPPED"
    assert gone(pids)


def test_all_nodes_start_or_none_runs(daemon: Daemon) -> None:
    spec = gang(
        "sleep",
        instance_groups=[
            {"name": "servers", "instance_count": 1},
            {"name": "broken", "instance_count": 1, "command": ["/nonexistent/trainer"]},
        ],
        max_retries=0,
    )
    done = daemon.wait_state(daemon.submit(spec)["id"], timeout=60)
    assert done["state"] == "FAILED"
    assert done["attempts"][0]["outcome"] == "start_failed"
    assert done["failure_reason"].startswith("algo-2: ")
    assert "/nonexistent/trainer" in done["failure_reason"]


def test_the_primary_group_completes_the_job(daemon: Daemon) -> None:
    spec = gang(
        "sleep",
        instance_groups=[
            {"name": "pservers", "instance_count": 2},
            {
                "name": "trainers",
                "instance_count": 1,
                "primary": True,
                # Reaches both servers, then exits 0.
                "command": gang("fail", "2", "0")["command"],
            },
        ],
        max_retries=0,
    )
    job = daemon.submit(spec)
    servers = node_pids(daemon, job["id"], [0, 1])
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    assert gone(servers)  # stopped gracefully once the trainers were done
    config = resource_config(done["nodes"][2])
    assert config["current_host"] == "algo-3"
    assert config["current_group_name"] == "trainers"
    groups = {g["instance_group_name"]: g["hosts"] for g in config["instance_groups"]}
    assert groups == {"pservers": ["algo-1", "algo-2"], "trainers": ["algo-3"]}
    assert "algo-3 failing with 0" in daemon.cli("logs", str(job["id"]), "--node", "3").stdout


def test_restart_node_restarts_a_failing_node_in_place(daemon: Daemon) -> None:
    job = daemon.submit(gang("flaky", "1", "2", instance_count=3, restart="node", max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    assert len(done["attempts"]) == 1  # the node alone started again, not the gang
    flaky = daemon.cli("logs", str(job["id"]), "--node", "2").stdout
    assert "algo-2 restart 0\nalgo-2 restart 1\nalgo-2 restart 2\n" in flaky


def test_restart_node_ends_the_job_on_a_permanent_error(daemon: Daemon) -> None:
    job = daemon.submit(gang("flaky", "1", "-1", instance_count=2, restart="node", max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "FAILED"
    assert done["attempts"][0]["exit_code"] == 3
    flaky = daemon.cli("logs", str(job["id"]), "--node", "2").stdout
    assert flaky.count("restart") == 1  # never started again


def test_restart_node_gives_up_after_five_restarts(daemon: Daemon) -> None:
    job = daemon.submit(gang("flaky", "1", "99", instance_count=2, restart="node", max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "FAILED"
    assert done["failure_reason"].startswith("algo-2")
    flaky = daemon.cli("logs", str(job["id"]), "--node", "2").stdout
    assert flaky.count("restart") == 6  # the first start and five restarts


def test_refusals_are_one_line(daemon: Daemon) -> None:
    too_many = daemon.cli("submit", "--nodes", "3", "--gpus", "2", "--", "true")
    assert too_many.returncode != 0
    assert too_many.stderr.strip().splitlines() == [
        "trainq: the job asks for 6 GPUs on its nodes together but this host has 4"
    ]
    for spec, says in (
        (
            {"command": ["true"], "instance_groups": [{"name": "a", "instance_count": 1}] * 2},
            "instance group 'a' is named twice",
        ),
        (
            {"command": ["true"], "instance_groups": [{"name": "a", "instance_count": 0}]},
            "instance_count",
        ),
        ({"command": ["true"], "instance_count": 100_000}, "instance_count"),
        ({"image": "busybox", "instance_count": 2, "network": "host"}, "a network of its own"),
    ):
        answer = daemon.post("/v1/jobs", json=spec)
        assert answer.status_code in (400, 422), answer.text
        assert says in answer.json()["error"]["message"]
        assert "\n" not in answer.json()["error"]["message"]
    assert daemon.cli("ls").returncode == 0  # and trainqd serves on


def test_a_gang_whose_monitor_vanished_leaves_nothing(daemon: Daemon) -> None:
    job = daemon.submit(gang("sleep", instance_count=2, max_retries=0))
    pids = node_pids(daemon, job["id"], [0, 1])
    bridge = netns.bridge_name(str(daemon.state_dir / "jobs"), job["id"], 1)
    assert Path(f"/sys/class/net/{bridge}").exists()
    os.kill(gang_monitor(daemon, job["id"]), signal.SIGKILL)
    # trainqd takes the attempt for lost and ends what it supervised: every node, the bridge.
    wait_for(lambda: gone(pids), timeout=30, what="the nodes of the lost attempt to go")
    wait_for(lambda: not Path(f"/sys/class/net/{bridge}").exists(), what="the bridge to go")
    wait_for(lambda: daemon.job(job["id"])["attempts"][0]["outcome"] == "lost")
    daemon.cli("stop", str(job["id"]))
    assert daemon.wait_state(job["id"], timeout=30)["state"] == "STOPPED"


def test_every_node_gets_the_channels(daemon: Daemon, tmp_path: Path) -> None:
    """File mode read-only for every node; Pipe mode FIFOs fed to each node of its own."""
    stream = tmp_path / "stream"
    stream.mkdir()
    (stream / "part-0").write_bytes(b"records " * 10_000)
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.csv").write_text("1,2\n")
    reader = str(Path(__file__).parents[1] / "trainers" / "pipe_reader.py")
    script = (
        f'{sys.executable} {reader} "$SM_MODEL_DIR" stream:2 && '
        'if touch "$SM_CHANNEL_FILES/planted" 2>/dev/null; then exit 9; fi && '
        'cat "$SM_CHANNEL_FILES/a.csv"'
    )
    job = daemon.submit(
        {
            "command": ["sh", "-c", script],
            "instance_count": 2,
            "channels": {
                "stream": {"source": str(stream), "mode": "Pipe"},
                "files": {"source": str(files)},
            },
            "max_retries": 0,
        }
    )
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", daemon.cli("logs", str(job["id"])).stdout
    for number, node in enumerate(done["nodes"], start=1):
        model = Path(node["job_dir"]) / "model"
        for epoch in (0, 1):
            assert (model / f"stream_{epoch}").read_bytes() == b"records " * 10_000
        assert daemon.cli("logs", str(job["id"]), "--node", str(number)).stdout == "1,2\n"
    assert not (files / "planted").exists()


# Each node checkpoints at /opt/ml/checkpoints, as SageMaker code does; in the first
# attempt rank 0 waits for rank 1 to have checkpointed (it connects), then fails with a
# transient status; the retry prints what each node finds.
RESUME = """
import os, socket, sys, time
state = "/opt/ml/checkpoints/state"
me, attempt = os.environ["SM_CURRENT_HOST"], os.environ["TRAINQ_ATTEMPT"]
rank, port = int(os.environ["TRAINQ_NODE_RANK"]), int(os.environ["PADDLE_PORT"])
if os.path.exists(state):
    print("resumed", open(state).read())
    sys.exit(0)
open(state, "w").write(f"{me} at attempt {attempt}")
if rank == 0:
    socket.create_server((me, port)).accept()
    sys.exit(139)
for _ in range(1200):
    try:
        socket.create_connection(("algo-1", port)).close()
        break
    except OSError:
        time.sleep(0.05)
"""


def test_each_node_resumes_from_its_own_checkpoints(daemon: Daemon) -> None:
    job = daemon.submit(
        {
            "command": ["python3", "-c", RESUME],
            "instance_count": 2,
            "max_retries": 1,
            "retry_backoff_seconds": 0,
        }
    )
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    assert len(done["attempts"]) == 2
    for number in (1, 2):
        out = daemon.cli("logs", str(job["id"]), "--node", str(number)).stdout
        assert out == f"resumed algo-{number} at attempt 1\n", out


def test_a_parameter_server_layout_runs_to_completion(daemon: Daemon) -> None:
    """CPU parameter servers beside GPU trainers (Paddle's layout), finding each other by
    the names and ports in their environment; the trainers are primary."""
    spec = gang(
        "ps",
        instance_groups=[
            {"name": "pservers", "instance_count": 2},
            {"name": "trainers", "instance_count": 2, "gpus": 1, "primary": True},
        ],
        max_retries=0,
    )
    job = daemon.submit(spec)
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    assert len(done["attempts"][0]["gpus"]) == 2  # the trainers' alone
    logs = [daemon.cli("logs", str(job["id"]), "--node", str(n)).stdout for n in (1, 2, 3, 4)]
    # Trainers algo-3 and algo-4 are ranks 2 and 3: each server sums 5.
    assert "algo-1 served total=5" in logs[0]
    assert "algo-2 served total=5" in logs[1]
    given = sorted(str(g) for g in done["attempts"][0]["gpus"])
    for log, gpu in zip(logs[2:], given, strict=True):
        assert log.endswith(f" on GPUs {gpu} got 5,5\n"), log
