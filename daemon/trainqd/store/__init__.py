"""The store: the SQLite database of jobs, attempts, events and tunes (docs/architecture.md).

One connection writes, from the event loop's thread: statements are short, and a commit is
one fsync of the WAL, which is what "on disk before it is acknowledged" costs. All of
trainqd's SQL is in this package, one module per concern:

    database.py      the file, the connection's pragmas, migrations, read-only readers
    transactions.py  write transactions, and a full disk's DiskFull
    memory.py        the jobs not yet ended, kept in memory; the ended ones' counts
    base.py          what every part uses: the connection, the memory, a job's row, events
    inserts.py       new jobs (submissions, group commit's batches, client tokens)
    transitions.py   changes of state, guarded in SQL, each with its event row
    attempts.py      attempts begun and ended with their job's change of state
    jobs.py          reads of jobs: from memory, listings, pages
    events.py        the event history: as it comes, paged on worker threads, pruned
    sharing.py       holds, changes while pending, drains
    reports.py       jobs by state, the metrics' counters, usage rows
    deletion.py      ended jobs' rows removed, their counts kept
    store.py         `Store`, all of the above as one object
    tunes.py         the tunes' own tables (`TuneStore`), on the same connection

`Store` is made of the parts by inheritance (each a class over `StoreBase`), not by
composition: the rest of trainqd keeps one object with one set of method names, where a
facade composed of parts would repeat every method's signature to forward it, and each part
still sees only what `StoreBase` shares (the connection, its transactions, the memory, a
job's row and its event row). The parts share no state but that: a part that needs another's
writes inherits it (`Attempts` from `Transitions`), so the order of the bases is free.
"""

from trainqd.store.database import StoreError
from trainqd.store.events import EventReader
from trainqd.store.inserts import (
    SUBMIT_TOKEN_SECONDS,
    NewJobs,
    Submitted,
    SubmitToken,
    TokenUsed,
)
from trainqd.store.reports import CounterTotals
from trainqd.store.rows import HOST, AttemptRow, DrainRow, EventRow, JobOwner, JobRow
from trainqd.store.store import Store
from trainqd.store.transactions import DISK_FULL_MESSAGE, is_disk_full
from trainqd.store.transitions import JobChanges

__all__ = [
    "DISK_FULL_MESSAGE",
    "HOST",
    "SUBMIT_TOKEN_SECONDS",
    "AttemptRow",
    "CounterTotals",
    "DrainRow",
    "EventReader",
    "EventRow",
    "JobChanges",
    "JobOwner",
    "JobRow",
    "NewJobs",
    "Store",
    "StoreError",
    "SubmitToken",
    "Submitted",
    "TokenUsed",
    "is_disk_full",
]
