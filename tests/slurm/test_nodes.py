"""Jobs of several nodes on a real Slurm of two nodes (two slurmd on this one host): the
exported script's one step of every node, and trainqd's Slurm back end running such a job
(real torch.distributed across the nodes), following it, ending it whole when a node fails,
retrying it whole and stopping every node's processes."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.slurm.test_export_slurm import export, outputs, wait_ended
from tests.support.daemon import Daemon, trainer
from tests.support.slurm import NODES, NODES_PARTITION, Slurm, slurm_job_of, slurm_trainqd
from tests.support.waiting import wait_for

SYSTEM_PYTHON = "/usr/bin/python3"  # where apt's python3-torch is (tests/run installs it)


@pytest.fixture
def daemon(slurm: Slurm) -> Iterator[Daemon]:
    with slurm_trainqd(slurm, slurm_partition=NODES_PARTITION) as d:
        yield d


def allreduce_spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "command": [SYSTEM_PYTHON, trainer("torch_allreduce.py")],
        "instance_count": NODES,
        "gpus": 1,
        "max_retries": 0,
    }


def check_allreduce(outputs: list[str]) -> None:
    """Every node's output: the all-reduce's sum, and the same weights after DDP."""
    digests = set()
    for rank, out in enumerate(outputs):
        assert f"algo-{rank + 1} rank {rank} of {NODES}: sum {NODES * (NODES + 1) // 2}\n" in out
        found = re.search(r"weights ([0-9a-f]{16})", out)
        assert found is not None, out
        digests.add(found.group(1))
    assert len(digests) == 1


def marked(marker: str) -> list[psutil.Process]:
    """Processes whose command line names `marker`, this test's own."""
    return [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if any(marker in part for part in proc.info["cmdline"] or ())
    ]


def node_script(body: str, marker: str) -> list[str]:
    """A node's command: `body` (shell), then sleep in a process that names `marker`."""
    sleeper = f"import time; time.sleep(3600)  # {marker}"
    return ["/bin/sh", "-c", f'{body}; exec {sys.executable} -c "{sleeper}"']


