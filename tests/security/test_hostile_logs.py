"""A job's owner can replace its log files: with a FIFO (whose open would wait for a writer)
or a huge sparse file and a timeline that points into all of it (which, read whole, would
take the daemon's memory and time). Either
way `trainq logs` gets a prompt answer, trainqd's memory stays flat, and other users are
served meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import TRAINQ, Daemon
from tests.support.users import trainq_as
from tests.support.waiting import wait_for
from trainqd.api.log_view import TAIL_SCAN_BYTES

pytestmark = pytest.mark.multiuser

HUGE = 10 << 30  # a sparse file: no disk space, all zeros
SHOWN = 1 << 20
MEMORY_ALLOWANCE = 100 << 20
# Seconds after which a command counts as hanging behind the hostile log: a bound on a hang,
# not a speed, so a loaded machine's second or two passes.
HANGS_AFTER = 20
FORGE_TIMELINE = f"""
import struct, sys
with open(sys.argv[1], "wb") as timeline:
    for offset in range(0, {HUGE}, 1 << 16):
        timeline.write(struct.pack("<qQIB3x", offset, offset, 1 << 16, 1))
"""


def ended_job(daemon: Daemon, user: User, cwd: Path) -> tuple[int, Path]:
    """A completed job of `user` and its attempt's stdout."""
    done = trainq_as(
        daemon, user, "submit", "--gpus", "1", "--", "/bin/sh", "-c", "echo hello", cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    daemon.wait_state(job_id, "COMPLETED")
    return job_id, daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "stdout"


def as_owner(user: User, *argv: str) -> None:
    done = user.run(list(argv))
    assert done.returncode == 0, done.stderr


def answers_promptly(daemon: Daemon, user: User, *args: str) -> None:
    """Answered, not left hanging (the stream of another's log holds nothing of trainqd's)."""
    done = trainq_as(daemon, user, *args, timeout=HANGS_AFTER)
    assert done.returncode == 0, done.stderr


def test_a_fifo_for_a_log_gets_one_line_and_blocks_nobody(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    job_id, stdout = ended_job(workstation, alice, shared_dir)
    as_owner(alice, "/bin/sh", "-c", f'rm -f "{stdout}" && mkfifo "{stdout}"')

    logs = alice.popen(
        [TRAINQ, "--socket", str(workstation.socket), "logs", str(job_id)],
        env=workstation.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = logs.communicate(timeout=10)
    finally:
        logs.kill()
    assert logs.returncode != 0
    assert err.count("\n") == 1, err
    assert "not a regular file" in err, err
    assert out == ""
    answers_promptly(workstation, bob, "health")
    answers_promptly(workstation, bob, "ls")


def test_a_huge_log_is_streamed_with_flat_memory(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    job_id, stdout = ended_job(workstation, alice, shared_dir)
    as_owner(alice, "truncate", "-s", str(HUGE), str(stdout))
    # and a timeline whose every record is a piece of it: 10 GiB in time order
    as_owner(alice, sys.executable, "-c", FORGE_TIMELINE, str(stdout.with_name("timeline")))
    assert workstation.proc is not None
    daemon = psutil.Process(workstation.proc.pid)
    before = daemon.memory_info().rss
    peak = [before]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], daemon.memory_info().rss)
            sampling.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    logs = alice.popen(
        [TRAINQ, "--socket", str(workstation.socket), "logs", str(job_id)],
        env=workstation.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert logs.stdout is not None
        began = time.monotonic()
        shown = 0
        while shown < SHOWN:  # `trainq logs JOB | head -c 1M`
            chunk = os.read(logs.stdout.fileno(), SHOWN - shown)
            assert chunk, "the log ended early"
            shown += len(chunk)
        took = time.monotonic() - began
        assert took < HANGS_AFTER, f"the first MiB took {took:.1f} s"
        # alice stops reading: the stream waits for her, and bob is served meanwhile.
        answers_promptly(workstation, bob, "health")
        answers_promptly(workstation, bob, "ls")
        # The last line of 10 GiB without a newline: looked for over a bounded stretch only.
        last = trainq_as(workstation, alice, "logs", "-n", "1", str(job_id), timeout=60)
        assert last.returncode == 0, last.stderr
        assert len(last.stdout) <= TAIL_SCAN_BYTES
    finally:
        logs.kill()
        logs.communicate()
        sampling.set()
        sampler.join()
    grew = peak[0] - before
    assert grew < MEMORY_ALLOWANCE, f"trainqd's memory grew by {grew >> 20} MiB"
    wait_for(lambda: workstation.get("/v1/health").status_code == 200, timeout=5)
