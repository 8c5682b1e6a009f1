"""The cyclic garbage collector, kept off the event loop's back.

trainqd keeps every unfinished job's row in memory, and a full (generation 2) collection
walks every object the collector tracks: with 10,000 queued jobs each one took 20-80 ms
here, on whichever thread allocated at that moment (the event loop, or a worker thread
holding the interpreter lock that the loop then waits for), and under a listing load it
came about every 200 ms while finding almost nothing to free. What trainqd keeps holds no
reference cycles (frozen dataclasses and pydantic models), so reference counting frees it
when the job ends, whatever the collector does. `settle` moves everything alive into the
permanent generation (`gc.freeze`), which collections skip: a full collection then walks
only what was made since. It is called once start-up is done and after every thousand jobs queued
(bench/README.md, "Scale", has the measures).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Jobs queued between two settlements (group_commit.py): a few thousand jobs' objects
# are what a full collection then walks at most, a few milliseconds.
SETTLE_EVERY = 1000


def settle(*, collect: bool = False) -> None:
    """Move what is alive now out of the collector's way. `collect` first frees the cycles
    already garbage (at start-up, when a pause costs nobody anything), so that they are not
    kept for good; later calls skip it, and keep the few young cycles alive at that moment."""
    if collect:
        gc.collect()
    gc.freeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collection while a short-lived burst of objects is made (a page of 1,000 jobs'
    records, on a worker thread): a collection in its middle would walk all of them, for
    nothing, holding the lock the event loop waits for; reference counting frees them when
    the page is sent. Collections resume after; nested or concurrent uses leave the
    collector enabled as soon as the one that disabled it is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
