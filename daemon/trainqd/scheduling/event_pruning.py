"""The event history's bounds: events older than `event_retention_days`, or past the newest
`max_events`, are deleted, all but each job's latest (its current state, which `trainq
wait` on an ended job reads), for as long as the job is kept.

A PATCH loop makes 200 events a second, and nothing removed them. A pass runs at start-up
and every PRUNE_EVERY seconds: the ids to delete are found on a worker thread, a BATCH at a
time, and each batch is deleted in a short transaction on the loop, so a backlog of
millions never holds it. The store records, with each batch, the id before which the
history is pruned (`Store.events_pruned_before`), which a replay older than that is told.
"""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import anyio.to_thread
import structlog

from trainqd.store import Store

log = structlog.get_logger("trainqd.event_pruning")

BATCH = 1000
PRUNE_EVERY = 60.0


async def prune(store: Store, max_events: int, retention_days: float) -> None:
    """Run for as long as trainqd does; returns at once when both bounds are off (0)."""
    if not max_events and retention_days <= 0:
        return
    while True:
        await prune_once(store, max_events, retention_days)
        await anyio.sleep(PRUNE_EVERY)


async def prune_once(store: Store, max_events: int, retention_days: float) -> int:
    """One pass over the history; how many events it deleted."""
    before = time.time() - retention_days * 86400 if retention_days > 0 else None
    reader = store.event_reader()
    deleted = 0
    try:
        cut = await anyio.to_thread.run_sync(reader.cut, max_events, before)
        after = 0
        while True:
            ids = await anyio.to_thread.run_sync(reader.prunable, after, cut, BATCH)
            if not ids:
                break
            full = len(ids) == BATCH
            # Every event up to the last one looked at that is not its job's latest is gone.
            store.prune_events(ids, (ids[-1] if full else cut) + 1)
            deleted += len(ids)
            if not full:
                break
            after = ids[-1]
            await anyio.lowlevel.checkpoint()
    finally:
        reader.close()
    if deleted:
        log.info("pruned events", deleted=deleted, through=cut, max_events=max_events)
    return deleted
