"""Acting as one of the test users against a real trainqd: the real `trainq` command and
raw HTTP on the socket, each run in a process with that user's uid, gid and groups, so the
daemon learns who asks from the kernel (SO_PEERCRED) exactly as in production."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support.accounts import User
from tests.support.daemon import SYSTEM_PYTHON, TRAINQ, Daemon, trainer
from tests.support.waiting import wait_for

TRAINERS = Path(__file__).resolve().parents[1] / "multiuser" / "trainers"


def unix_connection_source(timeout: float) -> str:
    """The start of a client script run as a test user (standard library only, started with
    -I: nothing of the user's environment takes part): `UnixConnection`, http.client over
    the socket named by sys.argv[1], each read bounded by `timeout` seconds."""
    return f"""
import http.client, json, socket, sys

class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout({timeout})
        self.sock.connect(sys.argv[1])
"""


_HTTP_CLIENT = (
    unix_connection_source(10)
    + """
method, path, body = sys.argv[2], sys.argv[3], sys.stdin.read()
connection = UnixConnection("trainq")
headers = {"Content-Type": "application/json"} if body else {}
connection.request(method, path, body=body.encode() or None, headers=headers)
response = connection.getresponse()
print(json.dumps({"status": response.status, "body": response.read().decode()}))
"""
)


def trainq_as(
    daemon: Daemon, user: User, *args: str, cwd: Path | str = "/", timeout: float = 30
) -> Any:
    """`trainq --socket SOCK ARGS...` run by `user`; a CompletedProcess."""
    return user.run(
        [TRAINQ, "--socket", str(daemon.socket), *args],
        cwd=cwd,
        env=daemon.env,
        timeout=timeout,
    )


def http_as(
    daemon: Daemon, user: User, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """One API request made by `user`: (HTTP status, decoded JSON body)."""
    done = user.run(
        [SYSTEM_PYTHON, "-I", "-c", _HTTP_CLIENT, str(daemon.socket), method, path],
        input="" if body is None else json.dumps(body),
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    text = answer["body"]
    return answer["status"], json.loads(text) if text else None


def submit_as(daemon: Daemon, user: User, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit `spec` as `user` through the API; the job's record."""
    status, record = http_as(daemon, user, "POST", "/v1/jobs", spec)
    assert status == 201, record
    result: dict[str, Any] = record
    return result


def probe_trainer() -> str:
    return str(TRAINERS / "channel_probe.py")


def process_ids(pid: int) -> dict[str, list[int]]:
    """The Uid, Gid (real, effective, saved, filesystem) and Groups lines of a process."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int(v) for v in value.split()]
    return fields


def files_containing(root: Path, needle: bytes) -> list[Path]:
    """Every regular file under `root` whose bytes contain `needle` (links not followed)."""
    return [
        path
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes()
    ]


def one_line(stderr: str) -> str:
    """`stderr` itself, once it is checked to be one line of trainq's."""
    assert stderr.endswith("\n"), stderr
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("trainq: "), stderr
    return stderr


def start_sleeper(daemon: Daemon, user: User, cwd: Path, *args: str) -> dict[str, Any]:
    """A job of `user` whose trainer sleeps until stopped; its record once it is running."""
    done = trainq_as(
        daemon,
        user,
        "submit",
        "--json",
        *args,
        "--",
        sys.executable,
        trainer("sleeper.py"),
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    job: dict[str, Any] = json.loads(done.stdout)
    pid_file = Path(job["job_dir"]) / "output" / "data" / "pid"
    pid = wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=20)
    job["trainer_pid"] = int(pid)
    return job
