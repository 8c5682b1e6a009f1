"""Children trainqd waits for, each with a deadline.

A child trainqd waits on (the submit-time path check, which runs as the submitter; Slurm's
commands, run as a job's owner) may be stopped or blocked by that user for as long as they
like. Each runs in a session of its own; past its deadline, or when the wait is cancelled
(a request whose client left, departure.py), its whole process group is killed and the
wait ends: with `ChildTimedOut`, one line, at the deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process

from trainq.core.errors import TrainqError

# How long a killed child is waited for; one stuck in the kernel (a hung NFS read) is left to
# be reaped whenever it dies, without holding the caller.
REAP_WAIT = 5.0
# What is kept of a child's stdout and of its stderr; the rest is read and dropped.
MAX_OUTPUT = 4 << 20


_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def module_child(module: str) -> list[str]:
    """The argv of a child that runs `trainqd.<module>.main()` in trainqd's interpreter,
    isolated from the environment and the caller's site (-S -I): what the children that
    drop to a user before anything else (path checks, snapshots, notifications, checkpoint
    copies) are started with."""
    return [
        sys.executable,
        "-S",
        "-I",
        "-c",
        f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); "
        f"from trainqd.{module} import main; main()",
    ]


class ChildTimedOut(Exception):
    """A child did not finish within its deadline and was killed, its process group too."""

    def __init__(self, what: str, deadline: float) -> None:
        super().__init__(f"{what} did not finish within {deadline:g} s and was stopped")
        self.what = what
        self.deadline = deadline


async def run_child(
    argv: Sequence[str],
    *,
    deadline: float,
    what: str | None = None,
    input: bytes = b"",
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    user: int | None = None,
    group: int | None = None,
    extra_groups: Sequence[int] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` to its end (its output collected, never an error for its exit status);
    ChildTimedOut after `deadline` seconds. Then, or when the caller is cancelled, the
    child's process group is killed first."""
    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
        user=user,
        group=group,
        extra_groups=extra_groups,
    )

    outcome: tuple[bytes, bytes, int] | None = None
    try:
        with anyio.move_on_after(deadline):
            outcome = await _communicate(process, input)
    finally:  # on a deadline, an error or a cancellation alike
        if outcome is None:
            # Even when the child itself has exited: what it left in its group holds the
            # pipes, and keeps the group's id from being reused.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        with anyio.move_on_after(REAP_WAIT, shield=True):
            await process.aclose()
    if outcome is None:
        raise ChildTimedOut(what or os.path.basename(argv[0]), deadline)
    stdout, stderr, status = outcome
    return subprocess.CompletedProcess(list(argv), status, stdout, stderr)


def child_failure(done: subprocess.CompletedProcess[bytes], doing: str) -> TrainqError:
    """The one-line error of a child that exited non-zero: the last line it wrote to stderr,
    or its exit status; `doing` is what trainqd could not do ("copy the job's source")."""
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return TrainqError(
        f"trainqd could not {doing}"
        + (f": {said[-1]}" if said else f" (exit status {done.returncode})")
    )


async def _communicate(process: Process, data: bytes) -> tuple[bytes, bytes, int]:
    out: list[bytes] = []
    err: list[bytes] = []

    async def feed() -> None:
        assert process.stdin is not None
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            if data:
                await process.stdin.send(data)
            await process.stdin.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        assert process.stdout is not None
        assert process.stderr is not None
        tg.start_soon(_drain, process.stdout, out)
        tg.start_soon(_drain, process.stderr, err)
    status = await process.wait()
    return b"".join(out), b"".join(err), status


async def _drain(stream: ByteReceiveStream, kept: list[bytes]) -> None:
    size = 0
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
        while True:
            chunk = await stream.receive()
            if size < MAX_OUTPUT:
                kept.append(chunk[: MAX_OUTPUT - size])
                size += len(kept[-1])
