"""A container job cannot make its user root on the host, and runs only the images the
administrator allows (docs/security.md, "Containers").

The attack: an image holding a setuid-root shell, run by an ordinary user; the trainer uses
that shell to copy a shell into /opt/ml/model, give it to root and set its setuid bit, so
that on the host `<state>/jobs/<id>/ml/model/rootbash -p` would be root. And an image the
user built as an `oci-archive:` tar, which the engine would read from the user's file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.containers import (
    IMAGE,
    Engine,
    attempt_log,
    container_job,
    engine_daemon,
)
from tests.support.daemon import Daemon
from tests.support.users import http_as, trainq_as

pytestmark = pytest.mark.containers

SETUID_IMAGE = "localhost/trainq-test:setuid"
NO_CAPABILITIES = "0000000000000000"


def attack(daemon: Daemon, user: User, data: Path) -> tuple[dict[str, Any], Path]:
    """Run the setuid attack as `user` with a File mode channel; (its report, the ml root)."""
    spec = container_job("setuid_attack.py", image=SETUID_IMAGE,
                         channels={"train": {"source": str(data)}})  # fmt: skip
    status, job = http_as(daemon, user, "POST", "/v1/jobs", spec)
    assert status == 201, job
    done = daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", attempt_log(daemon, job["id"])
    ml_root = Path(done["job_dir"])
    report = json.loads((ml_root / "output" / "data" / "attack.json").read_text())
    return report, ml_root


def root_setuid_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_mode & stat.S_ISUID:
            found.append(path)
    return found


@pytest.mark.parametrize("engine_name", ["podman", "docker"])
def test_a_setuid_root_image_gains_nothing_on_the_host(
    request: pytest.FixtureRequest,
    engine_name: str,
    submitter: User,
    accounts: Accounts,
    shared_dir: Path,
) -> None:
    daemon: Daemon = request.getfixturevalue(f"{engine_name}_daemon")
    data = shared_dir / "data"
    data.mkdir()
    (data / "x.csv").write_text("1,2\n")
    os.chown(data, submitter.uid, submitter.gid)

    report, ml_root = attack(daemon, submitter, data)

    # On the host: no root-owned setuid file, and nothing planted there makes anyone root.
    assert root_setuid_files(ml_root) == []
    for path in ml_root.rglob("*"):
        if path.is_file() and path.lstat().st_mode & stat.S_ISUID:
            ran = submitter.run([str(path), "-p", "-c", "id -u"])
            assert ran.stdout.strip() != "0", path

    # Inside: no privilege to gain, none to keep.
    status = report["status"]
    assert status["NoNewPrivs"] == "1", report
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == NO_CAPABILITIES, report
    assert report["euid_via_setuid_shell"]["stdout"].strip() == str(submitter.uid), report
    caps = report["caps_via_setuid_shell"]["stdout"].split()
    assert caps == ["CapPrm:", NO_CAPABILITIES, "CapEff:", NO_CAPABILITIES], report
    assert report["plant"]["status"] != 0, report
    assert report["setuid0"] != "ok", report
    # The ml root and the channel are nosuid and nodev in the container.
    mounts = report["mounts"]
    for where in ("/opt/ml", "/opt/ml/input/data/train"):
        assert {"nosuid", "nodev"} <= set(mounts[where]), mounts
    assert "ro" in mounts["/opt/ml/input/data/train"], mounts

    # trainqd goes on serving everyone else.
    listed = trainq_as(daemon, accounts.bob, "ls", "--all")
    assert listed.returncode == 0, listed.stderr
    assert trainq_as(daemon, accounts.bob, "health").returncode == 0


def test_an_archive_the_user_built_is_refused_in_one_line(
    podman_daemon: Daemon, engine: Engine, submitter: User, accounts: Accounts, shared_dir: Path
) -> None:
    archive = shared_dir / "mine.tar"
    saved = engine.run("save", "--format", "oci-archive", "--output", str(archive), SETUID_IMAGE,
                       timeout=120)  # fmt: skip
    assert saved.returncode == 0, saved.stderr
    os.chown(archive, submitter.uid, submitter.gid)

    for image in (f"oci-archive:{archive}", f"docker-archive:{archive}", f"dir:{shared_dir}"):
        done = trainq_as(podman_daemon, submitter, "submit", "--image", image, "--engine",
                         "podman", "--env", "TRAINER=exit_with.py", cwd=shared_dir)  # fmt: skip
        assert done.returncode == 5, (image, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert "transport" in done.stderr, done.stderr
    assert podman_daemon.get("/v1/jobs?all=true").json()["jobs"] == []  # nothing was queued

    # A local image still runs, and another user is served.
    status, job = http_as(podman_daemon, submitter, "POST", "/v1/jobs",
                          container_job("exit_with.py", "0"))  # fmt: skip
    assert status == 201, job
    assert podman_daemon.wait_state(job["id"], timeout=60)["state"] == "COMPLETED"
    assert trainq_as(podman_daemon, accounts.bob, "ls").returncode == 0


def test_only_the_images_the_administrator_allows_run(
    engine: Engine, submitter: User, accounts: Accounts
) -> None:
    with engine_daemon(engine, engine.env, "podman", allowed_images=[IMAGE]) as daemon:
        spec = container_job("setuid_attack.py", image=SETUID_IMAGE)
        status, answer = http_as(daemon, submitter, "POST", "/v1/jobs", spec)
        assert status == 403, answer
        assert "allowed_images" in answer["error"]["message"], answer
        status, job = http_as(daemon, submitter, "POST", "/v1/jobs",
                              container_job("exit_with.py", "0"))  # fmt: skip
        assert status == 201, job
        assert daemon.wait_state(job["id"], timeout=60)["state"] == "COMPLETED"
        assert trainq_as(daemon, accounts.bob, "ls").returncode == 0


def test_an_instance_groups_image_is_held_to_the_same_rule(
    engine: Engine, submitter: User, accounts: Accounts
) -> None:
    """A job of several nodes may give a group an image of its own: refused at submit as
    the job's own image would be, in one line, and nothing queued."""
    with engine_daemon(engine, engine.env, "podman", allowed_images=[IMAGE]) as daemon:
        spec = container_job("exit_with.py", "0", network=None)
        spec["instance_groups"] = [
            {"name": "workers", "instance_count": 1},
            {"name": "setuid", "instance_count": 1, "image": SETUID_IMAGE},
        ]
        status, answer = http_as(daemon, submitter, "POST", "/v1/jobs", spec)
        assert status == 403, answer
        assert "allowed_images" in answer["error"]["message"], answer
        assert "\n" not in answer["error"]["message"]
        assert daemon.get("/v1/jobs?all=true").json()["jobs"] == []  # nothing was queued
        assert trainq_as(daemon, accounts.bob, "ls").returncode == 0
