"""Each node's end of a job of several nodes, as the gang's exit record keeps it and
`trainq show` (and the API's job record) lists it: its outcome, exit status or signal, and
its restarts in place (README.md, "Several nodes")."""

from __future__ import annotations

from typing import Any

from tests.support.daemon import Daemon, python_job


def gang(mode: str, *args: str, **spec: Any) -> dict[str, Any]:
    return python_job("gang_node.py", mode, *args, **spec)


def ends(job: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {
        n["name"]: (n["outcome"], n["exit_code"], n["signal"], n["restarts"]) for n in job["nodes"]
    }


def nodes_table(shown: str) -> dict[str, list[str]]:
    """The rows of `show`'s Nodes table, by node."""
    lines = shown.splitlines()
    start = lines.index("Nodes") + 2  # past the heading and the column names
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        cells = line.split()
        rows[cells[0]] = cells
    return rows


def test_show_lists_each_nodes_restarts_and_exit(daemon: Daemon) -> None:
    job = daemon.submit(gang("flaky", "1", "2", instance_count=3, restart="node", max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    assert ends(done) == {
        "algo-1": ("exited", 0, None, 0),
        "algo-2": ("exited", 0, None, 2),  # exited 139 twice, restarted in place each time
        "algo-3": ("exited", 0, None, 0),
    }
    assert {n["attempt"] for n in done["nodes"]} == {1}
    shown = daemon.cli("show", str(job["id"]))
    assert shown.returncode == 0, shown.stderr
    table = nodes_table(shown.stdout)
    # NODE GROUP RANK GPUS STATE EXIT RESTARTS ML ROOT
    assert table["algo-2"][:7] == ["algo-2", "homogeneousCluster", "1", "-", "exited", "0", "2"]
    assert table["algo-3"][:7] == ["algo-3", "homogeneousCluster", "2", "-", "exited", "0", "0"]
    assert table["algo-3"][7] == done["nodes"][2]["job_dir"]


def test_show_tells_the_failing_node_from_those_it_ended(daemon: Daemon) -> None:
    job = daemon.submit(gang("fail", "1", "3", instance_count=3, gpus=1, max_retries=0))
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "FAILED", done
    by_name = ends(done)
    assert by_name["algo-2"] == ("exited", 3, None, 0)
    # The others were stopped because of it: not a failure of their own.
    assert {by_name["algo-1"][0], by_name["algo-3"][0]} == {"stopped"}
    table = nodes_table(daemon.cli("show", str(job["id"])).stdout)
    assert table["algo-2"][4:6] == ["exited", "3"]
    # The GPUs each node ran on, as the attempt held them, though the job holds none now.
    held = done["attempts"][-1]["gpus"]
    assert [n["gpus"] for n in done["nodes"]] == [[gpu] for gpu in held]
    assert table["algo-2"][3] == str(held[1])
    assert table["algo-1"][4] == "stopped"


def test_a_running_gangs_nodes_show_as_running(daemon: Daemon) -> None:
    job = daemon.submit(gang("sleep", instance_count=2, gpus=1))
    running = daemon.wait_state(job["id"], "RUNNING", timeout=30)
    assert [n["outcome"] for n in running["nodes"]] == [None, None]
    table = nodes_table(daemon.cli("show", str(job["id"])).stdout)
    assert [table[name][3:5] for name in ("algo-1", "algo-2")] == [
        ["0", "running"],
        ["1", "running"],
    ]
    assert daemon.cli("stop", str(job["id"])).returncode == 0
    stopped = daemon.wait_state(job["id"], timeout=30)
    assert [n["outcome"] for n in stopped["nodes"]] == ["stopped", "stopped"]
