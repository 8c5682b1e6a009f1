"""A container job's channels are opened with its owner's rights when it starts
(docs/security.md, "Channels"): re-pointing a channel's link at another user's data while
the job waits hands the container nothing of it."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.containers import attempt_log, container_job, ml_path
from tests.support.daemon import Daemon, python_job
from tests.support.users import files_containing, http_as, trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers

SECRET = "bob-private-4d1f9e"


def test_a_link_repointed_while_the_job_waits_reaches_nothing(
    podman_daemon: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    # Bob's data: readable files, in a directory below his 0700 one.
    bob_home = shared_dir / "bob"
    (bob_home / "data").mkdir(parents=True)
    (bob_home / "data" / "secret.txt").write_text(SECRET)
    for path in (bob_home, bob_home / "data", bob_home / "data" / "secret.txt"):
        os.chown(path, bob.uid, bob.gid)
    bob_home.chmod(0o700)
    (bob_home / "data").chmod(0o755)
    # Alice's: her data, and the link she names as her channel.
    alice_dir = shared_dir / "alice"
    (alice_dir / "data").mkdir(parents=True)
    (alice_dir / "data" / "mine.txt").write_text("alice's own\n")
    link = alice_dir / "train"
    link.symlink_to(alice_dir / "data")
    for path in (alice_dir, alice_dir / "data", alice_dir / "data" / "mine.txt"):
        os.chown(path, alice.uid, alice.gid)
    os.lchown(link, alice.uid, alice.gid)

    # Both GPUs held: alice's job waits.
    release = shared_dir / "release"
    blocker = podman_daemon.submit(python_job("until_released.py", str(release), gpus=2))
    podman_daemon.wait_state(blocker["id"], "RUNNING")
    spec = container_job("contract_dump.py", gpus=1, channels={"train": {"source": str(link)}})
    status, job = http_as(podman_daemon, alice, "POST", "/v1/jobs", spec)
    assert status == 201, job
    assert podman_daemon.job(job["id"])["state"] == "PENDING"

    # The swap, as alice: her link now names bob's data.
    swapped = alice.run(["/bin/ln", "-sfn", str(bob_home / "data"), str(link)])
    assert swapped.returncode == 0, swapped.stderr
    # Bob is served meanwhile.
    assert trainq_as(podman_daemon, bob, "ls").returncode == 0

    release.touch()
    done = podman_daemon.wait_state(job["id"], timeout=60)
    ml_root = Path(done["job_dir"])
    assert files_containing(ml_root, SECRET.encode()) == [], attempt_log(podman_daemon, job["id"])
    assert done["state"] == "FAILED", attempt_log(podman_daemon, job["id"])
    attempt = done["attempts"][0]
    assert attempt["outcome"] == "start_failed", attempt
    assert "channel train" in attempt["reason"], attempt
    assert "not readable by you" in attempt["reason"], attempt
    # Nothing stays mounted for the attempt, and bob's own job runs.
    assert str(podman_daemon.state_dir) not in Path("/proc/self/mountinfo").read_text()
    status, bobs = http_as(
        podman_daemon, bob, "POST", "/v1/jobs", container_job("exit_with.py", "0")
    )
    assert status == 201, bobs
    assert podman_daemon.wait_state(bobs["id"], timeout=60)["state"] == "COMPLETED"


def staged_mounts(daemon: Daemon) -> list[str]:
    """Mount points under the daemon's state directory (the monitors' binds for engines)."""
    state = str(daemon.state_dir) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(state)]


def test_the_binds_of_a_vanished_monitor_are_released(
    podman_daemon: Daemon, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.csv").write_text("1\n")
    spec = container_job("until_released.py", "/opt/ml/checkpoints/release",
                         channels={"train": {"source": str(data)}})  # fmt: skip
    job_id = podman_daemon.submit(spec)["id"]
    pid_file = ml_path(podman_daemon, job_id, "output", "data", "pid")
    wait_for(pid_file.exists, timeout=60, what="the trainer to start")
    attempt_dir = podman_daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1"
    staging = attempt_dir / "mounts"
    assert sorted(staged_mounts(podman_daemon)) == [f"{staging}/channels/train", f"{staging}/ml"]
    assert stat.S_IMODE(staging.stat().st_mode) == 0o700
    assert staging.stat().st_uid == 0

    # The monitor dies without a word; the next trainqd cleans up after it.
    podman_daemon.kill()
    record = attempt_dir.with_name(f"{attempt_dir.name}.monitor")
    os.kill(json.loads(record.read_text())["monitor_pid"], signal.SIGKILL)
    pid_file.unlink()
    podman_daemon.start()
    wait_for(pid_file.exists, timeout=60, what="the second attempt to start")
    assert not [p for p in staged_mounts(podman_daemon) if p.startswith(f"{staging}/")]
    ml_path(podman_daemon, job_id, "checkpoints", "release").touch()
    done = podman_daemon.wait_state(job_id, timeout=60)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id, 2)
    assert staged_mounts(podman_daemon) == []
