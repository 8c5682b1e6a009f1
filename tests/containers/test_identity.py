"""Who a container runs as and what it can reach (issue 5, item 3): the submitting user by
default, so what it writes into the job dir is theirs; root inside only when root (or the
admin group) asks; the engine's default network, or none."""

from __future__ import annotations

import grp
import json
from pathlib import Path

import pytest

from tests.support.accounts import User
from tests.support.containers import SUBMITTER_GROUP, attempt_log, container_job
from tests.support.daemon import Daemon
from tests.support.users import http_as

pytestmark = pytest.mark.containers


def test_a_users_container_writes_files_they_own(podman_daemon: Daemon, submitter: User) -> None:
    status, job = http_as(podman_daemon, submitter, "POST", "/v1/jobs",
                             container_job("monitor_whoami.py"))  # fmt: skip
    assert status == 201, job
    assert job["owner"] == {"uid": submitter.uid, "user": submitter.name}
    done = podman_daemon.wait_state(job["id"])
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job["id"])
    data = Path(done["job_dir"]) / "output" / "data"
    uid, euid, suid, gid, egid, sgid, *groups = map(int, (data / "whoami").read_text().split())
    assert (uid, euid, suid) == (submitter.uid,) * 3
    assert (gid, egid, sgid) == (submitter.gid,) * 3
    assert grp.getgrnam(SUBMITTER_GROUP).gr_gid in groups  # their supplementary groups came
    assert 0 not in groups
    made = (data / "mine").stat()
    assert (made.st_uid, made.st_gid) == (submitter.uid, submitter.gid)


def test_run_as_root_is_refused_to_a_user(podman_daemon: Daemon, submitter: User) -> None:
    spec = container_job("monitor_whoami.py", run_as_root=True)
    status, answer = http_as(podman_daemon, submitter, "POST", "/v1/jobs", spec)
    assert status == 403, answer
    assert "run_as_root" in answer["error"]["message"]
    assert podman_daemon.get("/v1/jobs").json()["jobs"] == []  # nothing was queued


def test_run_as_root_is_allowed_to_root(podman_daemon: Daemon) -> None:
    job = podman_daemon.submit(container_job("monitor_whoami.py", run_as_root=True))
    done = podman_daemon.wait_state(job["id"])
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job["id"])
    data = Path(done["job_dir"]) / "output" / "data"
    assert (data / "whoami").read_text().split()[:6] == ["0"] * 6
    assert (data / "mine").stat().st_uid == 0


@pytest.mark.parametrize(
    ("network", "isolated"), [("none", True), (None, False)], ids=["none", "engine-default"]
)
def test_network_none_leaves_only_loopback(
    podman_daemon: Daemon, network: str | None, isolated: bool
) -> None:
    spec = container_job("container_network.py", network=network)
    job = podman_daemon.submit(spec)
    done = podman_daemon.wait_state(job["id"])
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job["id"])
    interfaces = json.loads(
        (Path(done["job_dir"]) / "output" / "data" / "interfaces.json").read_text()
    )
    if isolated:
        assert interfaces == ["lo"]
    else:
        assert "lo" in interfaces
        assert len(interfaces) > 1, interfaces  # the engine's default network: an interface
