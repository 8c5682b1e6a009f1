"""`trainq rm` deletes a job's directory as root, and the job's owner controls what is in it.
An owner who replaced files and directories of an ended job with symlinks to another user's
file or to root's files and directories gets the links removed, never their targets; a mount
inside the directory (which the removal would otherwise walk into) stops it before anything
is deleted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon
from tests.support.users import trainq_as

pytestmark = pytest.mark.multiuser


def ended_job(daemon: Daemon, user: User, cwd: Path) -> Path:
    """A completed job of `user`, with a model directory; its job dir."""
    script = 'echo hello; cd "$SAGEMAKER_BASE_DIR/model" && mkdir sub && echo w > sub/w'
    done = trainq_as(daemon, user, "submit", "--wait", "--", "/bin/sh", "-c", script, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return daemon.state_dir / "jobs" / done.stdout.strip()


def as_owner(user: User, script: str) -> None:
    done = user.run(["/bin/sh", "-c", script])
    assert done.returncode == 0, done.stderr


@pytest.fixture
def targets(accounts: Accounts, shared_dir: Path) -> dict[str, Path]:
    """What a hostile owner would have trainqd delete: a file of another user's, and a file
    and a directory (with contents) of root's."""
    bob = accounts.bob
    bobs = shared_dir / "bobs-file"
    bobs.write_text("bob's work\n")
    os.chown(bobs, bob.uid, bob.gid)
    os.chmod(bobs, 0o600)
    root_dir = shared_dir / "root-dir"
    root_dir.mkdir(mode=0o755)
    (root_dir / "inside").write_text("root's\n")
    root_file = shared_dir / "root-file"
    root_file.write_text("root's file\n")
    return {"bobs": bobs, "root_dir": root_dir, "root_file": root_file}


def test_rm_removes_planted_links_and_never_their_targets(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, targets: dict[str, Path]
) -> None:
    alice = accounts.alice
    job_dir = ended_job(workstation, alice, shared_dir)
    ml, attempt = job_dir / "ml", job_dir / "attempts" / "1"
    bobs, root_dir, root_file = targets["bobs"], targets["root_dir"], targets["root_file"]
    # Files and directories of the ended job replaced by links, at every depth she can reach.
    as_owner(
        alice,
        f'ln -sf "{bobs}" "{attempt}/stdout"'
        f' && rm -rf "{ml}/model/sub" && ln -s "{root_dir}" "{ml}/model/sub"'
        f' && ln -s "{root_file}" "{ml}/model/file-link"'
        f' && ln -s "{root_dir}/inside" "{ml}/inside-link"'
        f' && ln -s / "{ml}/slash"',
    )
    job_id = job_dir.name
    done = trainq_as(workstation, alice, "rm", job_id)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{job_id} removed\n", "")
    assert not job_dir.exists()
    assert bobs.read_text() == "bob's work\n"
    assert (root_dir / "inside").read_text() == "root's\n"
    assert root_file.read_text() == "root's file\n"
    assert Path("/etc/passwd").exists()
    # trainqd goes on serving the others.
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0


def test_rm_does_not_cross_a_mount_inside_the_job_dir(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, targets: dict[str, Path]
) -> None:
    alice = accounts.alice
    job_dir = ended_job(workstation, alice, shared_dir)
    mount_point = job_dir / "ml" / "model" / "sub"
    root_dir = targets["root_dir"]
    subprocess.run(["mount", "--bind", str(root_dir), str(mount_point)], check=True)
    try:
        done = trainq_as(workstation, alice, "rm", job_dir.name)
        assert done.returncode == 6, done.stderr
        assert done.stderr == (
            f"trainq: job {job_dir.name} was not removed: {mount_point} is a mount point; "
            "unmount it first\n"
        )
        assert (root_dir / "inside").read_text() == "root's\n"
        assert (job_dir / "attempts" / "1" / "stdout").read_text() == "hello\n"
        assert workstation.job(int(job_dir.name))["state"] == "COMPLETED"
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    assert trainq_as(workstation, alice, "rm", job_dir.name).returncode == 0
    assert not job_dir.exists()
    assert (root_dir / "inside").read_text() == "root's\n"
