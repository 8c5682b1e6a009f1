"""Holding, releasing, changing and removing jobs, draining GPUs and the retention purge, with
a real trainqd (four simulated GPUs) and the real `trainq` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, python_job, running_daemon
from tests.support.daemon import event_reasons as events
from tests.support.waiting import wait_for


def sleeper(gpus: int) -> dict[str, Any]:
    return python_job("sleeper.py", gpus=gpus)


def ok(daemon: Daemon, *args: str) -> str:
    done = daemon.cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(daemon: Daemon, status: int, *args: str) -> str:
    """The one line `trainq ARGS` printed when it refused with exit `status`."""
    done = daemon.cli(*args)
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("trainq"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def stop_now(daemon: Daemon, job_id: int) -> None:
    daemon.cli("stop", "--grace", "0", str(job_id))
    daemon.wait_state(job_id)


def test_a_held_job_never_starts_until_released(daemon: Daemon) -> None:
    blocker = daemon.submit(sleeper(4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    held = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    wait_for(lambda: daemon.job(held)["place"] == 1, what="the job's place in the queue")
    assert ok(daemon, "hold", str(held)) == f"{held} held by root\n"
    # A held job is not waiting its turn: it has no place in the queue.
    wait_for(lambda: daemon.job(held)["place"] is None, what="the held job to leave the queue")
    listed = ok(daemon, "ls")
    assert "held by root; `trainq release` lets it start" in listed
    assert daemon.job(held)["held_by"] == "root"
    # The GPUs come free and a later job starts on them: the held one stays where it is.
    stop_now(daemon, blocker)
    later = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    assert daemon.wait_state(later)["state"] == "COMPLETED"
    job = daemon.job(held)
    assert (job["state"], job["attempts"]) == ("PENDING", [])
    assert job["pending_reason"].startswith("held by root")
    assert ok(daemon, "release", str(held)) == f"{held} released\n"
    assert daemon.wait_state(held)["state"] == "COMPLETED"
    assert events(daemon, held)[1:3] == ["held by root", "released by root"]
    # Only a pending job is held or released; the refusal says why.
    line = refused(daemon, 6, "hold", str(held))
    assert f"job {held} is COMPLETED; only a pending or running job can be held" in line
    line = refused(daemon, 6, "release", str(held))
    assert f"job {held} is COMPLETED; only a pending job can be released" in line


def test_hold_and_release_several_jobs_and_report_each_refusal(daemon: Daemon) -> None:
    blocker = daemon.submit(sleeper(4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    first = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    second = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    done = daemon.cli("hold", str(first), "999999", str(second))
    assert done.returncode == 4
    assert done.stdout == f"{first} held by root\n{second} held by root\n"
    assert done.stderr == "trainq: no job 999999\n"
    done = daemon.cli("release", str(first), "999999")
    assert (done.returncode, done.stdout) == (4, f"{first} released\n")
    assert refused(daemon, 6, "release", str(first)) == f"trainq: job {first} is not held\n"
    stop_now(daemon, blocker)
    assert daemon.wait_state(first)["state"] == "COMPLETED"
    assert daemon.job(second)["state"] == "PENDING"
    stop_now(daemon, second)


def test_drain_starts_nothing_new_there_and_survives_a_restart(daemon: Daemon) -> None:
    running = daemon.submit(sleeper(1))["id"]
    on = daemon.wait_state(running, "RUNNING")["gpus"]
    assert on == [0]
    assert ok(daemon, "drain", "--gpus", "0,1", "--reason", "fan noise") == (
        "GPU 0 drained by root: fan noise\nGPU 1 drained by root: fan noise\n"
    )
    # Three GPUs no longer fit; two do, on the GPUs that are not drained.
    big = daemon.submit({"command": ["true"], "gpus": 3})["id"]
    small = daemon.submit(sleeper(2))["id"]
    assert daemon.wait_state(small, "RUNNING")["gpus"] == [2, 3]
    wait_for(
        lambda: "2 are not drained" in (daemon.job(big).get("pending_reason") or ""),
        what="the big job's reason to name the drain",
    )
    assert daemon.job(running)["state"] == "RUNNING"  # a drained GPU's job runs on
    table = ok(daemon, "gpus")
    assert "DRAINED" in table.splitlines()[0]
    gpu0 = next(line for line in table.splitlines() if line.startswith("0 "))
    assert gpu0.endswith("by root: fan noise")
    assert "draining: yes, GPUs 0,1" in ok(daemon, "health")

    daemon.restart()
    gpus = daemon.get("/v1/gpus").json()["gpus"]
    assert [g["drain"] and g["drain"]["reason"] for g in gpus] == ["fan noise"] * 2 + [None] * 2
    stop_now(daemon, small)
    wait_for(lambda: daemon.job(big)["state"] == "PENDING" and daemon.job(big)["waiting"])
    assert daemon.job(big)["waiting"]["kind"] == "drained"

    # The whole host: nothing new starts, not even a CPU job.
    assert ok(daemon, "drain", "--reason", "driver upgrade").startswith(
        "host drained by root: driver upgrade\n"
    )
    cpu = daemon.submit({"command": ["true"]})["id"]
    wait_for(lambda: daemon.job(cpu).get("waiting"), what="the CPU job to be planned")
    assert daemon.job(cpu)["pending_reason"].startswith("the host is drained")
    assert "draining: yes, the whole host" in ok(daemon, "health")
    assert "DRAINED: the whole host, by root: driver upgrade" in ok(daemon, "gpus")

    assert ok(daemon, "resume", "--gpus", "1") == (
        "host drained by root: driver upgrade\nGPU 0 drained by root: fan noise\n"
    )
    assert ok(daemon, "resume") == "nothing is drained\n"
    assert daemon.wait_state(cpu)["state"] == "COMPLETED"
    stop_now(daemon, running)
    assert daemon.wait_state(big)["state"] == "COMPLETED"
    assert "draining" not in ok(daemon, "health")


def test_drain_refuses_gpus_the_host_does_not_have(daemon: Daemon) -> None:
    line = refused(daemon, 2, "drain", "--gpus", "1,7", "--reason", "x")
    assert line == "trainq: GPU 7 is not one of this host's GPUs (0, 1, 2, 3)\n"
    done = daemon.cli("drain")
    assert (done.returncode, done.stderr) == (
        2,
        "trainq drain: the following arguments are required: --reason\n",
    )
    assert daemon.get("/v1/gpus").json()["host_drain"] is None
    answer = daemon.post("/v1/drain", json={"reason": "x", "gpus": []})
    assert answer.status_code == 400
    assert "name at least one GPU" in answer.json()["error"]["message"]
    answer = daemon.post("/v1/drain", json={"reason": "two\nlines"})
    assert answer.json()["error"]["message"] == "the reason must be one line of printable text"
    paths = daemon.get("/v1/openapi.json").json()["paths"]
    assert sorted(paths["/v1/jobs/{id}"]) == ["delete", "get", "patch"]
    assert "requestBody" in paths["/v1/drain"]["post"]


def test_update_a_pending_job(daemon: Daemon) -> None:
    blocker = daemon.submit(sleeper(4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    job_id = daemon.submit({"command": ["true"], "gpus": 1, "priority": 3})["id"]
    out = ok(daemon, "update", str(job_id), "--priority", "5", "--gpus", "2", "--max-runtime", "1h")
    assert out == f"{job_id} updated: priority=5 gpus=2 max_runtime_seconds=3600\n"
    job = daemon.job(job_id)
    assert (job["priority"], job["spec"]["gpus"], job["spec"]["max_runtime_seconds"]) == (
        5,
        2,
        3600,
    )
    assert events(daemon, job_id)[-1] == (
        "updated by root: priority 3 -> 5, gpus 1 -> 2, max runtime none -> 3600"
    )
    # The rules of a submission: GPUs the host has, a class that exists.
    line = refused(daemon, 2, "update", str(job_id), "--gpus", "9")
    assert line == "trainq: the job asks for 9 GPUs but this host has 4\n"
    assert "no class 'gold'" in refused(daemon, 2, "update", str(job_id), "--class", "gold")
    assert "nothing to change" in refused(daemon, 2, "update", str(job_id))
    # The change survives a restart, and the job runs as changed.
    daemon.restart()
    assert daemon.job(job_id)["spec"]["gpus"] == 2
    stop_now(daemon, blocker)
    done = daemon.wait_state(job_id)
    assert (done["state"], len(done["attempts"][0]["gpus"])) == ("COMPLETED", 2)
    line = refused(daemon, 6, "update", str(job_id), "--priority", "1")
    assert line == f"trainq: job {job_id} is COMPLETED; only a pending job can be changed\n"


def test_an_updated_job_runs_as_changed(daemon: Daemon) -> None:
    blocker = daemon.submit(sleeper(4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    job_id = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    ok(daemon, "update", str(job_id), "--gpus", "3")
    stop_now(daemon, blocker)
    done = daemon.wait_state(job_id)
    assert (done["state"], len(done["attempts"][0]["gpus"])) == ("COMPLETED", 3)


def test_a_boosted_job_goes_first(daemon: Daemon) -> None:
    blocker = daemon.submit(sleeper(4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    first = daemon.submit(sleeper(4))["id"]
    second = daemon.submit(sleeper(4))["id"]
    assert ok(daemon, "update", str(second), "--boost", "10") == f"{second} updated: boost=10\n"
    stop_now(daemon, blocker)
    daemon.wait_state(second, "RUNNING")
    assert daemon.job(first)["state"] == "PENDING"
    stop_now(daemon, second)
    daemon.wait_state(first, "RUNNING")
    stop_now(daemon, first)


CLASSES = """
[classes.default]
[classes.short]
max_runtime_seconds = 600
[classes.staff]
users = ["nobody"]
"""


def test_update_moves_a_job_between_classes_by_the_rules_of_submit() -> None:
    with running_daemon(CLASSES, gpus="fake:1") as daemon:
        blocker = daemon.submit(sleeper(1))["id"]
        daemon.wait_state(blocker, "RUNNING")
        job_id = str(daemon.submit({"command": ["true"], "gpus": 1})["id"])
        line = refused(daemon, 2, "update", job_id, "--class", "short")
        assert "class 'short' runs jobs for at most 600 s" in line
        line = refused(daemon, 2, "update", job_id, "--class", "gold")
        assert line.startswith("trainq: no class 'gold'; the classes are default, short, staff")
        assert ok(daemon, "update", job_id, "--class", "short", "--max-runtime", "10m") == (
            f"{job_id} updated: max_runtime_seconds=600 class=short\n"
        )
        assert events(daemon, int(job_id))[-1] == (
            "updated by root: max runtime none -> 600, class none -> short"
        )
        # root is an admin, and an admin may place a job in any class.
        ok(daemon, "update", job_id, "--class", "staff")
        assert daemon.job(int(job_id))["spec"]["class"] == "staff"
        stop_now(daemon, blocker)
        assert daemon.wait_state(int(job_id))["state"] == "COMPLETED"


def test_update_refuses_a_job_that_started(daemon: Daemon) -> None:
    job_id = daemon.submit(sleeper(1))["id"]
    daemon.wait_state(job_id, "RUNNING")
    line = refused(daemon, 6, "update", str(job_id), "--priority", "9")
    assert line == f"trainq: job {job_id} is RUNNING; only its max_runtime_seconds can change now\n"
    assert daemon.job(job_id)["priority"] == 0
    stop_now(daemon, job_id)


def test_rm_deletes_an_ended_job_and_its_files(daemon: Daemon) -> None:
    made = "echo hello; mkdir -p $SAGEMAKER_BASE_DIR/model/a/b"
    job_id = daemon.submit({"command": ["sh", "-c", made]})["id"]
    assert daemon.wait_state(job_id)["state"] == "COMPLETED"
    job_dir = daemon.state_dir / "jobs" / str(job_id)
    assert (job_dir / "attempts" / "1" / "stdout").read_text() == "hello\n"
    running = daemon.submit(sleeper(1))["id"]
    daemon.wait_state(running, "RUNNING")
    done = daemon.cli("rm", str(job_id), str(running), "999999")
    assert (done.returncode, done.stdout) == (4, f"{job_id} removed\n")
    assert done.stderr.splitlines() == [
        f"trainq: job {running} is RUNNING; only an ended job can be removed "
        f"(`trainq stop {running}` first)",
        "trainq: no job 999999",
    ]
    assert not job_dir.exists()
    assert refused(daemon, 4, "show", str(job_id)) == f"trainq: no job {job_id}\n"
    assert events(daemon, job_id) == []
    assert Path(daemon.job(running)["job_dir"]).is_dir()
    stop_now(daemon, running)
    assert ok(daemon, "rm", str(running)) == f"{running} removed\n"
    assert ok(daemon, "ls", "--all", "--json").count('"id"') == 0


def test_retention_purges_old_ended_jobs_and_keeps_the_rest() -> None:
    # 0.00002 days: 1.7 s.
    with running_daemon(gpus="fake:2", config={"retention_days": 0.00002}) as daemon:
        running = daemon.submit(sleeper(1))["id"]
        daemon.wait_state(running, "RUNNING")
        ended = [daemon.submit({"command": ["true"]})["id"] for _ in range(3)]
        for job_id in ended:
            daemon.wait_state(job_id)
        for job_id in ended:
            wait_for(
                lambda job_id=job_id: daemon.get(f"/v1/jobs/{job_id}").status_code == 404,
                timeout=15,
                what=f"job {job_id} to be purged",
            )
            assert not (daemon.state_dir / "jobs" / str(job_id)).exists()
        assert daemon.job(running)["state"] == "RUNNING"
        assert (daemon.state_dir / "jobs" / str(running)).is_dir()
        assert daemon.log_file.read_text().count("purged an ended job") == len(ended)
        stop_now(daemon, running)
