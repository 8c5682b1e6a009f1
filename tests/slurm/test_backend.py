"""trainqd with `backend = "slurm"` on a real Slurm: `trainq submit` hands the job to
Slurm, and `trainq ls/show/logs/stop/wait` work as they do on the local back end."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, python_job, trainer
from tests.support.slurm import GPUS, POLL, Slurm, slurm_job_of, slurm_trainqd
from tests.support.waiting import wait_for
from trainq.core.spec import parse_spec
from trainq.waiting import exit_status_of
from trainqd.attempts import contract


@pytest.fixture
def daemon(slurm: Slurm) -> Iterator[Daemon]:
    with slurm_trainqd(slurm) as d:
        yield d


def submit(daemon: Daemon, *args: str, cwd: Path | None = None) -> int:
    result = daemon.cli("submit", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip())


def cancelled_in_slurm(slurm: Slurm, slurm_id: str) -> None:
    wait_for(
        lambda: slurm.job_fields(slurm_id).get("JobState") in ("CANCELLED", None),
        timeout=10,
        interval=POLL,
        what=f"Slurm to cancel job {slurm_id}",
    )


def events(daemon: Daemon, job_id: int, until: str) -> list[dict[str, Any]]:
    """The job's events up to the first whose reason starts with `until`."""
    seen = []
    with (
        daemon.client() as client,
        client.stream("GET", "/v1/events", params={"job": job_id, "since": 0}, timeout=5) as stream,
    ):
        for line in stream.iter_lines():
            seen.append(json.loads(line))
            if (seen[-1]["reason"] or "").startswith(until):
                return seen
    raise AssertionError(f"no event {until!r}: {seen}")


def test_submit_runs_on_slurm_to_completed_with_the_contract(
    daemon: Daemon, slurm: Slurm, tmp_path: Path
) -> None:
    data = tmp_path / "train"
    data.mkdir()
    (data / "a.csv").write_text("1,2\n")
    job_id = submit(
        daemon,
        "--name", "on-slurm", "--gpus", "1", "--hp", "lr=0.1", "--channel", f"train={data}",
        "--", sys.executable, trainer("contract_dump.py"),
        cwd=tmp_path,
    )  # fmt: skip
    slurm_id = slurm_job_of(daemon, job_id)
    waited = daemon.cli("wait", str(job_id), timeout=60)
    assert waited.returncode == 0, (waited.stdout, waited.stderr, daemon.log())
    job = daemon.job(job_id)
    assert job["state"] == "COMPLETED"
    assert events(daemon, job_id, "queued in Slurm")[-1]["reason"] == (
        f"queued in Slurm as job {slurm_id}"
    )
    # Slurm ran it (its own record of the job), with the GPU it allocated.
    assert slurm.job_fields(slurm_id).get("JobState") == "COMPLETED"

    ml = Path(job["job_dir"])
    assert ml == daemon.state_dir / "jobs" / str(job_id) / "ml"
    report = json.loads((ml / "output" / "data" / "contract.json").read_text())
    env = report["env"]
    spec = parse_spec(
        {
            "name": "on-slurm",
            "gpus": 1,
            "command": ["true"],
            "hyperparameters": {"lr": "0.1"},
            "channels": {"train": {"source": str(data)}},
            "working_dir": str(tmp_path),
        }
    )
    files = contract.config_files(spec)
    for name in ("hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"):
        assert report["config"][name] == json.loads(files[f"input/config/{name}"])
    expected = contract.toolkit_environment(spec, str(ml), 1, "on-slurm")
    assert {k: v for k, v in env.items() if k.startswith("SM_")} == expected
    assert env["TRAINQ_JOB_ID"] == str(job_id)  # trainq's id, not Slurm's
    assert env["TRAINQ_ATTEMPT"] == "1"
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 1  # Slurm's one gres GPU
    assert all(report["layout"].values()), report["layout"]
    assert report["channels"]["train"]["files"] == {"a.csv": "1,2\n"}

    logs = daemon.cli("logs", str(job_id))
    assert logs.returncode == 0, logs.stderr
    assert "contract recorded" in logs.stdout


