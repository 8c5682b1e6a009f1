"""What one user may learn of another's job: that it exists, whose it is, its state, GPUs and
times, but not why it failed (a failing trainer's reason is often its stderr's tail, where
tokens end up), nor its logs and model, even when the two users share a primary group."""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon
from tests.support.users import SYSTEM_PYTHON, http_as, trainq_as
from trainqd.attempts.jobdir import JobDirs

pytestmark = pytest.mark.multiuser

# Reads GET /v1/events from the start as the user who runs it, until `marker` has been seen
# or a few seconds pass (the stream itself never ends); prints what it read.
_EVENTS_CLIENT = """
import socket, sys, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(0.5)
sock.connect(sys.argv[1])
sock.sendall(b"GET /v1/events?since=0 HTTP/1.1\\r\\nHost: trainq\\r\\n\\r\\n")
seen, deadline = b"", time.monotonic() + 10
while sys.argv[2].encode() not in seen and time.monotonic() < deadline:
    try:
        data = sock.recv(65536)
    except socket.timeout:
        continue
    if not data:
        break
    seen += data
sys.stdout.write(seen.decode("utf-8", "replace"))
"""


def in_group_of(user: User, other: User) -> User:
    """`user` with `other`'s primary group among their groups, as on a workstation where
    every account's primary group is `users`."""
    return dataclasses.replace(user, groups=(*user.groups, other.gid))


def failing_job(daemon: Daemon, user: User, cwd: Path, secret: str, *flags: str) -> int:
    """A job of `user` that leaves a model behind and fails with `secret` (from its hidden
    environment, as a token would be) on its stderr; `flags`: more of submit's."""
    script = 'echo weights > "$SM_MODEL_DIR/weights"; echo "TOKEN=$SECRET" >&2; exit 3'
    done = trainq_as(
        daemon,
        user,
        "submit",
        *flags,
        "--max-retries",
        "0",
        "--env",
        f"SECRET={secret}",
        "--",
        "/bin/sh",
        "-c",
        script,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    daemon.wait_state(job_id, "FAILED")
    return job_id


def events_seen_by(daemon: Daemon, user: User, marker: str) -> str:
    done = user.run([SYSTEM_PYTHON, "-I", "-c", _EVENTS_CLIENT, str(daemon.socket), marker])
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("flags", [(), ("--nodes", "2")], ids=["one node", "two nodes"])
def test_a_failures_details_are_for_its_owner_and_admins(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, flags: tuple[str, ...]
) -> None:
    """A job of several nodes fails as its failing node did ("algo-1: ..."): the same."""
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    secret = f"tq{uuid.uuid4().hex}"
    job_id = failing_job(workstation, alice, shared_dir, secret, *flags)

    for reader in (alice, carol):  # the owner and an admin read why it failed
        own = trainq_as(workstation, reader, "show", "--json", str(job_id))
        assert own.returncode == 0, own.stderr
        assert secret in own.stdout, reader.name

    for command in (
        ("ls", "--all"),
        ("ls", "--all", "--json"),
        ("show", str(job_id)),
        ("show", "--json", str(job_id)),
    ):
        seen = trainq_as(workstation, bob, *command)
        assert seen.returncode == 0, seen.stderr  # bob is served, and sees the job exists
        assert str(job_id) in seen.stdout, command
        assert secret not in seen.stdout, command
    shown = trainq_as(workstation, bob, "show", "--json", str(job_id))
    assert '"FAILED"' in shown.stdout
    assert alice.name in shown.stdout

    events = events_seen_by(workstation, bob, '"to_state":"FAILED"')
    assert '"to_state":"FAILED"' in events
    assert secret not in events


def test_a_shared_primary_group_opens_no_job_files(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice = accounts.alice
    bob = in_group_of(accounts.bob, alice)
    job_id = failing_job(workstation, alice, shared_dir, f"tq{uuid.uuid4().hex}")
    job_dir = workstation.state_dir / "jobs" / str(job_id)
    files = [
        job_dir / "attempts" / "1" / "stderr",
        job_dir / "attempts" / "1" / "stdout",
        job_dir / "ml" / "model" / "weights",
        job_dir / "ml" / "input" / "config" / "hyperparameters.json",
    ]
    for path in files:
        assert alice.run(["cat", str(path)]).returncode == 0, path  # hers, still
        peek = bob.run(["cat", str(path)])
        assert peek.returncode != 0, path
        assert "Permission denied" in peek.stderr, path
    for directory in (job_dir / "ml", job_dir / "ml" / "model", job_dir / "attempts" / "1"):
        assert bob.run(["ls", str(directory)]).returncode != 0, directory
    assert workstation.job(job_id)["state"] == "FAILED"
    served = trainq_as(workstation, bob, "ls", "--all")
    assert served.returncode == 0, served.stderr


def test_a_container_jobs_attempt_dir_is_its_owners_alone(
    accounts: Accounts, shared_dir: Path
) -> None:
    """A container job's attempt directory stays root's (its monitor writes there as root);
    its owner reads it through an ACL, and their group gets nothing."""
    alice = accounts.alice
    bob = in_group_of(accounts.bob, alice)
    dirs = JobDirs(shared_dir / "jobs")
    dirs.ensure_root()
    paths = dirs.create_attempt(7, 1, alice.uid, alice.gid, monitor_is_owner=False)
    log = paths.attempt_dir / "stdout"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"hello\n")
    os.fchown(fd, alice.uid, alice.gid)
    os.close(fd)
    assert alice.run(["cat", str(log)]).stdout == "hello\n"
    peek = bob.run(["cat", str(log)])
    assert peek.returncode != 0
    assert "Permission denied" in peek.stderr
    assert bob.run(["ls", str(paths.attempt_dir)]).returncode != 0
    assert alice.run(["touch", str(paths.attempt_dir / "planted")]).returncode != 0


def test_hyperparameter_values_are_for_its_owner_and_admins(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """Tokens travel as hyperparameters too (`--hp tok=...`): other users see the names alone."""
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    secret = f"tq{uuid.uuid4().hex}"
    done = trainq_as(
        workstation, alice, "submit", "--hp", f"tok={secret}", "--", "true", cwd=shared_dir
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    workstation.wait_state(job_id, "COMPLETED")

    for reader in (alice, carol):  # the owner and an admin read the value
        own = trainq_as(workstation, reader, "show", "--json", str(job_id))
        assert own.returncode == 0, own.stderr
        assert secret in own.stdout, reader.name

    for command in (("ls", "--all", "--json"), ("show", "--json", str(job_id))):
        seen = trainq_as(workstation, bob, *command)
        assert seen.returncode == 0, seen.stderr  # bob is served, and sees the job exists
        assert str(job_id) in seen.stdout, command
        assert '"tok"' in seen.stdout, command  # the name stays visible
        assert secret not in seen.stdout, command
    status, jobs = http_as(workstation, bob, "GET", "/v1/jobs?all=true")
    assert status == 200, jobs
    assert str(job_id) in str(jobs)
    assert secret not in str(jobs)

    exported = trainq_as(workstation, bob, "export", "--to", "slurm", str(job_id))
    assert exported.returncode != 0
    assert "are hidden from you" in exported.stderr
    assert secret not in exported.stdout + exported.stderr
