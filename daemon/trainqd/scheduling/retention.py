"""The retention purge: ended jobs older than `retention_days` are removed, directory and
rows, as `trainq rm` removes one (removal.py), logged in trainqd's log.

It works in small batches, each job's directory walked on a worker thread and its rows
deleted in a short transaction, so a backlog of thousands never holds the event loop. It
sleeps until the next ended job falls due, and at most `retention_days` (a job that ends
meanwhile falls due no sooner) or an hour.
"""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import anyio.to_thread
import structlog

from trainq.core.errors import NotFound, TrainqError
from trainqd.scheduling.removal import Removal
from trainqd.store import Store

log = structlog.get_logger("trainqd.retention")

BATCH = 20
LONGEST_SLEEP = 3600.0


async def purge(store: Store, removal: Removal, retention_days: float) -> None:
    """Run for as long as trainqd does; returns at once when retention is off (0)."""
    if retention_days <= 0:
        return
    keep = retention_days * 86400
    failed: set[int] = set()  # left for an admin (a mount inside, say): not retried each round
    while True:
        now = time.time()
        due, next_end = await anyio.to_thread.run_sync(
            store.ended_before, now - keep, BATCH + len(failed)
        )
        batch = [job_id for job_id in due if job_id not in failed][:BATCH]
        for job_id in batch:
            try:
                job = store.get(job_id)
                removed = await removal.remove(job)
            except NotFound:
                continue  # removed by `trainq rm` meanwhile
            except TrainqError as exc:
                failed.add(job_id)
                log.warning("an ended job was not purged", job_id=job_id, reason=exc.message)
                continue
            log.info(
                "purged an ended job",
                job_id=job_id,
                user=job.owner.user,
                state=str(job.state),
                ended_at=job.ended_at,
                files=removed,
                retention_days=retention_days,
            )
        if len(batch) == BATCH:
            await anyio.lowlevel.checkpoint()  # more are due: the others have a turn first
            continue
        wake = min(LONGEST_SLEEP, keep)
        if next_end is not None:
            wake = min(wake, next_end + keep - now)
        await anyio.sleep(max(wake, 0.05))
