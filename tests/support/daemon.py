"""A real trainqd for tests: started as its own process on a short socket path, talked to
with the real `trainq` command and with httpx, stopped (or killed, or restarted) for real."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.support.waiting import wait_for
from trainqd.monitor import cgroup, netns

BIN = Path(sys.executable).parent
TRAINQD = str(BIN / "trainqd")
TRAINQ = str(BIN / "trainq")
TRAINERS = Path(__file__).resolve().parents[1] / "trainers"
# The system's Python, for what other users run: readable by every user (the project's
# interpreter may live in a directory only root can enter), and a program a job's PATH finds.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
TERMINAL = {"COMPLETED", "FAILED", "STOPPED"}
CPU_SLOTS = 8  # a daemon's, unless its test sets them (the default is the machine's cores)


class Daemon:
    def __init__(
        self,
        base: Path,
        gpus: str = "fake:4",
        config: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.base = base
        self.socket = base / "s"
        self.state_dir = base / "state"
        self.config_file = base / "trainqd.toml"
        self.log_file = base / "trainqd.log"
        self.gpus = gpus
        self.env = {**os.environ, **(env or {})}
        self.env.pop("NOTIFY_SOCKET", None)
        # CPU slots enough for the tests' jobs of several CPU nodes whatever the cores.
        # A None drops a key: the daemon then takes its embedded default (the README's).
        config = {"cpu_slots": CPU_SLOTS, **(config or {})}
        config = {k: v for k, v in config.items() if v is not None}
        lines = [f"{k} = {json.dumps(v)}" for k, v in config.items()]
        self.config_file.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    # -- life ----------------------------------------------------------------------------

    def argv(self) -> list[str]:
        return [
            TRAINQD,
            "--socket",
            str(self.socket),
            "--state-dir",
            str(self.state_dir),
            "--gpus",
            self.gpus,
            "--config",
            str(self.config_file),
        ]

    def start(self, wait: bool = True) -> Daemon:
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            self.argv(), stdout=log, stderr=log, env=self.env, start_new_session=True
        )
        log.close()
        if wait:
            wait_for(self._healthy, timeout=15, what=f"trainqd to answer (log: {self.log()})")
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"trainqd exited with {self.proc.returncode}: {self.log()}")
        # A bare connect first: httpx leaks its socket when a connection is refused.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return self.get("/v1/health").status_code == 200

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.proc = None

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def restart(self) -> Daemon:
        self.stop()
        return self.start()

    def log(self) -> str:
        try:
            return self.log_file.read_text()[-4000:]
        except FileNotFoundError:
            return ""

    # -- talking to it -------------------------------------------------------------------

    def client(self) -> httpx.Client:
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket)),
            base_url="http://trainq",
            timeout=10,
        )

    def get(self, path: str, **kw: Any) -> httpx.Response:
        with self.client() as c:
            return c.get(path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        with self.client() as c:
            return c.post(path, **kw)

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def submit(self, spec: dict[str, Any], expect: int = 201) -> dict[str, Any]:
        response = self.post("/v1/jobs", json=spec)
        assert response.status_code == expect, response.text
        result: dict[str, Any] = response.json()
        return result

    def wait_state(self, job_id: int, *states: str, timeout: float = 20) -> dict[str, Any]:
        wanted = set(states) or TERMINAL

        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["state"] in wanted else None

        return wait_for(reached, timeout=timeout, what=f"job {job_id} to be {sorted(wanted)}")

    def cli(
        self,
        *args: str,
        input: str | None = None,
        user: int | None = None,
        cwd: Path | None = None,
        timeout: float = 30,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        groups: dict[str, Any] = {}
        if user is not None:  # the user's own groups, not the test runner's
            entry = pwd.getpwuid(user)
            groups = {
                "user": user,
                "group": entry.pw_gid,
                "extra_groups": os.getgrouplist(entry.pw_name, entry.pw_gid),
            }
        return subprocess.run(
            [TRAINQ, "--socket", str(self.socket), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            **groups,
            env={**self.env, **(env or {})},
            check=False,
        )


def scratch_dir(prefix: str = "tq") -> Path:
    """A short directory under /tmp (unix socket paths are short) others may enter."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(base, 0o755)  # noqa: S103 (jobs of other users must reach their dirs)
    return base


@contextlib.contextmanager
def supervised(daemon: Daemon, remove: Path | None = None) -> Iterator[Daemon]:
    """`daemon` started, then stopped with every job it left running, and `remove` gone."""
    try:
        yield daemon.start()
    finally:
        if daemon.proc is not None:
            daemon.stop()
        kill_all_jobs(daemon)
        if remove is not None:
            shutil.rmtree(remove, ignore_errors=True)


@contextlib.contextmanager
def running_daemon(toml: str | None = None, **kw: Any) -> Iterator[Daemon]:
    """A supervised trainqd in a scratch directory; `toml`: its whole config file."""
    base = scratch_dir()
    server = Daemon(base, **kw)
    if toml is not None:
        server.config_file.write_text(toml)
    with supervised(server, remove=base) as daemon:
        yield daemon


def kill_all_jobs(daemon: Daemon) -> None:
    """Whatever a test left running under this daemon's state dir dies with the test."""
    marker = str(daemon.state_dir)
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            env = (proc_dir / "environ").read_bytes()
            cmdline = (proc_dir / "cmdline").read_bytes()
        except OSError:
            continue
        try:
            log = os.readlink(proc_dir / "fd" / "2")  # a monitor's stderr is its monitor.log
        except OSError:
            log = ""
        if marker.encode() in env or marker.encode() in cmdline or log.startswith(marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc_dir.name), signal.SIGKILL)
    # The bridges of its jobs of several nodes (monitor/netns.py) whose monitors died here.
    jobs = daemon.state_dir / "jobs"
    for attempt in jobs.glob("*/attempts/*/nodes"):
        job_id, number = attempt.parent.parent.parent.name, attempt.parent.name
        if job_id.isdigit() and number.isdigit():
            netns.remove(netns.bridge_name(str(jobs), int(job_id), int(number)))
    # And what is left in its attempts' cgroups (a process that shed the marks), then those.
    with contextlib.suppress(cgroup.Unavailable, OSError):
        tree = cgroup.subtree(str(daemon.state_dir / "jobs"))
        for name in os.listdir(tree):
            path = os.path.join(tree, name)
            if os.path.isdir(path):
                cgroup.kill(path, 5)
                cgroup.remove(path)


def trainer(name: str) -> str:
    return str(TRAINERS / name)


def python_job(script: str, *args: str, **spec: Any) -> dict[str, Any]:
    return {"command": [sys.executable, trainer(script), *args], **spec}


def pids_alive(pids: Sequence[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def event_reasons(daemon: Daemon, job_id: int) -> list[str]:
    """The reasons of a job's event rows, oldest first, read from its state database."""
    db = sqlite3.connect(f"file:{daemon.state_dir / 'trainq.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT reason FROM events WHERE job_id=? ORDER BY id", (job_id,))
        return [str(reason) for (reason,) in rows]
    finally:
        db.close()
