"""Write transactions on the store's one connection, and what a full disk makes of them.

A commit is one fsync of the WAL (~0.25 ms here): what "on disk before it is acknowledged"
costs, and what group commit (group_commit.py) shares between submissions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from trainq.core.errors import DiskFull

DISK_FULL_MESSAGE = "trainqd's disk is full, so nothing was changed; try again once there is room"


def is_disk_full(exc: sqlite3.Error) -> bool:
    """SQLITE_FULL: a write found no room (the disk, or the filesystem's quota)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_FULL


class Transactions:
    """Opens the connection's write transactions and counts those committed (the metrics
    show what group commit saves)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.commits = 0

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction. A full disk fails it as DiskFull (the caller's 507), with
        nothing changed: the database and the jobs in memory stay as they were."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
                self.commits += 1
            except BaseException:
                self._rollback()
                raise
        except sqlite3.OperationalError as exc:
            if is_disk_full(exc):
                raise DiskFull(DISK_FULL_MESSAGE) from None
            raise

    def _rollback(self) -> None:
        # A failed COMMIT may have rolled back already; a ROLLBACK that fails as well (the
        # disk again) leaves nothing more to undo.
        if self._db.in_transaction:
            with suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
