"""The monitor's forked helpers, which run Python code of trainq as the job's owner.

- the ml root's layout, for a container job, whose monitor stays root: a child becomes
  the owner, lays it out, and reports in one line if it could not;
- the Pipe mode feeder (trainqd.monitor.feed.feeder), which lives as long as the trainer and
  writes one line on a pipe if it fails.

They are forked before the trainer starts, while the monitor is single-threaded, and
exit with os._exit so nothing of the monitor (buffers, atexit hooks) runs twice. A child
puts every signal back to its default and unblocks them: it must not run the monitor's
handlers, nor write into the monitor's wakeup descriptor.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from trainqd.monitor.log import log_exception
from trainqd.monitor.owner import drop_to
from trainqd.monitor.records import Credentials, Launch

EXIT_FAILED = 1
_REPORT_BYTES = 4096


class Feeder:
    """The feeder child: its pid, the pipe it reports on, and how it ended."""

    def __init__(self, pid: int, report_fd: int) -> None:
        self.pid = pid
        self.report_fd = report_fd
        self.status: int | None = None
        self.handled = False


def _reset_signals() -> None:
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _report(fd: int, line: str) -> None:
    text = " ".join(line.split()) + "\n"
    with contextlib.suppress(OSError):
        os.write(fd, text.encode("utf-8", "replace")[:_REPORT_BYTES])


def _fork(body: Callable[[int], int]) -> tuple[int, int]:
    """Fork a child that runs `body(report_fd)` and exits with its result; (pid, read end)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, from here to os._exit
        code = EXIT_FAILED
        try:
            os.close(read_fd)
            _reset_signals()
            code = body(write_fd)
        except BaseException as exc:
            _report(write_fd, f"{type(exc).__name__}: {exc}")
            log_exception(exc)
        finally:
            os._exit(code)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return pid, read_fd


def read_report(fd: int) -> str | None:
    """The child's one line, if it wrote one (call once it has exited)."""
    try:
        data = os.read(fd, _REPORT_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _first_line(data)


def poll_report(fd: int) -> tuple[bool, str | None]:
    """(ended, line) from a live child's report pipe (non-blocking): its line as soon as it
    wrote one; ended when the pipe reached its end without one."""
    try:
        data = os.read(fd, _REPORT_BYTES)
    except BlockingIOError:
        return False, None
    except OSError:
        return True, None
    return not data, _first_line(data)


def _first_line(data: bytes) -> str | None:
    line = data.decode("utf-8", "replace").strip().split("\n", 1)[0].strip()
    return line or None


def prepare_as_owner(launch: Launch, owner: Credentials) -> str | None:
    """Lay out the ml root in a child that runs as `owner`; None, or what went wrong."""

    def body(report_fd: int) -> int:
        from trainqd.monitor.mlroot import prepare_ml_root  # noqa: PLC0415 (child only)

        drop_to(owner.uid, owner.gid, owner.groups)
        prepare_ml_root(launch)
        return 0

    pid, read_fd = _fork(body)
    _, status = os.waitpid(pid, 0)
    said = read_report(read_fd)
    if status == 0:
        return None
    return said or f"the child that prepares it ended with wait status {status}"


def load_feeder() -> None:
    """Import the feeder ahead of a privilege drop (the child would import it as the owner)."""
    import trainqd.monitor.feed.feeder  # noqa: F401, PLC0415


def start_feeder(launch: Launch, owner: Credentials | None) -> Feeder:
    """Fork the Pipe mode feeder; it drops to `owner` first unless that is None (the monitor
    already runs as the owner)."""

    def body(report_fd: int) -> int:
        # Imported in the child only: the feeder's threads and codecs stay out of the monitor.
        from trainqd.monitor.feed.feeder import run_feeder  # noqa: PLC0415

        if owner is not None:
            drop_to(owner.uid, owner.gid, owner.groups)
        return run_feeder(launch.ml_root, launch.pipe_channels, report_fd)

    pid, read_fd = _fork(body)
    return Feeder(pid, read_fd)
