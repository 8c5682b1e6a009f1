"""The engine side of a container attempt: docker or podman, through their own CLI.

The trainer of a container attempt, from the monitor's point of view, is the attached
`ENGINE run ... IMAGE train` client: its exit status is the container's. Three statuses
are ambiguous: 125 (the engine failed), 126 (the command could not be invoked) and 127
(no such command) are what the engine says when the container never ran, but a trainer
may exit with them too. Only then is `ENGINE inspect` asked whether the container ever
started; 137 (128 + SIGKILL) is asked about too, since only inspect tells the kernel's
out-of-memory kill apart from any other SIGKILL.

Stopping is the engine's job (`ENGINE stop -t GRACE`: SIGTERM, the grace, SIGKILL inside
the container); the monitor keeps a backstop in case the engine hangs. After the exit
record is written the container is removed, a moment later and off trainqd's path:
attempts run without --rm so that inspect can still answer.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import time
from typing import TYPE_CHECKING

from trainq.core.outcomes import Ending, Outcome
from trainqd.monitor.records import ContainerLaunch

if TYPE_CHECKING:  # imported where used: only at the end of a container attempt
    import subprocess

# 125-127 from an engine that could not run the container, or from the trainer itself; and 1,
# which the docker CLI gives against podman's Docker-compatible service when the container
# cannot start. Only `inspect` can tell (did the container ever start?).
AMBIGUOUS_STATUSES = frozenset({1, 125, 126, 127})
KILLED_STATUS = 128 + 9  # what the client reports for a container killed by SIGKILL
INSPECTED_STATUSES = AMBIGUOUS_STATUSES | {KILLED_STATUS}

# After `ENGINE stop -t GRACE` the engine should be done within the grace; this much more
# and the monitor runs `ENGINE kill`, and as much again before it kills the client itself.
BACKSTOP_SECONDS = 5.0
INSPECT_TIMEOUT = 30.0
REMOVE_TIMEOUT = 60.0
# The removal waits this long: trainqd starts the next queued job within milliseconds of
# this one's end, and the engine's unmounting and deleting beside that start slows it down
# (2 cores, a queue of 1 s container jobs: from one job's end to the next one's trainer
# running, median 183 ms without the wait, 128 ms with it; bench/containers.py --queue).
REMOVE_DELAY = 0.5
# docker and podman both report the zero time for a container that never started.
_NEVER = "0001-01-01"
# Lines an engine prints on its way to an error: podman's logrus warnings (a pull's
# retries) and both engines' pull progress.
_CHATTER = re.compile(
    r'time="[^"]*" level=(debug|info|warning) |Trying to pull |Unable to find image '
)


class ContainerState:
    """What inspect says: did the container ever run, its exit code, was it OOM-killed."""

    __slots__ = ("exit_code", "oom_killed", "started")

    def __init__(self, started: bool, exit_code: int | None, oom_killed: bool) -> None:
        self.started = started
        self.exit_code = exit_code
        self.oom_killed = oom_killed


def stop_argv(c: ContainerLaunch, grace: float) -> list[str]:
    # Engines take whole seconds; rounding up never cuts a grace short.
    return [c.engine_path, "stop", "-t", str(max(0, math.ceil(grace))), c.name]


def kill_argv(c: ContainerLaunch) -> list[str]:
    return [c.engine_path, "kill", c.name]


def inspect_argv(c: ContainerLaunch) -> list[str]:
    return [c.engine_path, "inspect", "--type", "container", "--format", "{{json .State}}", c.name]


def remove_argv(c: ContainerLaunch) -> list[str]:
    return remove_argv_of(c.engine_path, c.name)


def remove_argv_of(engine_path: str, name: str) -> list[str]:
    # --volumes: the anonymous volumes of the image's VOLUMEs go with it (both engines),
    # or every run would leave one behind, out of reach of `trainq rm` and retention.
    return [engine_path, "rm", "--force", "--volumes", name]


def run_bounded(
    argv: list[str], env: dict[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """`argv`'s exit status and output, within `timeout` seconds: past it the command is
    killed with its whole process group (an engine's helpers too), then TimeoutExpired."""
    import subprocess  # noqa: PLC0415 (only at the end of a container attempt)

    with subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def parse_state(text: str) -> ContainerState | None:
    """The container's state from `inspect --format '{{json .State}}'`; None if unreadable."""
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    started_at = raw.get("StartedAt")
    started = isinstance(started_at, str) and bool(started_at) and not started_at.startswith(_NEVER)
    code = raw.get("ExitCode")
    return ContainerState(
        started=started,
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        oom_killed=raw.get("OOMKilled") is True,
    )


def resolve_exit(
    engine: str, status: int, state: ContainerState | None, tail: str | None
) -> Ending | None:
    """The ending that inspect's answer decides, for an exit status in INSPECTED_STATUSES;
    None when the status stands as the container's own (the usual rules then apply)."""
    if state is not None and state.oom_killed:
        code = state.exit_code if state.exit_code else status
        return Ending(
            Outcome.OOM_KILLED, code, None, "out of memory: the kernel killed the container"
        )
    if status not in AMBIGUOUS_STATUSES:
        return None
    if state is None or not state.started:
        said = _without_chatter(tail) or "no output"
        return Ending(
            Outcome.ENGINE_ERROR, status, None, f"{engine} failed (exit {status}): {said}"
        )
    return None


def _without_chatter(tail: str | None) -> str | None:
    """The engine's own words with its progress and retry lines left out (a failed pull
    prints three warnings before its error): what remains is the error."""
    if tail is None:
        return None
    lines = tail.splitlines()
    kept = [line for line in lines if not _CHATTER.match(line)]
    return "\n".join(kept or lines)


def inspect(c: ContainerLaunch, env: dict[str, str]) -> ContainerState | None:
    """Ask the engine about the container; None if it cannot say (or it does not exist)."""
    import subprocess  # noqa: PLC0415 (only at the end of a container attempt)

    try:
        done = run_bounded(inspect_argv(c), env, INSPECT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_state(done.stdout.decode("utf-8", "replace"))


def remove(c: ContainerLaunch, env: dict[str, str]) -> str | None:
    """`ENGINE rm --force --volumes NAME`, REMOVE_DELAY after it is called (by the monitor's
    detached child, once the exit record is written); a line for the log if it failed, else
    None."""
    time.sleep(REMOVE_DELAY)
    import subprocess  # noqa: PLC0415 (only at the end of a container attempt)

    try:
        done = run_bounded(remove_argv(c), env, REMOVE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot remove container {c.name}: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"cannot remove container {c.name}: {said[-1] if said else done.returncode}"
    return None
