"""`private_data = true`: other users learn that a job exists, whose it is, its state and the
GPUs it asks for, and nothing of what it runs (its name, command line, working directory,
channel paths and names, hyperparameters and environment), in every answer of the API and
every view of the CLI, as Slurm's `PrivateData=jobs`. Its owner and the admins see it
whole. Without the setting, the command line stays visible to everyone."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import SYSTEM_PYTHON, http_as, submit_as, trainq_as

pytestmark = pytest.mark.multiuser


@pytest.fixture
def private_workstation(accounts: Accounts) -> Iterator[Daemon]:
    config = {"admin_group": ADMINS, "default_stop_grace_seconds": 5, "private_data": True}
    with running_daemon(gpus="fake:4", config=config) as daemon:
        yield daemon


def identifying_job(daemon: Daemon, accounts: Accounts, shared_dir: Path) -> tuple[int, str]:
    """A finished job of alice's whose every identifying field carries one marker."""
    marker = f"proj{uuid.uuid4().hex[:12]}"
    workdir, data = shared_dir / f"{marker}-run", shared_dir / f"{marker}-data"
    for path in (workdir, data):
        path.mkdir()
        os.chown(path, accounts.alice.uid, accounts.alice.gid)
    spec = {
        "name": f"{marker}-name",
        "command": [SYSTEM_PYTHON, "-c", "pass", f"--{marker}"],
        "working_dir": str(workdir),
        "channels": {f"{marker}ch": {"source": str(data)}},
        "hyperparameters": {f"{marker}_hp": "1"},
        "environment": {f"{marker.upper()}_ENV": "1"},
        "metric_definitions": [{"name": f"{marker}_f1", "regex": f"{marker} f1=([0-9.]+)"}],
    }
    job = submit_as(daemon, accounts.alice, spec)
    assert daemon.wait_state(job["id"])["state"] == "COMPLETED"
    return job["id"], marker


VIEWS = (("ls", "--all"), ("ls", "--all", "--wide"), ("ls", "--all", "--json"))


def test_other_users_see_nothing_of_what_a_job_runs(
    private_workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    daemon = private_workstation
    job_id, marker = identifying_job(daemon, accounts, shared_dir)
    for command in (*VIEWS, ("show", str(job_id)), ("show", "--json", str(job_id))):
        seen = trainq_as(daemon, accounts.bob, *command)
        assert seen.returncode == 0, seen.stderr
        assert str(job_id) in seen.stdout
        assert marker not in seen.stdout, command
        assert marker.upper() not in seen.stdout, command
    for path in ("/v1/jobs?all=true", f"/v1/jobs/{job_id}", f"/v1/jobs?group={job_id}"):
        status, body = http_as(daemon, accounts.bob, "GET", path)
        assert status == 200, body
        assert marker not in json.dumps(body).lower(), path
    # What stays: that it exists, whose it is, how it ended and what it asked of the host.
    shown = json.loads(trainq_as(daemon, accounts.bob, "show", "--json", str(job_id)).stdout)
    assert (shown["owner"]["user"], shown["state"]) == (accounts.alice.name, "COMPLETED")
    assert shown["name"] == f"job-{job_id}"
    assert shown["spec"]["command"] == ["<hidden>"]
    assert shown["spec"]["gpus"] == 0

    # Nor can a copy of it tell what it runs.
    for command in (("submit", "--like", str(job_id)), ("export", str(job_id), "--to", "slurm")):
        copied = trainq_as(daemon, accounts.bob, *command)
        assert copied.returncode == 2, copied.stdout
        assert "hidden from you" in copied.stderr
        assert marker not in copied.stdout + copied.stderr
    # The owner and an admin see it whole.
    for viewer in (accounts.alice, accounts.carol):
        whole = trainq_as(daemon, viewer, "show", "--json", str(job_id))
        assert f"--{marker}" in whole.stdout
        assert str(shared_dir / f"{marker}-data") in whole.stdout
    # trainqd serves bob's own work on, whole to him.
    own = submit_as(daemon, accounts.bob, {"command": ["true"], "name": "bobs"})
    assert daemon.wait_state(own["id"])["state"] == "COMPLETED"
    mine = json.loads(trainq_as(daemon, accounts.bob, "show", "--json", str(own["id"])).stdout)
    assert (mine["name"], mine["spec"]["command"]) == ("bobs", ["true"])


def test_without_private_data_command_lines_are_shared(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    job_id, marker = identifying_job(workstation, accounts, shared_dir)
    seen = trainq_as(workstation, accounts.bob, "show", "--json", str(job_id))
    assert f"--{marker}" in seen.stdout


def test_other_users_see_nothing_of_what_an_instance_group_runs(
    private_workstation: Daemon, accounts: Accounts
) -> None:
    daemon = private_workstation
    marker = f"proj{uuid.uuid4().hex[:12]}"
    groups = [
        {
            "name": f"{marker}-servers",
            "instance_count": 1,
            "command": [SYSTEM_PYTHON, "-c", "pass", f"--{marker}"],
            "environment": {f"{marker.upper()}_ENV": "1"},
        },
        {"name": "workers", "instance_count": 1, "primary": True},
    ]
    spec = {"command": [SYSTEM_PYTHON, "-c", "pass"], "instance_groups": groups}
    job = submit_as(daemon, accounts.alice, spec)
    assert daemon.wait_state(job["id"], timeout=60)["state"] == "COMPLETED"
    for command in (*VIEWS, ("show", str(job["id"])), ("show", "--json", str(job["id"]))):
        seen = trainq_as(daemon, accounts.bob, *command)
        assert seen.returncode == 0, seen.stderr
        assert marker not in seen.stdout.lower(), command
    status, body = http_as(daemon, accounts.bob, "GET", f"/v1/jobs/{job['id']}")
    assert status == 200, body
    assert marker not in json.dumps(body).lower()
    assert [node["name"] for node in body["nodes"]] == ["algo-1", "algo-2"]  # the layout stays
    whole = trainq_as(daemon, accounts.alice, "show", "--json", str(job["id"]))
    assert f"--{marker}" in whole.stdout  # the owner sees it whole
    assert trainq_as(daemon, accounts.bob, "ls").returncode == 0  # and trainqd serves bob
