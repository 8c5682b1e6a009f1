"""`Store`: the one object the rest of trainqd reads and writes jobs, attempts and events
through, made of the parts of this package (its docstring says why by inheritance)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trainq.core.errors import DiskFull
from trainqd.store.attempts import Attempts
from trainqd.store.database import StoreError, migrate, open_writer
from trainqd.store.deletion import Deletion
from trainqd.store.events import Events
from trainqd.store.inserts import Inserts
from trainqd.store.jobs import Jobs
from trainqd.store.reports import Reports
from trainqd.store.sharing import Sharing


class Store(Inserts, Attempts, Jobs, Events, Sharing, Reports, Deletion):
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        super().__init__(conn, path)
        self._drains = {}

    @classmethod
    def open(cls, path: Path) -> Store:
        """The state database at `path`, made or migrated, with its unfinished jobs and its
        drains read; StoreError in one line if it cannot be used."""
        try:
            store = cls(open_writer(path), path)
            migrate(store.connection, store._writes)
            store._memory.load(store.connection)
            store._load_drains()
        except DiskFull as exc:
            raise StoreError(f"{path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"{path}: {exc.strerror}") from None
        return store
