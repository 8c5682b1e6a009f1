"""The chaos soak's users acting on trainqd: one agent process per real unix user (the
accounts of tests/support/accounts.py), so trainqd learns who asks from the kernel
(SO_PEERCRED) as in production.

The agent is the system interpreter with the standard library alone: it reads one request a
line ({"method", "path", "body"}), makes it on a fresh connection and answers one line:
{"status", "body"}, or {"status": 0, "error"} when trainqd did not answer (it was killed
mid-request, or is down), which is exactly a submission that was not acknowledged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.accounts import User
from tests.support.daemon import SYSTEM_PYTHON
from tests.support.users import unix_connection_source

_AGENT = (
    unix_connection_source(60)
    + """
for line in sys.stdin:
    request = json.loads(line)
    body = request.get("body")
    connection = UnixConnection("trainq")
    try:
        connection.request(request["method"], request["path"],
                           body=None if body is None else json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = {"status": response.status, "body": response.read().decode()}
    except (OSError, http.client.HTTPException) as error:
        answer = {"status": 0, "error": repr(error)}
    finally:
        connection.close()
    print(json.dumps(answer), flush=True)
"""
)


class Answer:
    def __init__(self, status: int, body: Any, error: str = "") -> None:
        self.status = status
        self.body = body
        self.error = error

    def __repr__(self) -> str:
        return f"{self.status} {self.error or str(self.body)[:200]}"


class Agent:
    """Makes requests as `user` to the trainqd on `socket`."""

    def __init__(self, user: User, socket: Path) -> None:
        self.user = user
        self.proc = user.popen(
            [SYSTEM_PYTHON, "-I", "-c", _AGENT, str(socket)],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, method: str, path: str, body: Any = None) -> None:
        """Begin a request; `receive` reads its answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"method": method, "path": path, "body": body}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Answer:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the agent of {self.user.name} exited")
        answer = json.loads(line)
        text = answer.get("body") or ""
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = text
        return Answer(int(answer["status"]), body, answer.get("error", ""))

    def ask(self, method: str, path: str, body: Any = None) -> Answer:
        self.send(method, path, body)
        return self.receive()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
