"""A personal trainqd (a user's own, not root) cannot give a job of several nodes a network
of its own: its nodes share the host's, each on a loopback address of its attempt's block,
with the block's ports for the masters (attempts/loopback.py). Two jobs running at once never
share a block, whatever their ids: here two jobs whose ids would have mapped to the same
addresses and the same master port both run, every node binding the same port on its own
address and each master its port on every address, as torch's store does."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import SYSTEM_PYTHON, Daemon, scratch_dir, supervised
from tests.support.users import submit_as, trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

# Every node: the same port on its own address; the first node also the job's master port
# on every address. Then it says so and serves until stopped.
BIND = """
import os, socket
def bound(address, port):
    s = socket.socket()
    s.bind((address, port))
    s.listen()
    return s
address, master = os.environ["TRAINQ_NODE_ADDRESS"], int(os.environ["MASTER_PORT"])
keep = [bound(address, 19999)]
if os.environ["TRAINQ_NODE_RANK"] == "0":
    keep.append(bound("", master))
with open(os.path.join(os.environ["SM_MODEL_DIR"], "bound.tmp"), "w") as f:
    f.write(f"{address} {master}")
os.replace(f.name, os.path.join(os.environ["SM_MODEL_DIR"], "bound"))
while True:
    keep[0].accept()[0].close()
"""
# Ids this far apart gave the same loopback block (ids modulo 65,024) and master port (twice
# the id modulo 20,000) before blocks were allocated.
APART = 40_640_000


class PersonalDaemon(Daemon):
    """trainqd run by `user` in a directory of theirs: a personal trainqd."""

    def __init__(self, base: Path, user: User) -> None:
        super().__init__(base, gpus="fake:2", config={"default_stop_grace_seconds": 5})
        self.user = user
        for path in (base, self.config_file):
            os.chown(path, user.uid, user.gid)

    def start(self, wait: bool = True) -> Daemon:
        with self.log_file.open("ab") as log:
            os.chown(self.log_file, self.user.uid, self.user.gid)
            self.proc = self.user.popen(
                self.argv(), stdout=log, stderr=log, env=self.env, start_new_session=True
            )
        if wait:
            wait_for(self._healthy, timeout=15, what=f"trainqd to answer (log: {self.log()})")
        return self


@pytest.fixture
def personal(accounts: Accounts) -> Iterator[PersonalDaemon]:
    base = scratch_dir("tqp")
    with supervised(PersonalDaemon(base, accounts.alice), remove=base) as daemon:
        assert isinstance(daemon, PersonalDaemon)
        yield daemon


def bound(daemon: Daemon, job_id: int) -> list[str]:
    """What each node of the job said it bound, once all have."""
    files = [Path(n["job_dir"]) / "model" / "bound" for n in daemon.job(job_id)["nodes"]]

    def all_bound() -> list[str] | None:
        if daemon.job(job_id)["state"] != "RUNNING":
            raise AssertionError(f"job {job_id} ended: {daemon.job(job_id)}")
        return [f.read_text() for f in files] if all(f.exists() for f in files) else None

    said: list[str] = wait_for(all_bound, timeout=60, what=f"job {job_id}'s nodes to bind")
    return said


def advance_job_ids(daemon: PersonalDaemon, by: int) -> None:
    """The next job's id `by` past the last one's (as its owner: the files stay theirs)."""
    code = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]);"
        " db.execute(\"UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'jobs'\","
        " (int(sys.argv[2]),)); db.commit()"
    )
    done = daemon.user.run(
        [SYSTEM_PYTHON, "-c", code, str(daemon.state_dir / "trainq.db"), str(by)]
    )
    assert done.returncode == 0, done.stderr


def test_two_jobs_of_colliding_ids_run_at_once_each_on_its_own_addresses(
    personal: PersonalDaemon,
) -> None:
    alice = personal.user
    spec: dict[str, Any] = {
        "command": [SYSTEM_PYTHON, "-c", BIND],
        "instance_count": 2,
        "max_retries": 0,
        "working_dir": str(personal.base),
    }
    first = submit_as(personal, alice, spec)
    first_said = bound(personal, first["id"])
    # trainqd restarted meanwhile: the first job's block is still known to be taken.
    personal.stop()
    advance_job_ids(personal, APART - 1)
    personal.start()
    second = submit_as(personal, alice, spec)
    assert second["id"] == first["id"] + APART
    second_said = bound(personal, second["id"])

    first_addresses = {said.split()[0] for said in first_said}
    second_addresses = {said.split()[0] for said in second_said}
    assert len(first_addresses) == len(second_addresses) == 2
    assert first_addresses.isdisjoint(second_addresses)
    assert all(a.startswith("127.") for a in first_addresses | second_addresses)
    assert first_said[0].split()[1] != second_said[0].split()[1]  # the masters' ports
    assert personal.job(first["id"])["state"] == "RUNNING"

    for job in (first, second):
        assert trainq_as(personal, alice, "stop", str(job["id"])).returncode == 0
    for job in (first, second):
        assert personal.wait_state(job["id"], timeout=60)["state"] == "STOPPED"
