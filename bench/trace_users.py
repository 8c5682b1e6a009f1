"""The trace benchmark's users: real unix accounts (one heavy, a few light), made for the
run and removed after it, and for each a submitting agent that runs as that user, so that
trainqd learns who submits from the kernel (SO_PEERCRED) exactly as in production.

The agent is the system interpreter with the standard library alone (the project's
interpreter may live where these users cannot enter): it reads one JSON spec a line, stamps
the time, POSTs it to /v1/jobs on a fresh connection and answers one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEAVY = "tqtrace-heavy"
LIGHT = [f"tqtrace-light{i}" for i in range(1, 5)]
COMMENT = "trainq trace benchmark user (bench/trace.py)"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable

_AGENT = """
import http.client, json, socket, sys, time

class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(sys.argv[1])

for line in sys.stdin:
    connection = UnixConnection("trainq")
    began = time.time()
    connection.request("POST", "/v1/jobs", body=line.encode(),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    print(json.dumps({"at": began, "status": response.status, "body": body}), flush=True)
"""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def accounts() -> Iterator[list[Account]]:
    """The heavy user first, then the light ones; those this run made are removed after."""
    made = []
    try:
        for name in [HEAVY, *LIGHT]:
            if not _exists(name):
                subprocess.run(
                    ["useradd", "--system", "--no-create-home", "--user-group",
                     "--shell", "/usr/sbin/nologin", "--comment", COMMENT, name],
                    check=True, capture_output=True,
                )  # fmt: skip
                made.append(name)
        yield [Account(n, pwd.getpwnam(n).pw_uid, pwd.getpwnam(n).pw_gid) for n in [HEAVY, *LIGHT]]
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False, capture_output=True)


class Agent:
    """Submits as `account` to the trainqd listening on `socket`."""

    def __init__(self, account: Account, socket: Path) -> None:
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, "-I", "-c", _AGENT, str(socket)],
            user=account.uid,
            group=account.gid,
            extra_groups=[],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def submit(self, spec: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """(when the request began, the job's record)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if answer["status"] != 201:
            raise RuntimeError(f"submit of {spec.get('name')}: {answer['status']} {answer['body']}")
        return float(answer["at"]), json.loads(answer["body"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)
