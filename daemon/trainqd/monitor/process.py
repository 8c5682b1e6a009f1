"""Starting the monitor's children, and saying how a child ended.

Children are started with posix_spawn (vfork and exec in one call: no copy of the
monitor's memory, an exec failure comes back as an OSError), in a process group of their
own when asked, with every signal at its default disposition and none blocked: the
monitor itself ignores SIGINT and SIGHUP and catches others, and a child must inherit
none of that. The program is looked up in the child's own PATH, as a shell would.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Mapping, Sequence

_DEFAULT_SIGNALS = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}


def find_program(name: str, env: Mapping[str, str]) -> str:
    """The file `name` runs, looked up like execvp(3) does but in `env`'s PATH."""
    if "/" in name:
        return name
    denied = False
    for directory in os.get_exec_path(dict(env)):
        path = os.path.join(directory or ".", name)
        if os.path.isfile(path):
            if os.access(path, os.X_OK):
                return path
            denied = True
    code = errno.EACCES if denied else errno.ENOENT
    raise OSError(code, os.strerror(code), name)


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdout: int,
    stderr: int,
    own_group: bool,
) -> int:
    """Start `argv` with stdin on /dev/null and the given output descriptors; its pid.

    Descriptors other than 0, 1 and 2 are not inherited: everything the monitor opens is
    close-on-exec (Python's default).
    """
    if not argv:
        raise OSError(errno.ENOENT, "empty command")
    path = find_program(argv[0], env)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    args, environ = list(argv), dict(env)
    if own_group:
        return os.posix_spawn(
            path,
            args,
            environ,
            file_actions=actions,
            setpgroup=0,
            setsigmask=(),
            setsigdef=_DEFAULT_SIGNALS,
        )
    return os.posix_spawn(
        path, args, environ, file_actions=actions, setsigmask=(), setsigdef=_DEFAULT_SIGNALS
    )


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_status(status: int) -> str:
    """A wait status in words: "exited with status 3", "killed by SIGSEGV"."""
    if os.WIFSIGNALED(status):
        core = " (core dumped)" if os.WCOREDUMP(status) else ""
        return f"killed by {signal_name(os.WTERMSIG(status))}{core}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def exit_code_and_signal(status: int) -> tuple[int | None, int | None]:
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None


def spawn_beside(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Start a helper (an engine command) in its own group, its output discarded but for its
    errors (the monitor's log); its pid, for the caller to reap."""
    devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        return spawn(argv, env, stdout=devnull, stderr=2, own_group=True)
    finally:
        os.close(devnull)
