"""The loopback blocks of a personal trainqd's jobs of several nodes (README.md, "Several
nodes"). Its nodes share the host's network: each node listens on an address of its job's
block, 127.A.B.<rank + 1>, and the job's masters on its block's pair of ports
(attempts/nodes.py). Two jobs running at once must never share a block, whatever their ids:
an attempt gets one at its start, the first free one from its job's id on, kept beside its
stop file (`attempts/<n>.loopback`) so that a restarted trainqd still knows it is taken. It
is free again once its job no longer runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from trainq.core.nodes import is_gang
from trainqd.attempts.jobdir import JobDirs
from trainqd.monitor.records import atomic_write_json, read_json
from trainqd.store import JobRow

# 127.1.0.0 to 127.40.15.255 and ports 20000 to 39999: one block (and port pair) each.
BLOCKS = 10_000


class NoBlock(Exception):
    """Every block is held by a running job."""


def held_by(dirs: JobDirs, job: JobRow) -> int | None:
    """The block the job's current attempt holds, if it holds one."""
    with contextlib.suppress(OSError, ValueError):
        raw = read_json(str(dirs.loopback_file(job.id, job.attempt_count)))
        block = raw.get("block") if isinstance(raw, dict) else None
        if isinstance(block, int) and not isinstance(block, bool) and 0 <= block < BLOCKS:
            return block
    return None


def uses_loopback(job: JobRow) -> bool:
    return is_gang(job.spec) and job.spec.image is None


def allocate(dirs: JobDirs, job_id: int, number: int, running: Iterable[JobRow]) -> int:
    """A block no other of the `running` jobs holds, recorded as this attempt's."""
    taken = {held_by(dirs, job) for job in running if job.id != job_id and uses_loopback(job)}
    first = job_id % BLOCKS
    for step in range(BLOCKS):
        block = (first + step) % BLOCKS
        if block not in taken:
            atomic_write_json(str(dirs.loopback_file(job_id, number)), {"block": block})
            return block
    raise NoBlock(f"all {BLOCKS} loopback blocks are held by running jobs of several nodes")
