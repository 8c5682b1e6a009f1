"""A job's source is copied with its submitter's rights: with real users, what the
submitter cannot read refuses the copy (though trainqd, root, could read it), a link to
another user's file is refused, and what is copied belongs to the submitter alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import one_line, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def bobs_source(shared_dir: Path, accounts: Accounts) -> Path:
    src = shared_dir / "bob-src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    for path in (src, src / "train.py"):
        os.chown(path, accounts.bob.uid, accounts.bob.gid)
    return src


def test_a_source_is_copied_with_the_submitters_rights_only(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    src = bobs_source(shared_dir, accounts)
    # A file in Bob's tree that only root may read: root could copy it, Bob cannot.
    private = src / "private"
    private.write_text("root's\n")
    os.chmod(private, 0o600)
    done = trainq_as(workstation, bob, "submit", "--source-dir", str(src), "--", "true", cwd=src)
    assert done.returncode == ExitCode.USAGE
    assert one_line(done.stderr) == (
        f"trainq: snapshot: source directory {src}: cannot copy {private}: Permission denied\n"
    )
    private.unlink()
    # A link to Alice's private file, in Bob's source.
    alices = shared_dir / "alice-secret"
    alices.write_text("alice's\n")
    os.chown(alices, alice.uid, alice.gid)
    os.chmod(alices, 0o600)
    (src / "steal").symlink_to(alices)
    done = trainq_as(workstation, bob, "submit", "--source-dir", str(src), "--", "true", cwd=src)
    assert done.returncode == ExitCode.USAGE
    assert "steal is a link out of it" in one_line(done.stderr)
    assert trainq_as(workstation, bob, "health").returncode == 0
    (src / "steal").unlink()
    done = trainq_as(
        workstation, bob, "submit", "--source-dir", str(src), "--", "python3", "train.py",
        cwd=src,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    assert workstation.wait_state(job)["state"] == "COMPLETED"
    code = workstation.state_dir / "jobs" / str(job) / "code"
    assert (code.stat().st_uid, code.stat().st_mode & 0o777) == (bob.uid, 0o700)
    assert (code / "train.py").stat().st_uid == bob.uid
    assert trainq_as(workstation, bob, "logs", str(job)).stdout == "hi\n"
