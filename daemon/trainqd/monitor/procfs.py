"""Processes as /proc shows them: identity across pid reuse, trees, and killing a tree.

A pid number alone can come to mean another process once the first is reaped, so every
process is named here by (pid, start time in clock ticks since boot), and within one boot
that pair is unique. Signals go through a pidfd opened *before* the start time is checked
again: from then on the descriptor can only ever mean the process that was checked, so a
kill can never land on a stranger that reused the number.

Used by the monitor (standard library only) and by trainqd (re-attach, leftovers).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

# /proc/<pid>/stat, counting from 1 as proc(5) does; the fields after the command name.
_STATE, _PPID, _PGRP, _STARTTIME = 3, 4, 5, 22
_FIRST_AFTER_COMM = 3
_GONE_STATES = frozenset("ZXx")  # zombie or dead: nothing left to signal


class ProcStat:
    """The few fields of /proc/<pid>/stat that process supervision needs."""

    __slots__ = ("pgid", "pid", "ppid", "start_ticks", "state")

    def __init__(self, pid: int, state: str, ppid: int, pgid: int, start_ticks: int) -> None:
        self.pid = pid
        self.state = state
        self.ppid = ppid
        self.pgid = pgid
        self.start_ticks = start_ticks

    @property
    def alive(self) -> bool:
        """Running or sleeping, as opposed to a zombie waiting to be reaped."""
        return self.state not in _GONE_STATES


def parse_stat(pid: int, text: str) -> ProcStat:
    # The command name sits in parentheses and may itself hold spaces and ")", so the
    # fields are counted from the *last* ")".
    fields = text[text.rindex(")") + 2 :].split()

    def field(n: int) -> str:
        return fields[n - _FIRST_AFTER_COMM]

    return ProcStat(
        pid=pid,
        state=field(_STATE),
        ppid=int(field(_PPID)),
        pgid=int(field(_PGRP)),
        start_ticks=int(field(_STARTTIME)),
    )


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat fields, or None once it is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        return parse_stat(pid, text)
    except (ValueError, IndexError):
        return None


def boot_id() -> str:
    with open(BOOT_ID_PATH, encoding="utf-8") as f:
        return f.read().strip()


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot."""
    stat = read_stat(pid)
    return None if stat is None else stat.start_ticks


def is_same_process(pid: int, ticks: int, boot: str) -> bool:
    """True if `pid` is still the process that was recorded as (ticks, boot)."""
    try:
        if boot_id() != boot:
            return False
    except OSError:
        return False
    return start_ticks(pid) == ticks


def all_processes() -> list[ProcStat]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                found.append(stat)
    return found


def descendants(pid: int, *, include_zombies: bool = False) -> list[int]:
    """Every process below `pid` in the process tree (children, theirs, ...), as one
    snapshot of /proc. Zombies are left out unless asked for: there is nothing to kill."""
    return [stat.pid for stat in descendant_stats(pid, include_zombies=include_zombies)]


def descendant_stats(
    pid: int, *, include_zombies: bool = False, exclude: tuple[int, ...] = ()
) -> list[ProcStat]:
    """Like `descendants`, with the stat fields; the subtrees of `exclude` are left out."""
    children: dict[int, list[ProcStat]] = {}
    for stat in all_processes():
        children.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child in children.get(parent, ()):
            # A torn snapshot (pids reused while /proc was read) must not loop.
            if child.pid == pid or child.pid in exclude:
                continue
            frontier.append(child.pid)
            if include_zombies or child.alive:
                found.append(child)
    return found


def open_checked(pid: int, ticks: int) -> int | None:
    """A pidfd for `pid` if it is still the process that started at `ticks`, else None."""
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return None
    # Read after the pidfd exists, so the check and the descriptor name the same process.
    if start_ticks(pid) != ticks:
        os.close(pidfd)
        return None
    return pidfd


def signal_checked(pid: int, ticks: int, sig: int) -> int | None:
    """Send `sig` to `pid` if it is still the same process; return its pidfd (the caller
    closes it, and may wait on it), or None if it is gone or could not be signalled."""
    pidfd = open_checked(pid, ticks)
    if pidfd is None:
        return None
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except OSError:  # ESRCH (it exited meanwhile) or EPERM (a setuid program)
        os.close(pidfd)
        return None
    return pidfd


def wait_exited(pidfds: list[int], timeout: float) -> list[int]:
    """Wait until every process behind `pidfds` has exited (a pidfd turns readable then,
    reaped or not), or `timeout` seconds pass; return the pidfds still running."""
    pending = set(pidfds)
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd, _ in poller.poll(left * 1000):
            pending.discard(fd)
            poller.unregister(fd)
    return sorted(pending)


def kill_tree(
    root: int, *, term_wait: float, kill_wait: float, pgids: tuple[int, ...] = ()
) -> list[int]:
    """End every process below `root` (and in the process groups `pgids`): SIGTERM, up to
    `term_wait` seconds for them to go, then SIGKILL until none is left or `kill_wait`
    seconds pass. Processes forked meanwhile are found by the next sweep. Returns the pids
    that survived (a process stuck in the kernel, or one of another user), normally none.

    `root` itself is spared: the monitor passes its own pid. `term_wait=0` skips SIGTERM.
    """
    if term_wait > 0:
        found, pidfds = _signal_tree(root, signal.SIGTERM, pgids, ())
        if not found:  # the usual case: nothing is left, and nothing can fork any more
            return []
        _wait_and_close(pidfds, term_wait)
    deadline = time.monotonic() + kill_wait
    while True:
        found, pidfds = _signal_tree(root, signal.SIGKILL, pgids, ())
        left = deadline - time.monotonic()
        if not found or not pidfds or left <= 0:
            for fd in pidfds:
                os.close(fd)
            return found
        _wait_and_close(pidfds, left)


def signal_tree(
    root: int, sig: int, pgids: tuple[int, ...] = (), exclude: tuple[int, ...] = ()
) -> list[int]:
    """Send `sig` to the groups `pgids` and to every live process below `root` (but not
    into the subtrees of `exclude`); the pidfds of those signalled, for the caller to wait
    on and close."""
    return _signal_tree(root, sig, pgids, exclude)[1]


def _signal_tree(
    root: int, sig: int, pgids: tuple[int, ...], exclude: tuple[int, ...]
) -> tuple[list[int], list[int]]:
    """The pids found below `root`, and the pidfds of those that could be signalled."""
    tree = descendant_stats(root, exclude=exclude)
    # A group signal reaches every member at once, so none can fork away in between; the
    # per-process pass below covers those that left the group (setsid). A group is only
    # signalled while a process of ours still holds its number, so it cannot have been
    # handed to a stranger.
    held = {stat.pgid for stat in tree}
    for pgid in pgids:
        if pgid in held:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
    pidfds = []
    for stat in tree:
        pidfd = signal_checked(stat.pid, stat.start_ticks, sig)
        if pidfd is not None:
            pidfds.append(pidfd)
    return [stat.pid for stat in tree], pidfds


def _wait_and_close(pidfds: list[int], timeout: float) -> None:
    try:
        wait_exited(pidfds, timeout)
    finally:
        for fd in pidfds:
            os.close(fd)


def has_children() -> bool:
    """Whether the calling process has any child left (running, or exited and unreaped)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
