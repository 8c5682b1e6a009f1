"""Channel data is checked and read with the submitter's rights, never the daemon's: a
channel its submitter cannot read is refused at submit, and nothing of it ever reaches the
trainer, its FIFOs or its logs, even when it becomes unreadable after the job was accepted.

Every secret here is a fresh token, looked for afterwards in every file trainqd and the job
wrote: the state directory (database, job and attempt directories, logs) and trainqd's log.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, python_job
from tests.support.users import files_containing, probe_trainer, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser
MODES = ["File", "Pipe"]


def secret() -> bytes:
    return f"secret-{uuid.uuid4()}".encode()


def assert_never_leaked(daemon: Daemon, token: bytes) -> None:
    assert files_containing(daemon.state_dir, token) == []
    assert token.decode() not in daemon.log()


def probe(job: dict[str, Any]) -> dict[str, str]:
    outcomes: dict[str, str] = json.loads(
        (Path(job["job_dir"]) / "output" / "data" / "probe.json").read_text()
    )
    return outcomes


def submit_probe(daemon: Daemon, user: User, cwd: Path, source: Path, mode: str, *args: str) -> Any:
    return trainq_as(
        daemon, user, "submit", *args, "--channel", f"train={source}:{mode}",
        "--", sys.executable, probe_trainer(),
        cwd=cwd,
    )  # fmt: skip


def write(path: Path, data: bytes, mode: int, uid: int = 0, gid: int = 0) -> Path:
    path.write_bytes(data)
    os.chown(path, uid, gid)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", MODES)
def test_a_file_only_root_can_read_is_refused_at_submit(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, mode: str
) -> None:
    token = secret()
    source = write(shared_dir / "weights.bin", token, 0o600)
    done = submit_probe(workstation, accounts.alice, shared_dir, source, mode)
    assert done.returncode == ExitCode.USAGE
    assert done.stderr == f"trainq: channel 'train': {source} is not readable by you\n"
    assert workstation.get("/v1/jobs", params={"all": "true"}).json()["jobs"] == []
    assert list((workstation.state_dir / "jobs").iterdir()) == []
    assert_never_leaked(workstation, token)


def test_a_directory_only_root_can_list_is_refused_at_submit(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    token = secret()
    private = shared_dir / "private"
    private.mkdir(mode=0o700)
    write(private / "part-0", token, 0o644)  # readable itself, but behind a closed door
    done = submit_probe(workstation, accounts.alice, shared_dir, private, "Pipe")
    assert done.returncode == ExitCode.USAGE
    assert done.stderr == f"trainq: channel 'train': {private} is not readable by you\n"
    assert_never_leaked(workstation, token)


@pytest.mark.parametrize("mode", MODES)
def test_root_may_use_data_only_root_can_read(
    workstation: Daemon, shared_dir: Path, mode: str
) -> None:
    """The refusal is about the submitter's rights, not about who owns the data."""
    token = secret()
    source = write(shared_dir / "weights.bin", token, 0o600)
    job = workstation.submit(
        {
            "command": [sys.executable, probe_trainer()],
            "channels": {"train": {"source": str(source), "mode": mode}},
        }
    )
    done = workstation.wait_state(job["id"])
    assert done["state"] == "COMPLETED", done
    key = "train" if mode == "Pipe" else "train/weights.bin"
    assert probe(done) == {key: "ok"}


@pytest.mark.parametrize("mode", MODES)
def test_a_group_that_may_read_the_data_lets_its_members_use_it(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, mode: str
) -> None:
    token = secret()
    source = write(shared_dir / "shard", token, 0o640, gid=accounts.admins_gid)
    refused = submit_probe(workstation, accounts.bob, shared_dir, source, mode)
    assert refused.returncode == ExitCode.USAGE, refused.stderr
    assert "is not readable by you" in refused.stderr
    accepted = submit_probe(workstation, accounts.carol, shared_dir, source, mode)
    assert accepted.returncode == 0, accepted.stderr
    done = workstation.wait_state(int(accepted.stdout))
    assert done["state"] == "COMPLETED", done
    assert set(probe(done).values()) == {"ok"}
    # carol's own job printed it: the data reached the one who may read it (and the search
    # that finds no leak elsewhere does find it in her job's log).
    assert token.decode() in workstation.cli("logs", str(done["id"])).stdout
    assert files_containing(workstation.state_dir, token) != []


