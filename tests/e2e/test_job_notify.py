"""Told when a job ends: a job's own `--notify` command and the administrator's mail command
for `--mail END,FAIL`, with a real trainqd, real trainers and the real `trainq`. A
notification that fails, or never ends, neither delays nor changes the job's end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.daemon import Daemon, running_daemon
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode

RECORD_ENV = (
    "import json, os, sys; "
    "json.dump({k: v for k, v in os.environ.items() if k.startswith('TRAINQ_JOB_')}"
    ", open(sys.argv[1], 'w'))"
)


WAIT_FOR_RELEASE = (
    "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)"
)


def submit(daemon: Daemon, *args: str) -> int:
    done = daemon.cli("submit", *args)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def failed_line(log: str) -> str:
    return next((line for line in log.splitlines() if "notify failed" in line), "")


def read_json(path: Path) -> dict[str, str]:
    import json

    data: dict[str, str] = json.loads(path.read_text())
    return data


def test_notify_runs_when_the_job_ends_with_how_it_ended(daemon: Daemon, tmp_path: Path) -> None:
    told = tmp_path / "told.json"
    notify = f"{sys.executable} -c {RECORD_ENV!r} {told}"
    job = submit(
        daemon, "--name", "noisy", "--notify", notify, "--max-retries", "0", "--",
        "sh", "-c", "exit 3",
    )  # fmt: skip
    assert daemon.wait_state(job)["state"] == "FAILED"
    wait_for(told.exists, what="the notify command to run")
    wait_for(lambda: told.stat().st_size > 0, what="it to write")
    facts = read_json(told)
    assert facts["TRAINQ_JOB_ID"] == str(job)
    assert facts["TRAINQ_JOB_NAME"] == "noisy"
    assert facts["TRAINQ_JOB_STATE"] == "FAILED"
    assert facts["TRAINQ_JOB_EXIT_STATUS"] == "3"
    assert facts["TRAINQ_JOB_REASON"] == daemon.job(job)["failure_reason"]
    assert daemon.job(job)["spec"]["notify"] == [sys.executable, "-c", RECORD_ENV, str(told)]
    # A job stopped before it ever ran is told too, and a time limit says TIMEOUT.
    stopped_told, timeout_told = tmp_path / "stopped.json", tmp_path / "timeout.json"
    blocked = daemon.submit(
        {"command": ["true"], "gpus": 4, "after": [str(job)],
         "notify": [sys.executable, "-c", RECORD_ENV, str(stopped_told)]}
    )["id"]  # fmt: skip
    assert daemon.wait_state(blocked)["state"] == "STOPPED"
    wait_for(lambda: stopped_told.exists() and stopped_told.stat().st_size > 0, what="told")
    assert read_json(stopped_told)["TRAINQ_JOB_REASON"].startswith("dependency can no longer")
    timed = daemon.submit(
        {"command": ["sleep", "60"], "max_runtime_seconds": 1, "stop_grace_seconds": 0,
         "notify": [sys.executable, "-c", RECORD_ENV, str(timeout_told)]}
    )["id"]  # fmt: skip
    daemon.wait_state(timed, timeout=30)
    wait_for(lambda: timeout_told.exists() and timeout_told.stat().st_size > 0, what="told")
    assert read_json(timeout_told)["TRAINQ_JOB_STATE"] == "TIMEOUT"


def test_a_failing_or_hanging_notify_changes_nothing_of_the_job(tmp_path: Path) -> None:
    with running_daemon(config={"notify_timeout_seconds": 1}, gpus="fake:1") as daemon:
        pid_file = tmp_path / "pid"
        hang = f"sh -c 'echo $$ > {pid_file}; exec sleep 600'"
        hanging = submit(daemon, "--notify", hang, "--", "true")
        failing = submit(daemon, "--notify", "/nonexistent/program", "--", "true")
        assert daemon.wait_state(hanging)["state"] == "COMPLETED"
        assert daemon.wait_state(failing)["state"] == "COMPLETED"
        assert daemon.cli("wait", str(hanging)).returncode == 0
        wait_for(pid_file.exists, what="the hanging command to start")
        wait_for(lambda: pid_file.stat().st_size > 0, what="its pid")
        pid = int(pid_file.read_text())
        # Killed once its time is up; trainqd says so, and goes on serving.
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=20, what="it to be killed")
        wait_for(lambda: "notify timed out and was killed" in daemon.log(), what="the log")
        wait_for(lambda: failed_line(daemon.log()), what="the failure in the log")
        assert "127" in failed_line(daemon.log())
        assert daemon.cli("health").returncode == 0


def test_mail_goes_through_the_admins_command_for_the_chosen_ends(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    fake_sendmail = tmp_path / "sendmail"
    fake_sendmail.write_text(f'#!/bin/sh\ncat > "{inbox}/$$.mail"\n')
    fake_sendmail.chmod(0o755)
    config = {"mail_command": [str(fake_sendmail), "-t"]}
    with running_daemon(config=config, gpus="fake:1") as daemon:
        quiet = submit(daemon, "--mail", "FAIL", "--", "true")
        loud = submit(daemon, "--mail", "FAIL", "--max-retries", "0", "--", "false")
        every = submit(daemon, "--mail", "END", "--name", "done", "--", "true")
        for job in (quiet, loud, every):
            daemon.wait_state(job)
        wait_for(lambda: len(list(inbox.iterdir())) == 2, what="two mails")
        mails = sorted(path.read_text() for path in inbox.iterdir())
        subjects = sorted(line for m in mails for line in m.splitlines() if line.startswith("Sub"))
        assert subjects == sorted(
            [
                f"Subject: trainq job {loud} (job-{loud}) FAILED",
                f"Subject: trainq job {every} (done) COMPLETED",
            ]
        )
        assert all(m.startswith("To: root\n") for m in mails)
    # Without a mail command, --mail is refused in one line at submit.
    with running_daemon(gpus="fake:1") as daemon:
        done = daemon.cli("submit", "--mail", "END", "--", "true")
        assert (done.returncode, done.stderr) == (
            ExitCode.USAGE,
            "trainq: mail: this trainqd sends no mail (its administrator set no mail_command)\n",
        )


def test_a_job_that_ended_while_trainqd_was_down_is_announced(
    daemon: Daemon, tmp_path: Path
) -> None:
    told, release = tmp_path / "told.json", tmp_path / "release"
    job = daemon.submit(
        {
            "command": [sys.executable, "-c", WAIT_FOR_RELEASE, str(release)],
            "notify": [sys.executable, "-c", RECORD_ENV, str(told)],
        }
    )["id"]
    daemon.wait_state(job, "RUNNING")
    daemon.stop()
    release.touch()
    exit_record = daemon.state_dir / "jobs" / str(job) / "attempts" / "1" / "exit.json"
    wait_for(exit_record.exists, what="the job to end while trainqd is down")
    daemon.start()
    assert daemon.wait_state(job)["state"] == "COMPLETED"
    wait_for(lambda: told.exists() and told.stat().st_size > 0, what="the notify command")
    assert read_json(told)["TRAINQ_JOB_STATE"] == "COMPLETED"
