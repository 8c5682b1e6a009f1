"""A subprocess job's read-only views are bound from descriptors its owner opened
(docs/security.md, "What a subprocess job sees of the host"): a channel link that its owner
swaps back and forth while the job starts never gets root to bind another user's file into
the job's view."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, python_job
from tests.support.users import SYSTEM_PYTHON, files_containing, submit_as, trainq_as

pytestmark = pytest.mark.multiuser

SECRET = "bob-private-7c02aa"
MINE = "alice's own\n"
JOBS = 24
CHANNELS = 40

# Swaps the two links `a` and `b` (same directory) until it is killed: the channel's link
# names alice's file one moment and bob's the next.
SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print("swapping", flush=True)
while True:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
"""

# Reads alice's file by its own path and every channel's view, and writes down what it saw.
TRAINER = """
import os, sys
seen = []
for path in [sys.argv[1]] + [
    os.path.join(d, f) for d, _, files in os.walk("/opt/ml/input/data", followlinks=True)
    for f in files
]:
    try:
        with open(path) as f:
            seen.append(f.read())
    except OSError as exc:
        seen.append(exc.strerror or "error")
out = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data", "seen.txt")
with open(out, "w") as f:
    f.write("\\n".join(seen))
"""


def own(user: User, *paths: Path) -> None:
    for path in paths:
        os.lchown(path, user.uid, user.gid)


def start_as(user: User, argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )


def test_a_link_swapped_while_the_views_are_made_binds_nothing_of_bob(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    # Bob's file is readable itself, but in his 0700 directory: alice cannot reach it.
    bob_dir = shared_dir / "bob"
    bob_dir.mkdir()
    secret = bob_dir / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o644)
    own(bob, bob_dir, secret)
    bob_dir.chmod(0o700)
    # Alice's file, her channel's link to it, and a second link to bob's file.
    alice_dir = shared_dir / "alice"
    alice_dir.mkdir()
    mine = alice_dir / "mine.txt"
    mine.write_text(MINE)
    link, decoy = alice_dir / "train", alice_dir / "decoy"
    link.symlink_to(mine)
    decoy.symlink_to(secret)
    own(alice, alice_dir, mine, link, decoy)

    # Every GPU held: alice's jobs wait, accepted while her link names her own file.
    release = shared_dir / "release"
    blocker = workstation.submit(python_job("until_released.py", str(release), gpus=4))
    workstation.wait_state(blocker["id"], "RUNNING")
    channels = {f"c{i}": {"source": str(link), "mode": "File"} for i in range(CHANNELS)}
    command = [sys.executable, "-c", TRAINER, str(mine)]
    spec = {"command": command, "channels": channels, "gpus": 1}
    jobs = [submit_as(workstation, alice, spec)["id"] for _ in range(JOBS)]

    swapper = start_as(alice, [SYSTEM_PYTHON, "-I", "-c", SWAPPER, str(link), str(decoy)])
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline() == "swapping\n", swapper.stderr
        release.touch()
        # Bob is served while alice's jobs start.
        listed = trainq_as(workstation, bob, "ls")
        assert listed.returncode == 0, listed.stderr
        done = [workstation.wait_state(job_id, timeout=60) for job_id in jobs]
        assert swapper.poll() is None, swapper.communicate()
    finally:
        swapper.kill()
        swapper.communicate()

    seen = [(Path(job["job_dir"]) / "output" / "data" / "seen.txt").read_text() for job in done]
    for job, text in zip(done, seen, strict=True):
        assert job["state"] == "COMPLETED", job
        assert SECRET not in text, f"job {job['id']} read bob's file: {text[:80]!r}"
        assert text.startswith(MINE), text  # alice's own file, read by its own path
    assert files_containing(workstation.state_dir, SECRET.encode()) == []
    # Nor does what the monitors logged (the owner reads monitor.log) name bob's file.
    assert files_containing(workstation.state_dir, str(secret).encode()) == []
    assert SECRET not in workstation.log()
    # Bob's own job runs.
    bobs = submit_as(workstation, bob, python_job("exit_with.py", "0"))
    assert workstation.wait_state(bobs["id"], timeout=30)["state"] == "COMPLETED"
