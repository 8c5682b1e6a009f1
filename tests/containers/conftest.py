"""Fixtures of the container tests: a real podman (runc, tests/containers/containers.conf),
the test images that tests/containers/prepare builds, the real `docker` CLI against podman's
Docker-compatible service, and real trainqd daemons that run container jobs on them.

A machine without an engine fails these tests at setup with what to install; they are never
skipped. Container names are trainq-<job>-<attempt>, and every test daemon numbers its jobs
from 1: a session holds the engine alone (`engine_turn`, a machine-wide lock), and each
daemon fixture starts and ends with no trainq-* container on the machine.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import User
from tests.support.containers import (
    CONTAINERS_CONF,
    PREPARE,
    PREPARE_TIMEOUT,
    SUBMITTER,
    SUBMITTER_GROUP,
    DockerService,
    Engine,
    engine_daemon,
    engine_turn,
    install_hint,
)
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """podman, ready to run the test images (prepare makes it so), this session's alone
    (`engine_turn`); fails when it cannot be."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail(install_hint("podman is not installed"), pytrace=False)
    with engine_turn():
        found = _prepare(podman)
        yield found
        found.remove_job_containers()


def _prepare(podman: str) -> Engine:
    try:
        done = subprocess.run(
            [str(PREPARE)], capture_output=True, text=True, timeout=PREPARE_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"tests/containers/prepare took over {PREPARE_TIMEOUT} s", pytrace=False)
    if done.returncode != 0:
        pytest.fail(
            f"tests/containers/prepare failed (exit {done.returncode}):\n{done.stderr}",
            pytrace=False,
        )
    return Engine(podman, {"CONTAINERS_CONF": str(CONTAINERS_CONF)})


# -- podman's Docker-compatible service, for the docker CLI -------------------------------


@pytest.fixture(scope="session")
def docker_service(engine: Engine) -> Iterator[DockerService]:
    """`podman system service` on a private socket, and the docker CLI pointed at it."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.fail(install_hint("the docker CLI is not installed"), pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="tqdk", dir="/tmp"))
    socket_path = base / "docker.sock"
    log_path = base / "service.log"
    with log_path.open("wb") as log:
        service = subprocess.Popen(
            [engine.podman, "system", "service", "--time", "0", f"unix://{socket_path}"],
            env={**os.environ, **engine.env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    found = DockerService(docker, {**engine.env, "DOCKER_HOST": f"unix://{socket_path}"})

    def answers() -> bool:
        if service.poll() is not None:
            raise AssertionError(f"podman system service exited: {log_path.read_text()}")
        return socket_path.exists() and found.run("version").returncode == 0

    try:
        wait_for(answers, timeout=20, what="podman system service to answer the docker CLI")
        yield found
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.pid, signal.SIGTERM)
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait(10)
        shutil.rmtree(base, ignore_errors=True)


# -- trainqd with an engine ----------------------------------------------------------------


@pytest.fixture
def podman_daemon(engine: Engine) -> Iterator[Daemon]:
    """A real trainqd with two simulated GPUs whose container jobs run on podman."""
    with engine_daemon(engine, engine.env, "podman") as daemon:
        yield daemon


@pytest.fixture
def docker_daemon(engine: Engine, docker_service: DockerService) -> Iterator[Daemon]:
    """A real trainqd whose container jobs run through the docker CLI (on podman's service)."""
    with engine_daemon(engine, docker_service.env, "docker") as daemon:
        yield daemon


# -- a non-root submitter ------------------------------------------------------------------


@pytest.fixture(scope="session")
def submitter() -> User:
    """tq-cuser, an ordinary user who is also in the group tq-cgroup: made once (useradd,
    groupadd) and kept, so that any number of sessions can use them."""
    try:
        pwd.getpwnam(SUBMITTER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--comment", "trainq container tests", SUBMITTER],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        # 9: made meanwhile by another session.
        assert done.returncode in (0, 9), done.stderr
    try:
        extra = grp.getgrnam(SUBMITTER_GROUP)
    except KeyError:
        done = subprocess.run(["groupadd", SUBMITTER_GROUP], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode in (0, 9), done.stderr
        extra = grp.getgrnam(SUBMITTER_GROUP)
    if SUBMITTER not in extra.gr_mem:
        done = subprocess.run(["usermod", "--append", "--groups", SUBMITTER_GROUP, SUBMITTER],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return User.lookup(SUBMITTER)