@pytest.mark.parametrize("mode", MODES)
def test_data_made_unreadable_after_submit_never_reaches_the_job(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, mode: str
) -> None:
    """Accepted while alice could read it, closed to her before the job ran: the trainer
    (File mode) or the feeder (Pipe mode) runs as alice, so the kernel says no."""
    token = secret()
    data = shared_dir / "data"
    data.mkdir()
    write(data / "a-public", b"public rows\n", 0o644, accounts.alice.uid, accounts.alice.gid)
    private = write(data / "b-private", token, 0o644)
    blocker = workstation.submit(python_job("sleeper.py", gpus=4))
    workstation.wait_state(blocker["id"], "RUNNING")
    accepted = submit_probe(
        workstation, accounts.alice, shared_dir, data, mode, "--gpus", "1", "--max-retries", "0"
    )
    assert accepted.returncode == 0, accepted.stderr
    job_id = int(accepted.stdout)
    private.chmod(0o600)
    assert workstation.cli("stop", "--grace", "0", str(blocker["id"])).returncode == 0
    done = workstation.wait_state(job_id)
    if mode == "File":
        assert done["state"] == "COMPLETED", done
        assert probe(done) == {"train/a-public": "ok", "train/b-private": "EACCES"}
    else:
        assert done["state"] == "FAILED", done
        assert done["failure_reason"] == (
            f"channel 'train': cannot read {data / 'b-private'}: Permission denied"
        )
    assert_never_leaked(workstation, token)


def test_a_channel_repointed_after_submit_tells_nothing_of_what_it_now_names(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """alice's channels are links of hers to her own data when she submits; before the
    jobs start she points one at a directory and the other at a file of bob's, behind a
    door closed to her. Both jobs' channels are laid out alike and both reads are refused:
    nothing says which is a directory, as it would if root had looked at the paths."""
    alice, bob = accounts.alice, accounts.bob
    hidden = shared_dir / "bob"
    hidden.mkdir(mode=0o700)
    (hidden / "secret-dir").mkdir()
    token = secret()
    write(hidden / "secret-file", token, 0o644)
    os.chown(hidden, bob.uid, bob.gid)
    mine = shared_dir / "alice"
    mine.mkdir()
    write(mine / "rows", b"rows\n", 0o644, alice.uid, alice.gid)
    blocker = workstation.submit(python_job("sleeper.py", gpus=4))
    workstation.wait_state(blocker["id"], "RUNNING")
    jobs = {}
    for name, target in (("to-dir", "secret-dir"), ("to-file", "secret-file")):
        link = shared_dir / name
        link.symlink_to(mine)
        os.lchown(link, alice.uid, alice.gid)
        done = submit_probe(workstation, alice, shared_dir, link, "File", "--gpus", "1")
        assert done.returncode == 0, done.stderr
        jobs[name] = int(done.stdout)
        link.unlink()  # what alice may do to her own link while the job waits
        link.symlink_to(hidden / target)
        os.lchown(link, alice.uid, alice.gid)
    assert workstation.cli("stop", "--grace", "0", str(blocker["id"])).returncode == 0
    for name, job_id in jobs.items():
        job = workstation.wait_state(job_id)
        assert job["state"] == "COMPLETED", job
        channel = Path(job["job_dir"]) / "input" / "data" / "train"
        assert channel.is_dir()
        assert not channel.is_symlink()
        assert [p.name for p in channel.iterdir()] == [name]
        assert probe(job) == {f"train/{name}": "EACCES"}
    assert_never_leaked(workstation, token)
    assert workstation.cli("health").returncode == 0
