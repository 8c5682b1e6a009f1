"""A user's job can fill the disk that holds trainqd's state (its own output lives there).
Then a submission is refused with one line (HTTP 507, `trainq submit` exit 8), trainqd stays
up and keeps answering reads, starts again while the disk is still full, and an attempt that
ends meanwhile is recorded once there is room, its trainer having run exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts, User
from tests.support.daemon import Daemon, scratch_dir, supervised
from tests.support.users import http_as, trainq_as
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

STATE_DISK = "16m"


@pytest.fixture
def small_disk_daemon(accounts: Accounts) -> Iterator[Daemon]:
    """trainqd as root whose state directory is a small filesystem of its own."""
    base = scratch_dir()
    state = base / "state"
    state.mkdir(mode=0o755)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={STATE_DISK},mode=0755", "tmpfs", str(state)],
        check=True,
    )
    try:
        daemon = Daemon(base, config={"admin_group": ADMINS, "default_stop_grace_seconds": 5})
        with supervised(daemon):
            yield daemon
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def submit(daemon: Daemon, user: User, cwd: Path, script: str) -> int:
    done = trainq_as(daemon, user, "submit", "--gpus", "1", "--", "/bin/sh", "-c", script, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def free_bytes(path: Path) -> int:
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def reads_work(daemon: Daemon, user: User) -> dict[int, str]:
    status, listed = http_as(daemon, user, "GET", "/v1/jobs?all=true")
    assert status == 200, listed
    done = trainq_as(daemon, user, "ls", "--all", "--json")
    assert done.returncode == 0, done.stderr
    return {j["id"]: j["state"] for j in json.loads(done.stdout)["jobs"]}


def submits_are_refused(daemon: Daemon, user: User, cwd: Path) -> None:
    status, body = http_as(daemon, user, "POST", "/v1/jobs", {"command": ["true"]})
    assert status == 507, body
    assert body["error"]["code"] == "disk_full", body
    done = trainq_as(daemon, user, "submit", "--", "true", cwd=cwd)
    assert done.returncode == ExitCode.DISK_FULL, done
    assert done.stderr.startswith("trainq: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "disk is full" in done.stderr


def test_a_full_disk_refuses_submissions_and_loses_no_attempt(
    small_disk_daemon: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    daemon, alice, bob = small_disk_daemon, accounts.alice, accounts.bob
    scratch = shared_dir / "w"  # on another filesystem than the state's
    scratch.mkdir()
    scratch.chmod(0o1777)
    runs, go, filled = scratch / "runs", scratch / "go", scratch / "filled"
    # bob's trainer counts its runs on another filesystem, then ends when told to.
    counter = submit(
        daemon,
        bob,
        shared_dir,
        f'echo run >> "{runs}"; while [ ! -e "{go}" ]; do sleep 0.05; done; exit 0',
    )
    daemon.wait_state(counter, "RUNNING")
    wait_for(runs.exists, timeout=20, what="bob's trainer to start")
    # alice's job writes its own output until the disk is full, and ends.
    filler = submit(
        daemon,
        alice,
        shared_dir,
        'dd if=/dev/zero of="$SAGEMAKER_BASE_DIR/output/data/fill" bs=64k 2>/dev/null;'
        f' touch "{filled}"',
    )
    wait_for(filled.exists, timeout=30, what="alice's job to fill the disk")
    assert free_bytes(daemon.state_dir) == 0

    submits_are_refused(daemon, bob, shared_dir)
    assert reads_work(daemon, bob)[counter] == "RUNNING"

    go.touch()  # bob's attempt ends while the disk is full
    wait_for(
        lambda: daemon.log().count("an attempt's end is kept") >= 2,
        timeout=20,
        what="both attempt ends to be kept for later",
    )
    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log()
    assert reads_work(daemon, bob)[counter] == "RUNNING"  # held, not launched again

    daemon.restart()  # the disk still full
    assert free_bytes(daemon.state_dir) == 0
    assert reads_work(daemon, bob)[counter] == "RUNNING"
    submits_are_refused(daemon, bob, shared_dir)

    (daemon.state_dir / "jobs" / str(filler) / "ml" / "output" / "data" / "fill").unlink()
    daemon.wait_state(counter, "COMPLETED", timeout=60)
    daemon.wait_state(filler, "COMPLETED", timeout=60)
    assert runs.read_text() == "run\n"  # bob's trainer ran exactly once
    assert [a["outcome"] for a in daemon.job(counter)["attempts"]] == ["exited"]
    with contextlib.suppress(FileNotFoundError):
        go.unlink()
    status, body = http_as(daemon, bob, "POST", "/v1/jobs", {"command": ["true"]})
    assert status == 201, body
