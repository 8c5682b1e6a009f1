"""A job's metrics come from its output: only those who may read its logs (the owner, root,
admins) may read them. A hostile owner who points its metrics file at root's files through
a link learns nothing from trainqd, which reads as root; and trainqd serves on meanwhile."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import http_as, submit_as, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

# Reports one loss, then replaces its output directory and its stdout file (the one its
# monitor writes what it prints to) with links to root's files, and reports through them (as
# far as trainqd would follow).
TRAINER = """
import json, os, sys
base = os.environ["SAGEMAKER_BASE_DIR"]
print("loss=0.5", flush=True)
secret_dir, secret_log = sys.argv[1], sys.argv[2]
# Its stdout is a pipe to its monitor, which writes the file; where that lies is no secret.
job, attempt = os.environ["TRAINQ_JOB_ID"], os.environ["TRAINQ_ATTEMPT"]
stdout = os.path.join(sys.argv[3], job, "attempts", attempt, "stdout")
os.rename(os.path.join(base, "output"), os.path.join(base, "output.old"))
os.symlink(secret_dir, os.path.join(base, "output"))
os.unlink(stdout)
os.symlink(secret_log, stdout)
"""


def test_metrics_are_the_owners_and_links_reach_nothing(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, tmp_path: Path
) -> None:
    secret_dir = tmp_path / "root-only"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "metrics.jsonl").write_text('{"secret": 42}\n')
    secret_log = secret_dir / "log"
    secret_log.write_text("loss=42\n")
    os.chmod(tmp_path, 0o711)  # noqa: S103 (the users may pass through, not read)
    job = submit_as(
        workstation,
        accounts.alice,
        {
            "command": [
                *(sys.executable, "-c", TRAINER, str(secret_dir), str(secret_log)),
                str(workstation.state_dir / "jobs"),
            ],
            "metric_definitions": [{"name": "loss", "regex": r"loss=([0-9.]+)"}],
            "working_dir": str(shared_dir),
        },
    )
    job_id = job["id"]
    stdout = workstation.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "stdout"
    ended = workstation.wait_state(job_id)["state"]
    assert ended == "COMPLETED", (stdout.parent / "stderr").read_text(errors="replace")
    assert stdout.is_symlink()  # the attack took place

    refused = trainq_as(workstation, accounts.bob, "metrics", str(job_id))
    assert refused.returncode == ExitCode.FORBIDDEN
    assert refused.stderr == (
        f"trainq: job {job_id} belongs to tq-alice; only its owner or root or members of "
        "tq-admins may read the metrics of it\n"
    )
    status, _ = http_as(workstation, accounts.bob, "GET", f"/v1/jobs/{job_id}/metrics")
    assert status == 403

    status, body = http_as(workstation, accounts.alice, "GET", f"/v1/jobs/{job_id}/metrics")
    assert status == 200, body
    (attempt,) = body["attempts"]
    assert set(attempt["series"]) <= {"loss"}
    assert all(value != 42 for _, value in attempt["series"].get("loss", {}).get("points", []))
    shown = trainq_as(workstation, accounts.carol, "metrics", str(job_id))  # an admin
    assert shown.returncode == 0, shown.stderr
    assert "secret" not in shown.stdout
    assert workstation.get("/v1/health").status_code == 200
