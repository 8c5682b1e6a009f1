"""Jobs that wait for others (`--after JOB[:ok|:failed|:any]`, `--after group:G`, the spec's
`after`), with a real trainqd, real trainers and the real `trainq`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, python_job, running_daemon
from tests.support.waiting import wait_for
from trainq import Client
from trainq.core.errors import ExitCode


def held_job(tmp_path: Path, name: str, code: int = 0, **spec: Any) -> tuple[dict[str, Any], Path]:
    """A job that runs until its release file exists, then exits `code`."""
    release = tmp_path / f"release-{name}"
    return python_job("until_released.py", str(release), str(code), **spec), release


def submit(daemon: Daemon, *args: str) -> int:
    done = daemon.cli("submit", *args)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def reason_of(daemon: Daemon, job_id: int) -> str | None:
    return daemon.job(job_id)["pending_reason"]


def test_a_job_after_another_waits_for_its_success_then_runs(
    daemon: Daemon, tmp_path: Path
) -> None:
    spec, release = held_job(tmp_path, "first")
    first = daemon.submit(spec)["id"]
    daemon.wait_state(first, "RUNNING")
    second = submit(daemon, "--after", str(first), "--", "true")
    words = f"waiting for job {first} to succeed"
    wait_for(lambda: reason_of(daemon, second) == words, what="the dependency's reason")
    record = daemon.job(second)
    assert (record["spec"]["after"], record["place"]) == ([f"{first}:ok"], None)
    assert record["waiting"]["kind"] == "dependency"
    listed = daemon.cli("ls").stdout
    assert any(line.split()[0] == str(second) and words in line for line in listed.splitlines())
    # The Python library says the same, with the spec's key.
    third = Client(daemon.socket).submit(command=["true"], after=[f"{first}:any"])
    assert third.spec.after == [f"{first}:any"]
    release.touch()
    assert daemon.wait_state(second)["state"] == "COMPLETED"
    assert daemon.wait_state(third.id)["state"] == "COMPLETED"


def test_a_dependency_that_can_never_be_met_ends_the_job_with_the_reason(
    daemon: Daemon, tmp_path: Path
) -> None:
    spec, release = held_job(tmp_path, "failing", code=1, max_retries=0)
    failing = daemon.submit(spec)["id"]
    daemon.wait_state(failing, "RUNNING")
    on_success = submit(daemon, "--after", str(failing), "--", "true")
    on_failure = submit(daemon, "--after", f"{failing}:failed", "--", "true")
    on_end = submit(daemon, "--after", f"{failing}:any", "--", "true")
    wait_for(lambda: reason_of(daemon, on_failure) is not None, what="a plan")
    assert reason_of(daemon, on_failure) == f"waiting for job {failing} to fail"
    assert reason_of(daemon, on_end) == f"waiting for job {failing} to end"
    release.touch()
    assert daemon.wait_state(failing)["state"] == "FAILED"
    never = daemon.wait_state(on_success)
    assert (never["state"], never["attempts"]) == ("STOPPED", [])
    assert never["stop_reason"] == f"dependency can no longer be met: job {failing} ended FAILED"
    assert daemon.cli("wait", str(on_success)).returncode == ExitCode.STOPPED
    assert daemon.wait_state(on_failure)["state"] == "COMPLETED"
    assert daemon.wait_state(on_end)["state"] == "COMPLETED"
    # A job that completed can no longer fail.
    after_ok = submit(daemon, "--after", f"{on_end}:failed", "--", "true")
    ended = daemon.wait_state(after_ok)
    assert ended["stop_reason"] == f"dependency can no longer be met: job {on_end} COMPLETED"


def test_a_job_after_a_group_waits_for_every_job_of_it(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    command = python_job("until_released.py", str(release))["command"]
    sweep = daemon.cli("submit", "--json", "--sweep", "n=1,2", "--", *command)
    assert sweep.returncode == 0, sweep.stderr
    group = json.loads(sweep.stdout)["group_id"]
    last = submit(daemon, "--after", f"group:{group}", "--", "true")
    words = f"waiting for every job of group {group} to succeed"
    wait_for(lambda: reason_of(daemon, last) == words, what="the group's reason")
    release.touch()
    assert daemon.wait_state(last)["state"] == "COMPLETED"


def test_a_waiting_job_is_never_the_head_and_reserves_nothing(tmp_path: Path) -> None:
    with running_daemon(gpus="fake:1") as daemon:
        spec, release = held_job(tmp_path, "cpu")
        cpu = daemon.submit(spec)["id"]  # gpus = 0: a CPU slot, the GPU stays free
        daemon.wait_state(cpu, "RUNNING")
        gpu_spec, gpu_release = held_job(tmp_path, "gpu", gpus=1)
        first = daemon.submit({**gpu_spec, "after": [str(cpu)], "priority": 100})["id"]
        later = daemon.submit(gpu_spec)["id"]
        # The later job takes the one GPU: the earlier, higher one waits for its dependency.
        daemon.wait_state(later, "RUNNING")
        assert daemon.job(first)["state"] == "PENDING"
        gpu_release.touch()
        release.touch()
        assert daemon.wait_state(first)["state"] == "COMPLETED"


def test_dependencies_are_refused_in_one_line_when_they_name_nothing(daemon: Daemon) -> None:
    done = daemon.cli("submit", "--after", "99999", "--", "true")
    assert (done.returncode, done.stderr) == (ExitCode.USAGE, "trainq: after: no job 99999\n")
    done = daemon.cli("submit", "--after", "group:99999", "--", "true")
    assert (done.returncode, done.stderr) == (ExitCode.USAGE, "trainq: after: no group 99999\n")
    done = daemon.cli("submit", "--after", "12:maybe", "--", "true")
    assert done.returncode == ExitCode.USAGE
    assert done.stderr.count("\n") == 1
    assert "is not JOB, JOB:ok, JOB:failed, JOB:any or group:G" in done.stderr
    # A change cannot add a dependency (so none can ever point at a later job: no cycle).
    blocker = daemon.submit({"command": ["sleep", "60"], "gpus": 4})["id"]
    queued = daemon.submit({"command": ["true"], "gpus": 4})["id"]
    with daemon.client() as client:
        answer = client.patch(f"/v1/jobs/{blocker}", json={"after": [str(queued)]})
        assert answer.status_code == 400
        answer = client.patch(f"/v1/jobs/{queued}", json={"after": [str(blocker)]})
        assert answer.status_code == 400
    assert daemon.job(queued)["spec"]["after"] == []
    daemon.cli("stop", "--grace", "0", str(blocker))
    assert daemon.wait_state(queued)["state"] == "COMPLETED"


def test_dependencies_outlive_a_restart(daemon: Daemon, tmp_path: Path) -> None:
    spec, release = held_job(tmp_path, "first")
    first = daemon.submit(spec)["id"]
    daemon.wait_state(first, "RUNNING")
    second = daemon.submit({"command": ["true"], "after": [f"{first}:any"]})["id"]
    wait_for(lambda: reason_of(daemon, second) is not None, what="a plan")
    daemon.stop()
    daemon.start()
    words = f"waiting for job {first} to end"
    wait_for(lambda: reason_of(daemon, second) == words, what="the reason after the restart")
    release.touch()
    assert daemon.wait_state(second)["state"] == "COMPLETED"