def test_the_exported_script_runs_every_node_in_one_step(slurm: Slurm, tmp_path: Path) -> None:
    script = export(tmp_path, allreduce_spec("ddp"))
    text = script.read_text()
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in text
    assert "#SBATCH --gres=gpu:1\n" in text
    done = slurm.run(
        "sbatch", "--parsable", f"--partition={NODES_PARTITION}", str(script), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    slurm_id = done.stdout.strip().split(";")[0]
    fields = wait_ended(slurm, slurm_id, timeout=180)
    logs = outputs(tmp_path, "ddp", slurm_id)
    assert fields["JobState"] == "COMPLETED", logs
    assert fields["NumNodes"] == str(NODES)
    # srun's --label: each line of the output says its task.
    check_allreduce(
        ["".join(re.findall(rf"^{rank}: (.*\n)", logs, re.MULTILINE)) for rank in range(NODES)]
    )
    job_dir = tmp_path / f"trainq-{slurm_id}"
    hosts = [f"algo-{i + 1}" for i in range(NODES)]
    for host in hosts:
        config = job_dir / "nodes" / host / "input" / "config" / "resourceconfig.json"
        resources = json.loads(config.read_text())
        assert (resources["current_host"], resources["hosts"]) == (host, hosts)
    gang = json.loads((job_dir / "attempts" / "1" / "exit.json").read_text().strip())
    assert (gang["outcome"], gang["exit_code"]) == ("exited", 0)


def test_scancel_of_the_exported_job_gives_every_node_sigterm(slurm: Slurm, tmp_path: Path) -> None:
    trainer = (
        "trap 'touch \"$SM_MODEL_DIR/terminated\"; exit 0' TERM; "
        'touch "$SM_MODEL_DIR/ready"; while :; do sleep 0.1; done'
    )
    spec = {
        "name": "stopme",
        "command": ["/bin/sh", "-c", trainer],
        "instance_count": NODES,
        "stop_grace_seconds": 20,
    }
    script = export(tmp_path, spec)
    done = slurm.run(
        "sbatch", "--parsable", f"--partition={NODES_PARTITION}", str(script), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    slurm_id = done.stdout.strip().split(";")[0]
    models = [
        tmp_path / f"trainq-{slurm_id}" / "nodes" / f"algo-{i + 1}" / "model" for i in range(NODES)
    ]

    def every_node_ready() -> bool:
        return all((model / "ready").exists() for model in models)

    wait_for(every_node_ready, timeout=60, interval=0.1, what="every node's trainer")
    assert slurm.run("scancel", slurm_id).returncode == 0
    fields = wait_ended(slurm, slurm_id)
    assert fields["JobState"] == "CANCELLED"
    logs = outputs(tmp_path, "stopme", slurm_id)
    assert all((model / "terminated").exists() for model in models), logs
    # A stop is not a crash: no second attempt.
    attempts = tmp_path / f"trainq-{slurm_id}" / "attempts"
    assert [p.name for p in attempts.iterdir() if p.is_dir()] == ["1"], logs


def test_an_allreduce_across_slurm_nodes_through_trainqd(daemon: Daemon, slurm: Slurm) -> None:
    job = daemon.submit(allreduce_spec("ddp"))
    slurm_id = slurm_job_of(daemon, job["id"])
    done = daemon.wait_state(job["id"], timeout=180)
    assert done["state"] == "COMPLETED", (done, daemon.log())
    assert slurm.job_fields(slurm_id).get("NumNodes") == str(NODES)
    logs = []
    for node in range(1, NODES + 1):
        shown = daemon.cli("logs", str(job["id"]), "--node", str(node))
        assert shown.returncode == 0, shown.stderr
        logs.append(shown.stdout)
    check_allreduce(logs)
    shown = daemon.cli("show", str(job["id"]))
    assert shown.returncode == 0, shown.stderr
    assert all(f"algo-{node}" in shown.stdout for node in range(1, NODES + 1)), shown.stdout


def test_a_failing_node_ends_the_gang_which_is_retried_whole(
    daemon: Daemon, tmp_path: Path
) -> None:
    marker = f"trainq-gang-{tmp_path.name}"
    up = tmp_path / "up"
    up.mkdir(mode=0o777)
    # Rank 1 fails with a transient code once every node of the attempt is up; the others
    # sleep on.
    body = (
        f'touch {up}/"$SM_CURRENT_HOST-$TRAINQ_ATTEMPT"; '
        'if [ "$TRAINQ_NODE_RANK" = 1 ]; then '
        f'until [ -e {up}/algo-1-"$TRAINQ_ATTEMPT" ]; do sleep 0.1; done; exit 3; fi'
    )
    spec = {
        "command": node_script(body, marker),
        "instance_count": NODES,
        "retry_exit_codes": [3],
        "max_retries": 1,
        "retry_backoff_seconds": 0.1,
        "stop_grace_seconds": 2,
    }
    job = daemon.submit(spec)
    done = daemon.wait_state(job["id"], timeout=180)
    assert done["state"] == "FAILED", (done, daemon.log())
    assert len(done["attempts"]) == 2  # retried once, whole
    assert "algo-2" in (done["failure_reason"] or ""), done
    assert marked(marker) == []  # no node's process outlived its attempt
    for attempt in (1, 2):
        record = daemon.state_dir / "jobs" / str(job["id"]) / "attempts" / str(attempt)
        node = json.loads((record / "nodes" / "algo-2" / "exit.json").read_text().strip())
        assert (node["outcome"], node["exit_code"]) == ("exited", 3)
        other = json.loads((record / "nodes" / "algo-1" / "exit.json").read_text().strip())
        assert other["outcome"] != "exited", other  # ended by the gang, not by itself


def test_stop_ends_every_node(daemon: Daemon, tmp_path: Path) -> None:
    marker = f"trainq-gang-{tmp_path.name}"
    up = tmp_path / "up"
    up.mkdir(mode=0o777)
    spec = {
        "command": node_script(f'touch {up}/"$SM_CURRENT_HOST"', marker),
        "instance_count": NODES,
        "stop_grace_seconds": 2,
    }
    job = daemon.submit(spec)
    hosts = {f"algo-{i + 1}" for i in range(NODES)}

    def every_node_sleeps() -> bool:
        return {p.name for p in up.iterdir()} == hosts and len(marked(marker)) == NODES

    wait_for(every_node_sleeps, timeout=120, interval=0.2, what="every node to sleep")
    stopped = daemon.cli("stop", str(job["id"]))
    assert stopped.returncode == 0, stopped.stderr
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "STOPPED", (done, daemon.log())
    assert marked(marker) == []


def test_what_a_slurm_step_cannot_run_is_refused_at_submit(daemon: Daemon) -> None:
    refused = daemon.submit(
        {"command": ["/bin/true"], "instance_count": NODES, "restart": "node"}, expect=400
    )
    said = refused["error"]["message"]
    assert said.startswith("the Slurm back end cannot run it: restart: "), refused
    assert "\n" not in said
    assert daemon.cli("ls").returncode == 0  # and trainqd serves on


def test_a_restarted_trainqd_follows_and_stops_every_node(daemon: Daemon, tmp_path: Path) -> None:
    marker = f"trainq-gang-{tmp_path.name}"
    up = tmp_path / "up"
    up.mkdir(mode=0o777)
    job = daemon.submit(
        {
            "command": node_script(f'touch {up}/"$SM_CURRENT_HOST"', marker),
            "instance_count": NODES,
            "stop_grace_seconds": 2,
        }
    )

    def every_node_sleeps() -> bool:
        return len(list(up.iterdir())) == NODES and len(marked(marker)) == NODES

    wait_for(every_node_sleeps, timeout=120, interval=0.2, what="every node to sleep")
    daemon.stop()
    assert len(marked(marker)) == NODES  # the nodes run on without trainqd
    daemon.start()
    assert daemon.job(job["id"])["state"] == "RUNNING"
    assert daemon.cli("stop", str(job["id"])).returncode == 0
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "STOPPED", (done, daemon.log())
    assert len(done["attempts"]) == 1
    assert marked(marker) == []


def test_the_time_limit_stops_every_node(daemon: Daemon, tmp_path: Path) -> None:
    marker = f"trainq-gang-{tmp_path.name}"
    spec = {
        "command": node_script("true", marker),
        "instance_count": NODES,
        "max_runtime_seconds": 3,
        "stop_grace_seconds": 1,
    }
    job = daemon.submit(spec)
    done = daemon.wait_state(job["id"], timeout=120)
    assert done["state"] == "STOPPED", (done, daemon.log())
    assert done["stop_reason"] == "time limit of 3 s reached"
    assert done["attempts"][0]["outcome"] == "timed_out"
    assert marked(marker) == []


def test_each_node_runs_its_own_groups_command_and_environment(daemon: Daemon) -> None:
    config = '"$SAGEMAKER_BASE_DIR/input/config/resourceconfig.json"'
    show = f'echo "$SM_CURRENT_HOST $ROLE gpus=$CUDA_VISIBLE_DEVICES $(tr -d "\\n" < {config})"'
    spec = {
        "command": ["/bin/sh", "-c", f"{show}; echo server"],
        "instance_groups": [
            {"name": "servers", "instance_count": 1, "environment": {"ROLE": "ps"}},
            {
                "name": "trainers",
                "instance_count": 1,
                "gpus": 1,
                "command": ["/bin/sh", "-c", f"{show}; echo trainer"],
                "environment": {"ROLE": "worker"},
            },
        ],
    }
    job = daemon.submit(spec)
    done = daemon.wait_state(job["id"], timeout=120)
    assert done["state"] == "COMPLETED", (done, daemon.log())
    # Slurm gives every node the GPUs of the largest; each node opens its group's share.
    for node, (role, group, gpus, said) in enumerate(
        [("ps", "servers", 0, "server"), ("worker", "trainers", 1, "trainer")], start=1
    ):
        out = daemon.cli("logs", str(job["id"]), "--node", str(node)).stdout
        host, got_role, visible, text = out.splitlines()[0].split(" ", 3)
        assert (host, got_role) == (f"algo-{node}", role)
        assert len([i for i in visible.removeprefix("gpus=").split(",") if i]) == gpus, out
        resources = json.loads(text)
        assert (resources["current_host"], resources["current_group_name"]) == (host, group)
        assert resources["hosts"] == ["algo-1", "algo-2"]
        assert out.splitlines()[1] == said
