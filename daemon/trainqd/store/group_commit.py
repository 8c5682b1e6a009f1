"""Group commit: submissions that arrive together share one transaction and one fsync.

Every submission is durable before it is acknowledged, and on its own that costs a commit
(an fsync of the WAL) each. Here the first submission to arrive while none is being
gathered becomes the batch's leader: it gives the event loop a few turns, in which the
other connections' submissions that have already arrived join the batch, then commits them
all with `Store.submit_batches` (a SAVEPOINT each, so one whose inserts fail fails alone)
and wakes the others, each answered with its own jobs or its own error. A full disk fails
the whole batch, nothing of it written. A lone submission on an idle daemon pays one
extra loop turn, a few microseconds.

The commit runs on the event loop's thread, as every other use of the store does: the one
SQLite connection cannot be shared with a worker thread while the loop also uses it, and a
second connection that wrote beside it would make the loop's own writes wait on SQLite's
busy handler, which sleeps. What it holds the loop for is the inserts plus one fsync
(about 0.4 ms for a batch of 8 here, against 0.2 ms for one submission); what makes the
difference is that 8 concurrent submissions pay one fsync, not 8.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from trainqd import gc_tuning
from trainqd.store.inserts import NewJobs
from trainqd.store.rows import JobRow
from trainqd.store.store import Store

# Loop turns a leader gives others to join its batch: it stops early on a turn in which
# nobody joined, so an idle daemon pays one.
GATHER_TURNS = 4


@dataclass(eq=False)
class _Waiting:
    submission: NewJobs
    done: anyio.Event = field(default_factory=anyio.Event)
    result: list[JobRow] | BaseException | None = None


class GroupCommit:
    """Where the API hands its submissions; `batches` counts the transactions they took."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._queue: list[_Waiting] = []
        self._gathering = False
        self.batches = 0
        self.submissions = 0
        self._unsettled = 0  # jobs queued since the last gc_tuning.settle

    async def submit(self, submission: NewJobs) -> list[JobRow]:
        """The submission's jobs once they are durable; the error that kept them out
        otherwise (DiskFull for a full disk)."""
        waiting = _Waiting(submission)
        self._queue.append(waiting)
        if self._gathering:
            await waiting.done.wait()
        else:
            # Shielded: the others' answers depend on this commit, whatever becomes of the
            # leader's own client.
            with anyio.CancelScope(shield=True):
                await self._lead()
        result = waiting.result
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        return result

    async def _lead(self) -> None:
        self._gathering = True
        try:
            for _ in range(GATHER_TURNS):
                queued = len(self._queue)
                await anyio.lowlevel.checkpoint()
                if len(self._queue) == queued:
                    break
        finally:
            self._gathering = False
        batch, self._queue = self._queue, []
        results: list[list[JobRow] | Exception]
        try:
            results = self._store.submit_batches([w.submission for w in batch], self._clock())
        except Exception as exc:  # the commit failed: nothing of the batch was written
            results = [exc] * len(batch)
        self.batches += 1
        self.submissions += len(batch)
        # Queued jobs live on until they end: every so many, out of the collector's way.
        self._unsettled += sum(len(w.submission.specs) for w in batch)
        if self._unsettled >= gc_tuning.SETTLE_EVERY:
            gc_tuning.settle()
            self._unsettled = 0
        for waiting, result in zip(batch, results, strict=True):
            waiting.result = result
            waiting.done.set()
