"""A trainer's metrics file cannot end trainqd's reading of everyone's metrics.

Every running job's `output/metrics.jsonl` is read by trainqd (metric_reading.py), and its
owner writes what they like there. A line of JSON nested deeper than Python's recursion
limit, or a number too large for a float, as a value or as the step, raised an error that
no reader expected: the metric watch ended, and trainqd with it. Each line must be skipped,
the next one read, and another user still served.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import http_as, submit_as, trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

# The hostile line, then an honest one, then wait to be stopped.
TRAINER = """
import os, sys, time
with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "metrics.jsonl"), "w") as f:
    f.write(sys.argv[1] + "\\n")
    f.write('{"step": 1, "honest": 0.5}\\n')
time.sleep(600)
"""


@pytest.mark.parametrize(
    "line",
    [
        "[" * 4000,  # nested past the recursion limit
        '{"step": 1, "loss": 1' + "0" * 400 + "}",  # an integer no float holds
        '{"step": 1' + "0" * 400 + ', "loss": 1}',  # the same as the step
    ],
    ids=["nested", "huge-value", "huge-step"],
)
def test_a_hostile_metrics_line_is_skipped(
    workstation: Daemon, accounts: Accounts, line: str
) -> None:
    job = submit_as(workstation, accounts.alice, {"command": [sys.executable, "-c", TRAINER, line]})

    def honest_point() -> Any:
        status, body = http_as(workstation, accounts.alice, "GET", f"/v1/jobs/{job['id']}/metrics")
        assert status == 200, body
        series = body["attempts"][0]["series"] if body["attempts"] else {}
        return series.get("honest")

    reported = wait_for(honest_point, timeout=30, what="the honest line read")
    assert reported["latest"] == [1.0, 0.5]
    # trainqd reads on, and serves another user.
    bob = submit_as(workstation, accounts.bob, {"command": ["true"]})
    assert workstation.wait_state(bob["id"], timeout=30)["state"] == "COMPLETED"
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0
    assert "Traceback" not in workstation.log()
    assert trainq_as(workstation, accounts.alice, "stop", str(job["id"])).returncode == 0
