"""Users against trainqd's Slurm back end.

A forged answer: `sbatch` runs as the job's owner, so its
answer, the Slurm job id that trainqd then follows, stops and cancels, is the owner's to
forge: a process running as her is hers (with ptrace, allowed between one user's own
processes wherever Yama does not restrict it, she makes it print anything). trainqd must
never use such an id with more than the owner's rights: every `scancel` runs as the job's
owner, so Slurm itself refuses to cancel or signal anyone else's job.

A flood: a sweep of 10,000 jobs must not become 10,000 sbatch processes at once (each with
trainqd's pipes), nor make another user's job wait for all of them to be handed over.

Slurm's commands here are small stand-ins on trainqd's PATH (tests/support/fake_slurm.py;
the real cluster's are in tests/slurm): sbatch, run as the owner, takes a moment, notes how
many sbatch processes run at once, and answers with its own pid or the id its owner chose;
squeue says every job runs; scancel refuses, as Slurm does, a caller who is neither root nor
the owner of the job it names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import http_as, submit_as, trainq_as
from tests.support.waiting import wait_for
from trainqd.backends.slurm import HANDOFFS_PER_USER, SlurmBackend

pytestmark = pytest.mark.multiuser

VICTIM_SLURM_JOB = 999  # a Slurm job of tq-bob's, not trainq's


def test_a_forged_sbatch_answer_cannot_cancel_another_users_slurm_job(
    slurm_daemon: Daemon, fake_slurm: Path, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    # Her own file, which her own sbatch answers with: tq-bob's Slurm job.
    done = alice.run(["sh", "-c", f"echo {VICTIM_SLURM_JOB} > {fake_slurm / 'alice' / 'forged'}"])
    assert done.returncode == 0, done.stderr
    done = trainq_as(slurm_daemon, alice, "submit", "--", "true", cwd=shared_dir)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    record = slurm_daemon.state_dir / "jobs" / str(job) / "attempts" / "1.slurm"
    wait_for(record.exists, timeout=15, interval=0.05, what="the hand-off to Slurm")
    assert json.loads(record.read_text())["slurm_job_id"] == VICTIM_SLURM_JOB
    wait_for(lambda: slurm_daemon.job(job)["state"] == "RUNNING", timeout=10, interval=0.1)

    # Her stop reaches the Slurm job her sbatch answer named: tq-bob's.
    assert trainq_as(slurm_daemon, alice, "stop", str(job)).returncode == 0
    log = fake_slurm / "scancel.log"
    wait_for(
        lambda: f"{VICTIM_SLURM_JOB}" in log.read_text(),
        timeout=10,
        interval=0.05,
        what="trainqd to pass the stop on to Slurm",
    )
    lines = log.read_text().splitlines()
    assert not any(line.startswith("done") for line in lines), lines
    assert all(f"uid={alice.uid} " in line for line in lines), lines

    # trainqd serves the others throughout.
    assert trainq_as(slurm_daemon, bob, "health").returncode == 0
    assert trainq_as(slurm_daemon, bob, "ls").returncode == 0


def handed(daemon: Daemon) -> set[int]:
    """The jobs trainqd has handed to Slurm (its own records)."""
    return {int(p.parent.parent.name) for p in daemon.state_dir.glob("jobs/*/attempts/1.slurm")}


def test_a_sweep_is_handed_to_slurm_a_few_jobs_at_a_time(
    slurm_daemon: Daemon, fake_slurm: Path, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    spec = {"command": ["true"], "working_dir": str(shared_dir)}
    status, sweep = http_as(slurm_daemon, alice, "POST", "/v1/jobs", [spec] * 40)
    assert status == 201, sweep
    hers = {job["id"] for job in sweep["jobs"]}
    his = submit_as(slurm_daemon, bob, spec)["id"]

    # tq-bob's job is handed over while tq-alice's sweep still is.
    wait_for(lambda: his in handed(slurm_daemon), timeout=10, interval=0.02)
    assert not hers <= handed(slurm_daemon)
    wait_for(lambda: hers <= handed(slurm_daemon), timeout=60, interval=0.1)
    peaks = [int(n) for n in (fake_slurm / "peaks").read_text().split()]
    assert len(peaks) == 41
    assert max(peaks) <= HANDOFFS_PER_USER + 1, peaks  # hers, and his one
    assert trainq_as(slurm_daemon, bob, "health").returncode == 0


def test_following_many_slurm_jobs_fits_the_kernels_argument_limit(
    fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One user's sweeps, handed over and queued in Slurm, are 30,000 ids: as one `--jobs=`
    argument that is past the kernel's 128 KiB for one argument, squeue could not even be
    started, and no user's Slurm job would be followed again."""
    monkeypatch.setenv("PATH", f"{fake_slurm / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    backend = SlurmBackend.__new__(SlurmBackend)  # asking Slurm needs none of its state
    backend._command_timeout = 60.0
    ids = list(range(10_000_000, 10_030_000))
    states = anyio.run(backend._slurm_states, ids)
    assert states == dict.fromkeys(ids, "RUNNING")
