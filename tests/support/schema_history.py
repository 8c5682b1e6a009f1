"""Undo the state database's migrations, to test that an older database is brought forward.

Each entry undoes what `trainqd.store.schema.MIGRATIONS[n]` did; a new migration gets its undo here
(test_schema_history checks that none is missing)."""

from __future__ import annotations

import sqlite3

UNDO: dict[int, tuple[str, ...]] = {
    2: tuple(
        f"ALTER TABLE attempts DROP COLUMN {column}"
        for column in ("gpu_util_peak", "gpu_util_mean", "gpu_memory_peak_mib", "gpu_idle_seconds")
    ),
    3: ("DROP INDEX jobs_state_id", "DROP INDEX jobs_user_id"),
    4: ("ALTER TABLE attempts DROP COLUMN opt_ml",),
    5: (
        "DROP INDEX jobs_group_id",
        "DROP TABLE drains",
        *(
            f"ALTER TABLE jobs DROP COLUMN {column}"
            for column in ("group_id", "held_by", "boost", "preempted_count")
        ),
    ),
    6: (
        "DROP INDEX submit_tokens_created",
        "DROP TABLE submit_tokens",
        "DROP TABLE removed_totals",
    ),
    7: ("DROP TABLE tune_trials", "DROP TABLE tunes"),
    8: ("ALTER TABLE attempts DROP COLUMN nodes",),
}


def downgrade(db: sqlite3.Connection, version: int) -> None:
    """Make a current database look as one of schema `version` did (committed)."""
    (current,) = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    for step in range(int(current), version, -1):
        for statement in UNDO[step]:
            db.execute(statement)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
    db.commit()
