"""A job of several nodes of an ordinary user through trainqd's Slurm back end: every node
runs in Slurm as her, its output is hers and readable through trainq by her alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.test_nodes import SYSTEM_PYTHON, check_allreduce
from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, trainer
from tests.support.slurm import NODES, NODES_PARTITION, Slurm, slurm_job_of, slurm_trainqd
from tests.support.users import trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


@pytest.fixture
def daemon(slurm: Slurm, accounts: Accounts) -> Iterator[Daemon]:
    with slurm_trainqd(slurm, admin_group=ADMINS, slurm_partition=NODES_PARTITION) as d:
        yield d


def test_a_users_nodes_run_as_her_and_only_she_reads_their_logs(
    daemon: Daemon, slurm: Slurm, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    done = trainq_as(
        daemon, alice, "submit", "--nodes", str(NODES), "--max-retries", "0",
        "--", SYSTEM_PYTHON, trainer("torch_allreduce.py"),
        cwd=shared_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    slurm_id = slurm_job_of(daemon, job_id)
    waited = trainq_as(daemon, alice, "wait", str(job_id), timeout=180)
    job = daemon.job(job_id)
    assert waited.returncode == 0, (job, waited.stderr, daemon.log())
    fields = slurm.job_fields(slurm_id)
    assert fields.get("UserId") == f"{alice.name}({alice.uid})", fields
    assert fields.get("NumNodes") == str(NODES), fields

    attempt = daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1"
    for path in (attempt / "exit.json", *attempt.glob("nodes/algo-*/stdout")):
        assert path.stat().st_uid == alice.uid, path
    logs = []
    for node in range(1, NODES + 1):
        shown = trainq_as(daemon, alice, "logs", str(job_id), "--node", str(node))
        assert shown.returncode == 0, shown.stderr
        logs.append(shown.stdout)
    check_allreduce(logs)

    # Another user reads no node's output, in one line, and trainqd serves on.
    refused = trainq_as(daemon, bob, "logs", str(job_id), "--node", "2")
    assert refused.returncode == ExitCode.FORBIDDEN, (refused.stdout, refused.stderr)
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "algo-2" not in refused.stdout
    assert trainq_as(daemon, bob, "ls").returncode == 0
