"""A job's monitor: `python -S -I -c BOOT` (see spawn.py), the Launch as JSON on stdin; or,
with --fork-server, the server that forks monitors (forkserver.py).

stdin is a memfd that trainqd wrote the launch into; it is read to its end and replaced by
/dev/null, so no child of the monitor can read the launch (it holds the whole environment
of the job, and for a container job the engine's). stdout and stderr are monitor.log.
Exit status: 0 once the exit record is written, 1 after an internal error (a record that
says so is written all the same), 2 when the launch itself is unusable.
"""

from __future__ import annotations

import os
import sys

from trainqd.monitor.launched import run_from_stdin
from trainqd.monitor.profile import mark
from trainqd.monitor.spawn import FORK_SERVER_FLAG


def exit_now(status: int) -> None:
    """End the process at once. The exit record is on disk and every line of the log went
    out with its own write(2): the interpreter's orderly teardown (10-20 ms here) would only
    keep trainqd, which learns of the end from this process's exit, waiting."""
    mark("exit")
    os._exit(status)


def main() -> int:
    if FORK_SERVER_FLAG in sys.argv:
        from trainqd.monitor.forkserver import serve  # noqa: PLC0415 (the server only)

        return serve(0)
    return run_from_stdin()


if __name__ == "__main__":
    sys.exit(main())
