"""Children trainqd (and a monitor) waits for end at their deadline, process group and all.

Real processes: a child that ends in time is answered with its output and status; one that
sleeps, one that SIGSTOPs itself and one whose grandchild holds its pipes open are killed at
the deadline, every process of their group with them, and the wait ends with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import psutil
import pytest

from tests.support.waiting import wait_for
from trainqd.children import ChildTimedOut, run_child
from trainqd.monitor.container import run_bounded


def _run(code: str, deadline: float) -> tuple[int, bytes, bytes]:
    async def go() -> tuple[int, bytes, bytes]:
        done = await run_child([sys.executable, "-c", code], deadline=deadline, input=b"in")
        return done.returncode, done.stdout, done.stderr

    return anyio.run(go)


def _alive_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if marker in (proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def test_a_child_in_time_gives_its_output_and_status() -> None:
    code = "import sys; sys.stdout.write(sys.stdin.read()); sys.stderr.write('err'); sys.exit(3)"
    assert _run(code, 30) == (3, b"in", b"err")


@pytest.mark.parametrize(
    "code",
    [
        "import time; time.sleep(600)",
        "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)",
        # Its grandchild keeps the pipes open after the child itself has exited.
        "import subprocess, sys; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]])",
    ],
    ids=["sleeps", "stops-itself", "leaves-a-grandchild"],
)
def test_a_child_past_its_deadline_is_killed_with_its_group(code: str) -> None:
    marker = f"trainq-test-child-{os.getpid()}-{id(code)}"

    async def go() -> None:
        with pytest.raises(ChildTimedOut) as failure:
            await run_child([sys.executable, "-c", code, marker], deadline=2, what="the check")
        assert str(failure.value) == "the check did not finish within 2 s and was stopped"

    anyio.run(go)
    wait_for(lambda: not _alive_with(marker), timeout=10, what="the child's group to be gone")


def test_an_engine_command_past_its_deadline_is_killed_with_its_group() -> None:
    """The monitor's engine commands (inspect, rm) and trainqd's removal of a lost attempt's
    container: standard library, blocking, the same rule."""
    marker = f"trainq-test-engine-{os.getpid()}"
    code = (
        "import subprocess, sys; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]])"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded([sys.executable, "-c", code, marker], None, 2)
    wait_for(lambda: not _alive_with(marker), timeout=10, what="the command's group to be gone")
