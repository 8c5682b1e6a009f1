"""The state database's file, its connection's settings and its schema's migrations.

One connection writes, used only from the event loop's thread: this daemon is the
database's only writer (the state dir's lock). Long reads (listings, reports, replays) go
through read-only connections of their own on worker threads, beside it (WAL).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from trainqd.store.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from trainqd.store.transactions import Transactions


class StoreError(Exception):
    """The database cannot be used (corrupt, newer schema, unwritable)."""


def open_writer(path: Path) -> sqlite3.Connection:
    """The writer's connection: WAL, every commit synced, foreign keys enforced, rows read
    by column name (rows.py)."""
    # SQLite gives its -wal and -shm files the database file's mode.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    os.chmod(path, 0o600)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA foreign_keys=ON")
    db.execute("PRAGMA busy_timeout=5000")
    db.row_factory = sqlite3.Row
    return db


def open_reader(path: Path, *, any_thread: bool = False) -> sqlite3.Connection:
    """A read-only connection of its own, for a worker thread (WAL: beside the writer);
    `any_thread`: for one that several worker threads use in turn."""
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=not any_thread)


def migrate(db: sqlite3.Connection, writes: Transactions) -> None:
    """Create the schema, or bring an older one to SCHEMA_VERSION; StoreError for a newer."""
    with writes.write():
        have = db.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone()
        if have is None:
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            return
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the state database has schema {version}, newer than this trainqd "
                f"({SCHEMA_VERSION}); run the newer trainqd"
            )
        for step in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                db.execute(statement)
        if version < SCHEMA_VERSION:
            db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )


def instance_name(db: sqlite3.Connection, writes: Transactions) -> str:
    """This state's own name, made once: what tells its containers from another trainqd's
    on the same engine (two daemons both have a job 1)."""
    row = db.execute("SELECT value FROM meta WHERE key='instance'").fetchone()
    if row is not None:
        return str(row[0])
    made = os.urandom(4).hex()
    with writes.write():
        db.execute("INSERT INTO meta(key, value) VALUES ('instance', ?)", (made,))
    return made
