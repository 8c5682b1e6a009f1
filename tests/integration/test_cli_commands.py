"""Commands as a real `trainq` process against the API stub: Ctrl-C while waiting leaves the
job running, and a reader that goes away ends the command quietly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.apistub import RUNNING_JOB, ApiStub, Reply, Seen, events
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("cli_environment")


# --- real processes: Ctrl-C and a reader that goes away ---


# `python -m trainq`, with Ctrl-C as at a terminal even where these tests run with SIGINT
# ignored (a shell's background job), which the child would inherit and keep.
INTERRUPTIBLE_TRAINQ = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'trainq'; runpy.run_module('trainq', run_name='__main__', alter_sys=True)"
)


def trainq_process(stub: ApiStub, *argv: str, **popen: Any) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-c", INTERRUPTIBLE_TRAINQ, "--socket", stub.socket_path, *argv]
    return subprocess.Popen(command, stderr=subprocess.PIPE, **popen)


def test_ctrl_c_while_waiting_leaves_the_job_running(stub: ApiStub) -> None:
    hang_up = threading.Event()

    def live_events(_seen: Seen) -> Reply:
        def chunks() -> Iterator[bytes]:
            yield from events("RUNNING")
            hang_up.wait(10)

        return Reply(chunks=chunks())

    stub.on("GET", "/v1/jobs/5", Reply(body={**RUNNING_JOB, "state": "PENDING"}))
    stub.on("GET", "/v1/events", live_events)
    process = trainq_process(stub, "wait", "5", stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: stub.requests_to("/v1/events"), what="trainq to follow the events")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
    finally:
        hang_up.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert err.decode() in {
        # whether the RUNNING event had been read when the signal came
        "trainq: stopped waiting; job 5 (RUNNING) keeps running (`trainq stop 5` stops it)\n",
        "trainq: stopped waiting; job 5 (PENDING) keeps running (`trainq stop 5` stops it)\n",
    }


def test_a_closed_pipe_ends_quietly(stub: ApiStub) -> None:
    many = [{**RUNNING_JOB, "id": i} for i in range(1, 2000)]
    stub.on("GET", "/v1/jobs", Reply(body={"jobs": many}))
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -1` after its line
    try:
        process = trainq_process(stub, "ls", "--json", stdout=write_end)
    finally:
        os.close(write_end)
    _, err = process.communicate(timeout=20)
    assert (process.returncode, err) == (141, b"")
