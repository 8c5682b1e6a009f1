"""`trainq logs --node`: a node of a job of several nodes by its number or its host name,
and one clear line for a node the job does not have (README.md, "Several nodes")."""

from __future__ import annotations

from tests.support.daemon import Daemon, python_job


def test_a_node_is_named_by_its_number_or_its_host_name(daemon: Daemon) -> None:
    job = daemon.submit(python_job("gang_node.py", "sum", instance_count=3, max_retries=0))
    assert daemon.wait_state(job["id"], timeout=60)["state"] == "COMPLETED"
    by_number = daemon.cli("logs", str(job["id"]), "--node", "2")
    by_name = daemon.cli("logs", str(job["id"]), "--node", "algo-2")
    assert by_name.returncode == 0, by_name.stderr
    assert "algo-2 got total=3" in by_name.stdout
    assert by_name.stdout == by_number.stdout


def test_a_node_the_job_does_not_have_is_refused_in_one_line(daemon: Daemon) -> None:
    gang = daemon.submit(python_job("gang_node.py", "sum", instance_count=3, max_retries=0))
    single = daemon.submit({"command": ["true"]})
    for job in (gang, single):
        daemon.wait_state(job["id"], timeout=60)
    refusals = [
        (gang, "4", f"trainq: job {gang['id']} has 3 nodes (algo-1 to algo-3): it has no node 4"),
        (gang, "algo-9", f"job {gang['id']} has 3 nodes (algo-1 to algo-3): it has no node 9"),
        (single, "2", f"trainq: job {single['id']} runs as one node: it has no node 2"),
        (gang, "algo-0", "expected a node's number (1, 2, ...) or host name (algo-1, ...)"),
        (gang, "worker-1", "got 'worker-1'"),
        (gang, "²", "expected a node's number"),
    ]
    for job, node, says in refusals:
        refused = daemon.cli("logs", str(job["id"]), "--node", node)
        assert refused.returncode != 0, node
        assert says in refused.stderr, (node, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # A job of one node is its own node 1.
    assert daemon.cli("logs", str(single["id"]), "--node", "1").returncode == 0
    # The API says the same.
    answer = daemon.get(f"/v1/jobs/{gang['id']}/logs", params={"node": "4"})
    assert answer.status_code == 400
    assert "it has no node 4" in answer.json()["error"]["message"]
