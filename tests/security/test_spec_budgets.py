"""A hostile user against trainqd's budgets: a spec with thousands of channels (each one a
bind mount in the host's mount table), of variables or of huge arguments, specs near a
megabyte each queued by the hundred. Each is refused with one line naming the limit,
nothing of the submission is queued, the byte budget holds under concurrent submissions
and across a restart, and the other users go on being served."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import http_as, trainq_as

pytestmark = pytest.mark.multiuser

BUDGET = 1024 * 1024  # bytes of specs one user's unfinished jobs may take, in these tests


@pytest.fixture
def drained(accounts: Accounts) -> Iterator[Daemon]:
    """A root trainqd, its host drained so that every job stays queued, with a small byte
    budget per user."""
    config = {
        "admin_group": ADMINS,
        "default_stop_grace_seconds": 1,
        "max_unfinished_spec_bytes_per_user": BUDGET,
    }
    with running_daemon(gpus="fake:4", config=config) as daemon:
        drain = daemon.cli("drain", "--reason", "these tests queue only")
        assert drain.returncode == 0, drain.stderr
        yield daemon


def queued(daemon: Daemon, owner: str) -> int:
    answer = daemon.get("/v1/jobs", params={"user": owner, "limit": 1000})
    assert answer.status_code == 200, answer.text
    return len(answer.json()["jobs"])


def job(cwd: Path, **spec: Any) -> dict[str, Any]:
    return {"command": ["true"], "working_dir": str(cwd), **spec}


def padded(cwd: Path, size: int) -> dict[str, Any]:
    """A job whose spec takes about `size` bytes as stored: variables of 60 KiB each."""
    chunk = 60 * 1024
    count, rest = divmod(size, chunk)
    env = {f"PAD_{n}": "x" * chunk for n in range(count)}
    if rest:
        env["PAD_REST"] = "x" * rest
    return job(cwd, environment=env)


def over_each_cap(cwd: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """A spec past each cap, with the words its refusal must have."""
    source = str(cwd)
    return {
        "channels": (
            job(cwd, channels={f"c{n}": {"source": source} for n in range(65)}),
            "65 channels; at most 64 are allowed (trainqd's max_channels_per_job)",
        ),
        "variables": (
            job(cwd, environment={f"V{n}": "1" for n in range(1001)}),
            "1001 environment variables; a job may set at most 1000",
        ),
        "argument": (
            job(cwd, command=["echo", "x" * (128 * 1024)]),
            "command argument 1 is longer than 131071 bytes",
        ),
        "spec size": (
            padded(cwd, 300 * 1024),
            "at most 262,144 are allowed (trainqd's max_spec_bytes)",
        ),
    }


@pytest.mark.parametrize("cap", ["channels", "variables", "argument", "spec size"])
def test_a_spec_over_each_cap_is_refused_in_one_line(
    drained: Daemon, accounts: Accounts, shared_dir: Path, cap: str
) -> None:
    """19,000 File-mode channels put 18,800 binds into the host's mount table; nothing
    bounded the channels, the variables, an argument or a spec's size. Past each cap, alone
    or in a sweep beside good specs, one line and nothing queued."""
    alice, bob = accounts.alice, accounts.bob
    spec, words = over_each_cap(shared_dir)[cap]
    status, body = http_as(drained, alice, "POST", "/v1/jobs", spec)
    assert (status, body["error"]["code"]) == (400, "invalid_spec"), body
    message = body["error"]["message"]
    assert words in message, message
    assert "\n" not in message
    status, body = http_as(drained, alice, "POST", "/v1/jobs", [job(shared_dir)] * 3 + [spec])
    assert (status, body["error"]["code"]) == (400, "invalid_spec"), body
    assert body["error"]["message"].startswith("jobs[3]: "), body
    assert words in body["error"]["message"], body
    assert queued(drained, "tq-alice") == 0

    status, body = http_as(drained, bob, "POST", "/v1/jobs", job(shared_dir))
    assert status == 201, body
    assert trainq_as(drained, bob, "ls").returncode == 0


def test_a_user_past_their_byte_budget_is_refused_while_another_submits(
    drained: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """The cap of 50,000 unfinished jobs let one user queue 75 GB of specs, all in trainqd's
    memory. Past the byte budget of a user's unfinished specs, a submission is refused with
    one line saying what is in use and the budget, nothing of it queued; exact under
    concurrent submissions, the same after a restart, and room again once jobs end."""
    alice, bob = accounts.alice, accounts.bob
    big = padded(shared_dir, 200 * 1024)
    status, body = http_as(drained, alice, "POST", "/v1/jobs", [big] * 4)  # ~800 KiB
    assert status == 201, body
    status, body = http_as(drained, alice, "POST", "/v1/jobs", [job(shared_dir)] + [big] * 2)
    assert (status, body["error"]["code"]) == (409, "conflict"), body
    message = body["error"]["message"]
    assert message.startswith("tq-alice's unfinished jobs take "), message
    assert "may take at most 1,048,576 (trainqd's max_unfinished_spec_bytes_per_user)" in message
    assert "\n" not in message
    assert queued(drained, "tq-alice") == 4

    # Ten at once, with room for one of them: one is queued, nine are refused.
    answers: list[int] = []

    def submit() -> None:
        answers.append(http_as(drained, alice, "POST", "/v1/jobs", padded(shared_dir, 150_000))[0])

    threads = [threading.Thread(target=submit) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201] + [409] * 9, answers
    assert queued(drained, "tq-alice") == 5

    # tq-bob has a budget of his own.
    status, body = http_as(drained, bob, "POST", "/v1/jobs", [big] * 4)
    assert status == 201, body
    assert trainq_as(drained, bob, "ls").returncode == 0

    # Counted from the store after a restart, and freed as her jobs end.
    drained.restart()
    status, body = http_as(drained, alice, "POST", "/v1/jobs", padded(shared_dir, 150_000))
    assert (status, body["error"]["code"]) == (409, "conflict"), body
    listed = drained.get("/v1/jobs", params={"user": "tq-alice"}).json()["jobs"]
    assert trainq_as(drained, alice, "stop", str(listed[0]["id"])).returncode == 0
    status, body = http_as(drained, alice, "POST", "/v1/jobs", padded(shared_dir, 150_000))
    assert status == 201, body
