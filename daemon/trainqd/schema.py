"""The state database's schema. Bump SCHEMA_VERSION with every change and migrate forward in
Store._migrate; a database from a newer trainqd is refused rather than misread."""

SCHEMA_VERSION = 1

SCHEMA = (
    """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT,
        state TEXT NOT NULL,
        priority INTEGER NOT NULL,
        owner_uid INTEGER NOT NULL,
        owner_gid INTEGER NOT NULL,
        owner_user TEXT NOT NULL,
        spec TEXT NOT NULL,
        gpus TEXT NOT NULL DEFAULT '[]',
        gpu_uuids TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        failure_reason TEXT,
        stop_reason TEXT,
        not_before REAL,
        runtime_used REAL NOT NULL DEFAULT 0,
        attempt_count INTEGER NOT NULL DEFAULT 0,
        lost_count INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE INDEX jobs_state ON jobs(state)""",
    """CREATE TABLE attempts (
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        number INTEGER NOT NULL,
        gpus TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        outcome TEXT,
        reason TEXT,
        retried INTEGER NOT NULL DEFAULT 0,
        monitor_pid INTEGER,
        monitor_start INTEGER,
        boot_id TEXT,
        PRIMARY KEY (job_id, number)
    )""",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        from_state TEXT,
        to_state TEXT NOT NULL,
        reason TEXT
    )""",
    """CREATE INDEX events_job ON events(job_id, id)""",
)