def test_stop_gives_the_trainer_sigterm_and_a_queued_job_waits_in_slurm(
    daemon: Daemon, slurm: Slurm, tmp_path: Path
) -> None:
    script = (
        "trap 'echo got TERM; touch \"$SM_MODEL_DIR/terminated\"; exit 0' TERM; "
        'echo ready; touch "$SM_MODEL_DIR/ready"; while :; do sleep 0.1; done'
    )
    running = submit(daemon, "--gpus", str(GPUS), "--", "/bin/sh", "-c", script, cwd=tmp_path)
    model = daemon.state_dir / "jobs" / str(running) / "ml" / "model"
    wait_for((model / "ready").exists, timeout=30, interval=0.1, what="the trainer")
    assert daemon.job(running)["state"] == "RUNNING"

    # Slurm's GPUs are all taken: the next job waits in Slurm's queue, PENDING in trainq's.
    queued = submit(daemon, "--gpus", "1", "--", "/bin/true", cwd=tmp_path)
    queued_in = slurm_job_of(daemon, queued)
    reason = f"queued in Slurm as job {queued_in}"

    def listed_with_reason() -> str | None:
        out = daemon.cli("ls").stdout
        return out if reason in out else None

    listed = wait_for(listed_with_reason, timeout=10, interval=POLL, what="the queued reason")
    assert f"{queued}  " in listed
    assert daemon.job(queued)["state"] == "PENDING"
    # A hold takes it back from Slurm; a release hands it over again.
    held = daemon.cli("hold", str(queued))
    assert held.returncode == 0, held.stderr
    cancelled_in_slurm(slurm, queued_in)
    assert daemon.cli("release", str(queued)).returncode == 0
    requeued_in = wait_for(
        lambda: (now := slurm_job_of(daemon, queued)) != queued_in and now,
        timeout=10,
        interval=POLL,
        what="the job handed to Slurm again",
    )
    # Stopped while Slurm holds it: it never runs, and Slurm lets it go.
    assert daemon.cli("stop", str(queued)).returncode == 0
    assert daemon.job(queued)["state"] == "STOPPED"
    cancelled_in_slurm(slurm, requeued_in)

    stopped = daemon.cli("stop", str(running))
    assert stopped.returncode == 0, stopped.stderr
    waited = daemon.cli("wait", str(running), timeout=60)
    assert waited.returncode == exit_status_of("STOPPED"), waited.stderr
    job = daemon.job(running)
    assert job["state"] == "STOPPED", daemon.log()
    assert job["stop_reason"].startswith("stopped by")
    assert (model / "terminated").exists()  # the trainer got SIGTERM, within its grace
    assert "got TERM" in daemon.cli("logs", str(running)).stdout
    attempts = daemon.state_dir / "jobs" / str(running) / "attempts"
    assert sorted(p.name for p in attempts.iterdir() if p.is_dir()) == ["1"]  # no retry


def test_retries_and_time_limits_stay_trainqs(daemon: Daemon, slurm: Slurm) -> None:
    crashing = daemon.submit(
        python_job("crash_then_resume.py", "exit:139", retry_backoff_seconds=0.1)
    )["id"]
    limited = daemon.submit(python_job("sleeper.py", max_runtime_seconds=2, stop_grace_seconds=1))[
        "id"
    ]

    # A transient crash: trainq retries it as a new Slurm job, which resumes.
    assert daemon.cli("wait", str(crashing), timeout=60).returncode == 0, daemon.log()
    first, second = slurm_job_of(daemon, crashing, 1), slurm_job_of(daemon, crashing, 2)
    assert first != second
    ml = daemon.state_dir / "jobs" / str(crashing) / "ml"
    resumed = json.loads((ml / "model" / "resumed.json").read_text())
    assert resumed == {"step": 100, "saved_on": 1, "resumed_on": 2}
    attempts = daemon.job(crashing)["attempts"]
    assert [(a["outcome"], a["exit_code"]) for a in attempts] == [("exited", 139), ("exited", 0)]

    # The time limit: the monitor in the Slurm step stops the trainer when it falls due.
    job = daemon.wait_state(limited, "STOPPED", timeout=30)
    assert job["stop_reason"] == "time limit of 2 s reached"
    assert job["attempts"][0]["outcome"] == "timed_out"
    checkpoints = daemon.state_dir / "jobs" / str(limited) / "ml" / "checkpoints"
    assert (checkpoints / "on-sigterm").read_text() == "1"  # SIGTERM, within the grace


def test_a_restarted_trainqd_follows_its_slurm_jobs(
    daemon: Daemon, slurm: Slurm, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    running = daemon.submit(python_job("until_released.py", str(release)))["id"]
    pid_file = daemon.state_dir / "jobs" / str(running) / "ml" / "output" / "data" / "pid"
    wait_for(pid_file.exists, timeout=30, interval=0.1, what="the trainer")
    daemon.stop()
    release.touch()  # it ends while no trainqd runs
    slurm_id = slurm_job_of(daemon, running)
    wait_for(
        lambda: slurm.job_fields(slurm_id).get("JobState") == "COMPLETED",
        timeout=30,
        interval=POLL,
        what="the Slurm job to end",
    )
    daemon.start()
    job = daemon.wait_state(running, timeout=30)
    assert job["state"] == "COMPLETED", daemon.log()
    assert len(job["attempts"]) == 1
