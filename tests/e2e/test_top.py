"""`trainq top` in a real pseudo-terminal of 80 columns: it draws a busy fake-GPU host, follows
a change, and `q` ends it with status 0 and the terminal as it was."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

from tests.support.daemon import TRAINQ, Daemon, python_job
from tests.support.waiting import wait_for
from tests.support.watching import watched_daemon

BUSY = {"utilization": 87, "memory_used_mib": 20480, "power_watts": 300}
IDLE = {"utilization": 1, "memory_used_mib": 512}
# Cursor moves, colours, screen switches: what is left is the text on the screen.
_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
_CURSOR_MOVES = re.compile(rb"\x1b\[[0-9;]*[HfABCDG]")


class Terminal:
    def __init__(self, daemon: Daemon, *args: str, columns: int = 80, rows: int = 30) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.saved = termios.tcgetattr(slave)
        env = {**daemon.env, "TERM": "xterm-256color", "COLUMNS": str(columns)}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [TRAINQ, "--socket", str(daemon.socket), *(args or ("top",))],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        self.slave = slave
        self.output = b""

    def read(self) -> str:
        while select.select([self.master], [], [], 0.05)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the other side has closed
                break
            if not chunk:
                break
            self.output += chunk
        # A cursor move starts a new line of the screen; other escapes only paint.
        text = _CURSOR_MOVES.sub(b"\n", self.output)
        return _ESCAPES.sub(b"", text).decode(errors="replace")

    def shows(self, *words: str) -> bool:
        screen = self.read()
        return all(word in screen for word in words)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def test_top_shows_the_gpus_jobs_and_queue_and_q_quits() -> None:
    with watched_daemon([BUSY, BUSY, IDLE], idle_after_seconds=0.5) as (daemon, _):
        busy = daemon.submit({**python_job("sleeper.py", gpus=2), "name": "busy-train"})
        daemon.wait_state(busy["id"], "RUNNING")
        idle = daemon.submit({**python_job("sleeper.py", gpus=1), "name": "idle-train"})
        daemon.wait_state(idle["id"], "RUNNING")
        wait_for(lambda: daemon.job(idle["id"])["gpu_idle_since"], what="the idle flag")
        user = busy["owner"]["user"]
        term = Terminal(daemon)
        try:
            wait_for(
                lambda: term.shows("GPUs", "Running", "Queue", "busy-train", "idle-train", user),
                timeout=10,
                what="top to draw the GPUs and jobs",
            )
            screen = term.read()
            assert "87%" in screen  # the busy GPUs' utilization, from the fake file
            assert "IDLE" in screen
            assert "20.0G/79.6G" in screen  # memory used / total of a busy GPU

            # A new job waits for GPUs: the view follows the event stream and says why.
            queued = daemon.submit({**python_job("sleeper.py", gpus=2), "name": "waits"})
            wait_for(lambda: term.shows("waiting for 2 GPUs (0 free)"), timeout=10, what="why")
            started = time.monotonic()
            os.write(term.master, b"q")
            assert term.proc.wait(timeout=10) == 0
            assert time.monotonic() - started < 5
            # The terminal's modes are as they were before top ran (echo, line editing).
            assert termios.tcgetattr(term.slave)[3] == term.saved[3]
            lines = [line for line in term.read().splitlines() if line.strip()]
            assert max(len(line) for line in lines) <= 80
        finally:
            term.close()
        for job in (busy, idle, queued):
            daemon.cli("stop", "--grace", "0", str(job["id"]))
            daemon.wait_state(job["id"])


def test_wait_on_a_terminal_shows_state_changes_and_a_live_line() -> None:
    with watched_daemon([BUSY]) as (daemon, _):
        blocker = daemon.submit(python_job("sleeper.py", gpus=1))
        daemon.wait_state(blocker["id"], "RUNNING")
        term = Terminal(daemon, "submit", "--wait", "--gpus", "1", "--", "sleep", "3")
        try:
            wait_for(lambda: term.shows("1 of 1 in the queue"), timeout=10, what="the queue line")
            daemon.cli("stop", "--grace", "0", str(blocker["id"]))
            wait_for(lambda: term.shows(": PENDING -> RUNNING (attempt 1)"), what="the change")
            wait_for(lambda: term.shows("RUNNING, ", "GPUs 87%"), timeout=10, what="GPU use")
            assert term.proc.wait(timeout=20) == 0
            assert term.shows("RUNNING -> COMPLETED", "COMPLETED")
        finally:
            term.close()
