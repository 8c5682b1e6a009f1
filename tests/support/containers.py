"""What the container tests share: the engine and the docker CLI as the tests reach them, the
test images, container job specs, and a non-root submitter talking to trainqd."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, running_daemon
from tests.support.waiting import wait_for

HERE = Path(__file__).resolve().parents[1] / "containers"
PREPARE = HERE / "prepare"
CONTAINERS_CONF = HERE / "containers.conf"
IMAGE = "localhost/trainq-test:latest"
NO_ENTRYPOINT_IMAGE = "localhost/trainq-test:no-entrypoint"
TORCH_IMAGE = "localhost/trainq-test:torch"  # the trainers beside Debian's python3-torch
CONTAINER_PREFIX = "trainq-"
SUBMITTER = "tq-cuser"  # the non-root submitter of the ownership tests
SUBMITTER_GROUP = "tq-cgroup"  # a supplementary group of theirs
PREPARE_TIMEOUT = 900  # a first run on a fresh machine debootstraps the image's base
ENGINE_TIMEOUT = 60
# Container names are trainq-<job>-<attempt>, and every test daemon numbers its jobs from 1:
# two sessions at once (or a session and bench/containers.py, which takes it too) would
# take each other's names and remove each other's containers. They take turns on this lock.
ENGINE_LOCK = Path("/run/trainq-containers.lock")
ENGINE_LOCK_WAIT = 900
_turns_held = 0  # engine_turn's depth in this process


def install_hint(what: str) -> str:
    return (
        f"{what}: the container tests need a real engine and never skip. Run tests/run as "
        "root (it installs podman, runc and debootstrap, then runs tests/containers/prepare)"
    )


def container_job(trainer: str, *args: str, **spec: Any) -> dict[str, Any]:
    """A spec running tests/trainers/TRAINER with ARGS in the test image (whose entrypoint
    reads TRAINER and TRAINER_ARGS from the job's environment). Without a network unless
    `network` says otherwise (None: the engine's default): no test trainer needs one, and
    a container without one starts in half the time."""
    environment = {"TRAINER": trainer, "TRAINER_ARGS": " ".join(args)}
    environment.update(spec.pop("environment", {}))
    return {"image": IMAGE, "network": "none", "environment": environment, **spec}


def ml_path(daemon: Daemon, job_id: int, *parts: str) -> Path:
    """A path in the job's ml root on the host (what the trainer sees under /opt/ml)."""
    return Path(daemon.job(job_id)["job_dir"]).joinpath(*parts)


def attempt_log(daemon: Daemon, job_id: int, attempt: int = 1) -> str:
    """The attempt's stderr and monitor log, for assertion messages."""
    attempt_dir = daemon.state_dir / "jobs" / str(job_id) / "attempts" / str(attempt)
    texts = []
    for name in ("stderr", "monitor.log"):
        with contextlib.suppress(OSError):
            texts.append(f"--- {name}\n{(attempt_dir / name).read_text()[-2000:]}")
    return "\n".join(texts)


RELEASE = "/opt/ml/checkpoints/release"  # until_released.py ends once this exists


def running_container(daemon: Daemon, engine: Engine, job_id: int, attempt: int) -> str:
    """The name of the attempt's container, once its trainer runs (its pid file is taken
    away, so that the next attempt's start can be seen)."""
    pid_file = ml_path(daemon, job_id, "output", "data", "pid")
    wait_for(pid_file.exists, timeout=15, what=f"attempt {attempt} of job {job_id} to start")
    name = str(daemon.job(job_id)["attempts"][attempt - 1]["container"])
    state = engine.container_state(name)
    assert state is not None
    assert state["Running"] is True, state
    pid_file.unlink()  # so that the next attempt's start can be seen
    return name


@contextlib.contextmanager
def engine_turn() -> Iterator[None]:
    """Hold ENGINE_LOCK (exclusive) for as long as the block runs, once the session before
    has let go of it. Re-entrant within a process: tests/containers and tests/security each
    declare the session's engine fixture, and a second flock of this process's own would
    wait for the first forever."""
    global _turns_held  # noqa: PLW0603 (one count per process, as the lock is)
    if _turns_held:
        _turns_held += 1
        try:
            yield
        finally:
            _turns_held -= 1
        return
    fd = os.open(ENGINE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:

        def acquired() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        wait_for(acquired, timeout=ENGINE_LOCK_WAIT, interval=0.2,
                 what=f"another session to let go of {ENGINE_LOCK}")  # fmt: skip
        _turns_held = 1
        try:
            yield
        finally:
            _turns_held = 0
    finally:
        os.close(fd)


# -- the engine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """How the tests reach podman: its path and the environment it needs."""

    podman: str
    env: dict[str, str]  # added to trainqd's and every engine command's environment

    def run(self, *args: str, timeout: float = ENGINE_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.podman, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def job_containers(self, *, ended_only: bool = False) -> dict[str, dict[str, str]]:
        """Every container named trainq-* (or only those not running): name -> labels."""
        done = self.run("ps", "--all", "--filter", f"name=^{CONTAINER_PREFIX}", "--format", "json")
        assert done.returncode == 0, done.stderr
        found: dict[str, dict[str, str]] = {}
        for entry in json.loads(done.stdout or "[]"):
            if ended_only and entry.get("State") == "running":
                continue
            for name in entry.get("Names") or []:
                if name.startswith(CONTAINER_PREFIX):
                    found[name] = entry.get("Labels") or {}
        return found

    def container_state(self, name: str) -> dict[str, Any] | None:
        done = self.run("inspect", "--type", "container", "--format", "{{json .State}}", name)
        if done.returncode != 0:
            return None
        state: dict[str, Any] = json.loads(done.stdout)
        return state

    def remove_job_containers(self) -> None:
        """Remove every trainq-* container: a monitor's own removal may still be under way
        (it runs after the exit record), so give that a moment before forcing it."""
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not self.job_containers(), timeout=3, what="containers to go")
        names = list(self.job_containers())
        if names:
            done = self.run("rm", "--force", "--volumes", "--time", "0", *names)
            assert done.returncode == 0, done.stderr
        # And the networks of jobs of several nodes whose monitors a test killed.
        listed = self.run("network", "ls", "--format", "{{.Name}}").stdout.split()
        networks = [name for name in listed if name.startswith(CONTAINER_PREFIX)]
        if networks:
            self.run("network", "rm", "--force", *networks)
        remove_firewalls()


def firewall_tables() -> list[str]:
    """The names of the nftables tables of trainq's (monitor/enginewall.py): `inet trainq-*`."""
    listed = subprocess.run(
        ["nft", "list", "tables"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    words = [line.split() for line in listed.splitlines()]
    return [
        w[2] for w in words if len(w) == 3 and w[1] == "inet" and w[2].startswith(CONTAINER_PREFIX)
    ]


def remove_firewalls() -> None:
    """And the tables of those networks, a root's."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        return
    for name in firewall_tables():
        subprocess.run(["nft", "delete", "table", "inet", name], timeout=30, check=False)


@contextlib.contextmanager
def engine_daemon(
    engine: Engine, env: dict[str, str], default_engine: str, **config: Any
) -> Iterator[Daemon]:
    """trainqd with two simulated GPUs, `env` in its environment (the engine's settings) and
    `default_engine`; no trainq-* container exists before it starts or after it ends."""
    engine.remove_job_containers()
    settings = {"default_stop_grace_seconds": 5, "default_engine": default_engine, **config}
    try:
        with running_daemon(gpus="fake:2", config=settings, env=env) as daemon:
            yield daemon
            # The monitors of ended attempts remove their containers a moment after the end
            # (container.REMOVE_DELAY), in children that the daemon's teardown would kill.
            with contextlib.suppress(AssertionError):
                wait_for(lambda: not engine.job_containers(ended_only=True), timeout=5,
                         what="the monitors to remove their containers")  # fmt: skip
    finally:
        engine.remove_job_containers()


@dataclass(frozen=True)
class DockerService:
    docker: str  # the docker CLI
    env: dict[str, str]  # DOCKER_HOST (and the engine's settings, for the service's sake)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.docker, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=ENGINE_TIMEOUT,
            check=False,
        )
