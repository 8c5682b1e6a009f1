"""Who may change a running job's time limit, with real users: its owner within the class's
maximum, an admin beyond it, nobody else (one line, exit 5, HTTP 403, the limit unchanged,
trainqd serving on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import http_as, one_line, start_sleeper, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

CONFIG = f"""
admin_group = "{ADMINS}"
default_stop_grace_seconds = 5
[classes.default]
max_runtime_seconds = 600
"""


@pytest.fixture
def limited(accounts: Accounts) -> Iterator[Daemon]:
    """trainqd as root whose one class runs jobs for at most 600 s."""
    with running_daemon(CONFIG, gpus="fake:2") as daemon:
        yield daemon


def limit_of(daemon: Daemon, job_id: int) -> int:
    return int(daemon.job(job_id)["spec"]["max_runtime_seconds"])


def test_the_owner_changes_her_running_jobs_limit_within_her_class(
    limited: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, carol = accounts.alice, accounts.carol
    job = start_sleeper(limited, alice, shared_dir, "--max-runtime", "300")["id"]
    done = trainq_as(limited, alice, "update", str(job), "--max-runtime", "600")
    assert (done.returncode, done.stdout) == (0, f"{job} updated: max_runtime_seconds=600\n")
    done = trainq_as(limited, alice, "update", str(job), "--max-runtime", "601")
    assert done.returncode == ExitCode.USAGE
    assert one_line(done.stderr) == (
        "trainq: class 'default' runs jobs for at most 600 s: "
        "set max_runtime_seconds (--max-runtime) to 600 or less\n"
    )
    assert limit_of(limited, job) == 600
    # An admin may go beyond the class's maximum.
    assert trainq_as(limited, carol, "update", str(job), "--max-runtime", "2h").returncode == 0
    assert limit_of(limited, job) == 7200
    assert limited.job(job)["state"] == "RUNNING"
    limited.cli("stop", "--grace", "0", str(job))


def test_another_user_cannot_change_a_running_jobs_limit(
    limited: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    job = start_sleeper(limited, alice, shared_dir, "--max-runtime", "300")["id"]
    done = trainq_as(limited, bob, "update", str(job), "--max-runtime", "1")
    assert done.returncode == ExitCode.FORBIDDEN
    assert one_line(done.stderr) == (
        f"trainq: job {job} belongs to tq-alice; only its owner or root or members of "
        f"{ADMINS} may change it\n"
    )
    status, body = http_as(limited, bob, "PATCH", f"/v1/jobs/{job}", {"max_runtime_seconds": 1})
    assert (status, body["error"]["code"]) == (403, "forbidden")
    # Nothing moved: the job runs on to its own limit, and trainqd serves both users.
    record = limited.job(job)
    assert (record["state"], record["spec"]["max_runtime_seconds"]) == ("RUNNING", 300)
    attempts = Path(record["job_dir"]).parent / "attempts"
    assert not (attempts / "1.deadline").exists()
    assert trainq_as(limited, bob, "health").returncode == 0
    assert trainq_as(limited, alice, "update", str(job), "--max-runtime", "200").returncode == 0
    limited.cli("stop", "--grace", "0", str(job))
