"""One user cannot lock the others out of trainqd by holding connections.

tq-alice opens a thousand connections to the socket, as a hostile local user could: open
`GET /v1/events` streams, requests that stop halfway through their head (slowloris), and
keep-alive connections left idle after a request. While she holds them, tq-bob's `trainq ls`
and `trainq health` must be answered (not refused, not left hanging) and his job must run;
alice's connections beyond her share must be refused with a short `busy` answer (not hang,
not crash anything); and once she lets go, she is served again.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, trainer
from tests.support.users import SYSTEM_PYTHON, submit_as, trainq_as

pytestmark = pytest.mark.multiuser

CONNECTIONS = 1000
PER_USER = 64  # trainqd's default max_connections_per_user
STREAMS_PER_USER = 16  # trainqd's default max_streams_per_user
# Seconds after which another user's command counts as locked out (hanging), not slow: a
# bound on a hang, not a speed (a loaded machine may take a second or two).
LOCKED_OUT_AFTER = 20

# The attacker: standard library only, run with -I by the system's interpreter as alice. It
# opens the connections, reports what became of each as one JSON line, holds them until told
# to let go on stdin, then closes them all.
_FLOOD = r"""
import collections, json, resource, socket, sys, time

path, count = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
STREAM = b"GET /v1/events HTTP/1.1\r\nHost: trainq\r\n\r\n"
SLOW = b"GET /v1/health HTTP/1.1\r\nHost: trainq\r\nUser-Agent: sl"  # and nothing more
IDLE = b"GET /v1/health HTTP/1.1\r\nHost: trainq\r\n\r\n"
deadline = time.monotonic() + 40  # waits for answers stop here (a server that hangs)

def verdict(data):
    if not data:
        return "closed"
    line = data.split(b"\r\n", 1)[0]
    if line.startswith(b"HTTP/1.1 503") or line.startswith(b"HTTP/1.1 429"):
        return "busy" if b'"busy"' in data else "other:" + line.decode("latin-1")
    if line.startswith(b"HTTP/1.1 200"):
        return "ok"
    return "other:" + line.decode("latin-1")

def answer(sock):
    sock.settimeout(max(0.01, min(2.0, deadline - time.monotonic())))
    try:
        return verdict(sock.recv(65536))
    except socket.timeout:
        return "no answer"
    except OSError as exc:
        return "closed" if exc.errno in (104, 32) else "error:" + exc.__class__.__name__

held, outcomes = [], collections.Counter()
for i in range(count):
    kind = ("stream", "slow", "idle")[i % 3]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2)
    try:
        sock.connect(path)
    except OSError as exc:
        outcomes["connect " + (exc.__class__.__name__)] += 1
        sock.close()
        continue
    try:
        sock.sendall({"stream": STREAM, "slow": SLOW, "idle": IDLE}[kind])
    except OSError:
        pass
    first = answer(sock) if kind != "slow" else None
    held.append((kind, sock, first))

# What became of each, seen without waiting: a slow one refused at once has its 503 queued.
for kind, sock, first in held:
    if first is None:
        sock.setblocking(False)
        try:
            first = verdict(sock.recv(65536))
        except BlockingIOError:
            first = "pending"  # admitted, and its half-sent head is being waited for
        except OSError:
            first = "closed"
    outcomes[kind + " " + first] += 1
print(json.dumps(dict(outcomes)), flush=True)
sys.stdin.readline()
for _, sock, _ in held:
    sock.close()
print("released", flush=True)
"""


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"the flooding process said nothing within {timeout} s"
    return proc.stdout.readline()


@pytest.fixture
def flood(workstation: Daemon, accounts: Accounts) -> Iterator[tuple[subprocess.Popen[str], Any]]:
    alice = accounts.alice
    proc = alice.popen(
        [SYSTEM_PYTHON, "-I", "-c", _FLOOD, str(workstation.socket), str(CONNECTIONS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        outcomes = json.loads(_read_line(proc, 120))
        yield proc, outcomes
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def answered(daemon: Daemon, user: User, *args: str) -> None:
    done = trainq_as(daemon, user, *args, timeout=LOCKED_OUT_AFTER)
    assert done.returncode == 0, f"{user.name}'s trainq {' '.join(args)}: {done.stderr}"


def test_one_user_holding_a_thousand_connections_locks_nobody_out(
    workstation: Daemon, accounts: Accounts, flood: tuple[subprocess.Popen[str], Any]
) -> None:
    proc, outcomes = flood
    print("alice's connections:", outcomes)
    alice, bob = accounts.alice, accounts.bob

    # While alice holds everything she could get, bob is answered.
    for command in (("ls",), ("health",), ("ls", "--all"), ("health",)):
        answered(workstation, bob, *command)
    job = submit_as(workstation, bob, {"command": [sys.executable, trainer("exit_with.py"), "0"]})
    assert workstation.wait_state(job["id"], timeout=30)["state"] == "COMPLETED"

    # Her excess was refused with a short busy answer, never left hanging or broken.
    kinds = {"stream", "slow", "idle"}
    known = {f"{kind} {verdict}" for kind in kinds for verdict in ("ok", "busy", "pending")}
    # A half-sent head is cut off by the request timeout if the flood outlasts it; that slot
    # may then go to a later connection of hers.
    cut_off = outcomes.get("slow other:HTTP/1.1 408 Request Timeout", 0)
    assert set(outcomes) - {"slow other:HTTP/1.1 408 Request Timeout"} <= known, outcomes
    admitted = sum(n for key, n in outcomes.items() if not key.endswith(" busy"))
    assert admitted <= PER_USER + cut_off, outcomes
    assert outcomes.get("stream ok", 0) <= STREAMS_PER_USER, outcomes
    assert sum(n for key, n in outcomes.items() if key.endswith(" busy")) >= (
        CONNECTIONS - PER_USER - cut_off
    ), outcomes
    assert workstation.proc is not None
    assert workstation.proc.poll() is None, "trainqd died"

    # Once she lets go, she is served again.
    assert proc.stdin is not None
    proc.stdin.write("release\n")
    proc.stdin.flush()
    assert _read_line(proc, 30).strip() == "released"
    assert proc.wait(10) == 0
    done = trainq_as(workstation, alice, "health")
    assert done.returncode == 0, done.stderr
