"""trainqd's part in the attempts' cgroups (monitor/cgroup.py has the layout and the why).

At start-up trainqd makes its subtree, says once in its log if jobs cannot have cgroups
here (then each job is followed by its process tree alone, as docs/security.md says), and
removes the empty cgroups of attempts that ended while it was away.
"""

from __future__ import annotations

import contextlib
import os

import structlog

from trainqd.monitor import cgroup

log = structlog.get_logger("trainqd.cgroups")


def prepare(jobs_dir: str) -> str | None:
    """Make this trainqd's subtree of attempt cgroups; None, or why there is none."""
    if os.geteuid() != 0:
        return "trainqd does not run as root"
    try:
        tree = cgroup.subtree(jobs_dir)
        os.makedirs(tree, exist_ok=True)
    except cgroup.Unavailable as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot make a cgroup under the v2 tree: {exc.strerror or exc}"
    _remove_ended(tree)
    return None


def _remove_ended(tree: str) -> None:
    """Remove the cgroups of attempts that have ended: a monitor that ran as its job's owner
    could not remove its own, and trainqd may have been away when it ended; and a probe's
    that a fork server killed in its probe left."""
    with contextlib.suppress(OSError):
        for name in os.listdir(tree):
            if name.startswith((cgroup.ATTEMPT_PREFIX, cgroup.PROBE_PREFIX)):
                path = os.path.join(tree, name)
                if not cgroup.populated(path):  # a running attempt's monitor is inside
                    with contextlib.suppress(OSError):
                        os.rmdir(path)


def announce(jobs_dir: str) -> bool:
    """`prepare`, and one line in the log either way; whether attempts get cgroups."""
    problem = prepare(jobs_dir)
    if problem is None:
        log.info("each attempt runs in a cgroup of its own", subtree=cgroup.subtree(jobs_dir))
        return True
    log.warning(
        "attempts get no cgroup of their own: their processes are followed by the "
        "process tree alone, and one that leaves it can outlive its job",
        reason=problem,
    )
    return False


def release(jobs_dir: str) -> None:
    """At exit: remove the subtree if no attempt is left in it (running jobs keep it; their
    monitors are inside their own cgroups)."""
    try:
        tree = cgroup.subtree(jobs_dir)
    except cgroup.Unavailable:
        return
    _remove_ended(tree)
    with contextlib.suppress(OSError):
        os.rmdir(tree)
