"""SageMaker's fixed places in a subprocess job: the job's ml root at /opt/ml and its host
name (`algo-1`, resourceconfig.json's current_host) resolving, in a private mount namespace
the root monitor makes before it becomes the job's owner. The host sees none of it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, python_job, trainer
from tests.support.users import submit_as, trainq_as

pytestmark = pytest.mark.multiuser


def paths_of(job: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        (Path(job["job_dir"]) / "output" / "data" / "paths.json").read_text()
    )
    return report


def sagemaker_mounts() -> list[str]:
    """The host's mounts on /etc/hosts or /opt/ml (a machine may well have the former)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if line.split()[4] in ("/etc/hosts", "/opt/ml")]


def test_opt_ml_and_algo_1_inside_a_subprocess_job(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    hosts_before = Path("/etc/hosts").read_bytes()
    mounts_before = sagemaker_mounts()
    alice = accounts.alice
    job = submit_as(
        workstation, alice, python_job("sagemaker_paths.py", working_dir=str(shared_dir))
    )
    done = workstation.wait_state(job["id"], timeout=30)
    assert done["state"] == "COMPLETED", trainq_as(workstation, alice, "logs", str(job["id"]))
    ml_root = Path(done["job_dir"])

    # What the trainer wrote at /opt/ml is in the job's ml root, and is alice's.
    written = ml_root / "checkpoints" / "x"
    assert written.read_text() == "attempt 1\n"
    assert written.stat().st_uid == alice.uid
    report = paths_of(done)
    assert report["config_via_opt_ml"]
    assert report["current_host"] == "algo-1"
    assert report["resolved"] == "127.0.0.1"
    assert report["getent"] == ["127.0.0.1", "algo-1"]
    # Its /etc/hosts is the host's with one line more.
    assert report["etc_hosts"].encode().startswith(hosts_before.rstrip(b"\n"))

    # The host is as it was: its /etc/hosts, and /opt/ml an empty mountpoint.
    assert Path("/etc/hosts").read_bytes() == hosts_before
    assert list(Path("/opt/ml").iterdir()) == []
    assert not Path("/opt/ml").is_mount()
    assert sagemaker_mounts() == mounts_before


def test_jobs_each_see_their_own_opt_ml(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    jobs = [
        submit_as(workstation, user, python_job("sagemaker_paths.py", working_dir=str(shared_dir)))
        for user in (accounts.alice, accounts.bob)
    ]
    for job, user in zip(jobs, (accounts.alice, accounts.bob), strict=True):
        done = workstation.wait_state(job["id"], timeout=30)
        assert done["state"] == "COMPLETED", done
        written = Path(done["job_dir"]) / "checkpoints" / "x"
        assert written.stat().st_uid == user.uid


def test_a_job_of_roots_finds_opt_ml_too(workstation: Daemon, shared_dir: Path) -> None:
    # A job of root's own, submitted with the CLI, finds /opt/ml too.
    result = workstation.cli(
        "submit", "--json", "--", sys.executable, trainer("sagemaker_paths.py"), cwd=shared_dir
    )
    assert result.returncode == 0, result.stderr
    done = workstation.wait_state(json.loads(result.stdout)["id"], timeout=30)
    assert done["state"] == "COMPLETED", done
    assert (Path(done["job_dir"]) / "checkpoints" / "x").exists()
