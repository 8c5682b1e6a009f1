"""A hostile user's text cannot act on another user's terminal: a job whose command line,
working directory, channel path, hyperparameters and failure reason carry escape
sequences (clear the screen, OSC 52 clipboard write, a C1 CSI, a right-to-left override)
is listed and shown to other users and to an admin with each control character escaped,
while `--json` stays the daemon's JSON and trainqd keeps serving everyone."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import SYSTEM_PYTHON, submit_as, trainq_as

pytestmark = pytest.mark.multiuser

HOSTILE = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b2J\u202eevil\x1b[8m\x7f"
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
FAIL_WITH = (
    "import os, sys; base = os.environ['SAGEMAKER_BASE_DIR']; "
    "open(os.path.join(base, 'output', 'failure'), 'w').write(sys.argv[1]); sys.exit(3)"
)


def test_escape_sequences_of_a_job_reach_no_other_terminal(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    workdir = shared_dir / f"run{HOSTILE}"
    data = shared_dir / f"data{HOSTILE}"
    for path in (workdir, data):
        path.mkdir()
        os.chown(path, accounts.alice.uid, accounts.alice.gid)
    spec = {
        "command": [SYSTEM_PYTHON, "-c", FAIL_WITH, HOSTILE],
        "working_dir": str(workdir),
        "channels": {"train": {"source": str(data)}},
        "hyperparameters": {"note": HOSTILE},
    }
    job = submit_as(workstation, accounts.alice, spec)
    assert workstation.wait_state(job["id"])["state"] == "FAILED"
    job_id = str(job["id"])

    for viewer in (accounts.bob, accounts.carol, accounts.alice):
        for command in (("ls", "--all"), ("ls", "--all", "--wide"), ("show", job_id)):
            seen = trainq_as(workstation, viewer, *command)
            assert seen.returncode == 0, seen.stderr
            assert job_id in seen.stdout
            assert not ACTIVE.search(seen.stdout), (viewer.name, command, seen.stdout)
            assert not ACTIVE.search(seen.stderr), (viewer.name, command)
        shown = trainq_as(workstation, viewer, "show", job_id).stdout
        assert "\\x1b[2J" in shown  # the escape is visible, as what it is
    # The admin sees the failure reason, escaped too.
    assert "\\u202eevil" in trainq_as(workstation, accounts.carol, "show", job_id).stdout

    raw = trainq_as(workstation, accounts.bob, "show", "--json", job_id)
    assert json.loads(raw.stdout)["spec"]["command"][-1] == HOSTILE  # JSON as sent
    # trainqd serves the others on.
    other = submit_as(workstation, accounts.bob, {"command": ["true"]})
    assert workstation.wait_state(other["id"])["state"] == "COMPLETED"
