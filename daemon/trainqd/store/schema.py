"""The state database's schema. Bump SCHEMA_VERSION with every change and migrate forward in
Store._migrate; a database from a newer trainqd is refused rather than misread."""

SCHEMA_VERSION = 8

# What a paged listing filters on, each in id order so that a page is a range scan.
LIST_INDEXES = (
    """CREATE INDEX jobs_state_id ON jobs(state, id)""",
    """CREATE INDEX jobs_user_id ON jobs(owner_user, id)""",
)

# Drained GPUs take no new job (gpu = -1: the whole host); sweeps are listed by group.
SHARING = (
    """CREATE TABLE drains (
        gpu INTEGER PRIMARY KEY,
        reason TEXT NOT NULL,
        by_user TEXT NOT NULL,
        since REAL NOT NULL
    )""",
    """CREATE INDEX jobs_group_id ON jobs(group_id, id)""",
)

# Idempotent submits: a client's token (the Idempotency-Key header), per user, names the
# jobs its first submission queued; kept for inserts.SUBMIT_TOKEN_SECONDS.
SUBMIT_TOKENS = (
    """CREATE TABLE submit_tokens (
        owner_uid INTEGER NOT NULL,
        token TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        first_id INTEGER NOT NULL,
        job_count INTEGER NOT NULL,
        grouped INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (owner_uid, token)
    )""",
    """CREATE INDEX submit_tokens_created ON submit_tokens(created_at)""",
)

# What removed jobs had added to the metrics' counters (store.CounterTotals), so that the
# totals counted from the remaining rows at start-up still include them.
REMOVED_TOTALS = (
    """CREATE TABLE removed_totals (
        metric TEXT NOT NULL,
        label TEXT NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY (metric, label)
    )""",
)

# Tuning experiments (tunes.py): each tune, and each of its trials with its job.
TUNES = (
    """CREATE TABLE tunes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        owner_uid INTEGER NOT NULL,
        owner_gid INTEGER NOT NULL,
        owner_user TEXT NOT NULL,
        request TEXT NOT NULL,
        state TEXT NOT NULL,
        group_id INTEGER,
        created_at REAL NOT NULL,
        ended_at REAL,
        reason TEXT
    )""",
    """CREATE TABLE tune_trials (
        tune_id INTEGER NOT NULL REFERENCES tunes(id),
        number INTEGER NOT NULL,
        job_id INTEGER NOT NULL,
        params TEXT NOT NULL,
        state TEXT NOT NULL,
        value REAL,
        best REAL,
        step REAL,
        reason TEXT,
        exploit TEXT,
        history TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (tune_id, number)
    )""",
)

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
        lost_count INTEGER NOT NULL DEFAULT 0,
        group_id INTEGER,
        held_by TEXT,
        boost INTEGER NOT NULL DEFAULT 0,
        preempted_count INTEGER NOT NULL DEFAULT 0
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
        gpu_util_peak REAL,
        gpu_util_mean REAL,
        gpu_memory_peak_mib INTEGER,
        gpu_idle_seconds REAL,
        opt_ml INTEGER,
        nodes TEXT,
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
    *LIST_INDEXES,
    *SHARING,
    *SUBMIT_TOKENS,
    *REMOVED_TOTALS,
    *TUNES,
)

# The statements that bring a database of version N-1 to version N, run in order.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # An attempt's GPU use (daemon/trainqd/scheduling/sampling.py), unknown for older attempts.
    2: tuple(
        f"ALTER TABLE attempts ADD COLUMN {column}"
        for column in (
            "gpu_util_peak REAL",
            "gpu_util_mean REAL",
            "gpu_memory_peak_mib INTEGER",
            "gpu_idle_seconds REAL",
        )
    ),
    3: LIST_INDEXES,
    # Whether a subprocess attempt's trainer found /opt/ml (monitor/records.py's ExitRecord).
    4: ("ALTER TABLE attempts ADD COLUMN opt_ml INTEGER",),
    # Sharing the workstation: sweeps, holds, admins' boosts, preemption, drains.
    5: (
        "ALTER TABLE jobs ADD COLUMN group_id INTEGER",
        "ALTER TABLE jobs ADD COLUMN held_by TEXT",
        "ALTER TABLE jobs ADD COLUMN boost INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN preempted_count INTEGER NOT NULL DEFAULT 0",
        *SHARING,
    ),
    6: (*SUBMIT_TOKENS, *REMOVED_TOTALS),
    7: TUNES,
    # A job of several nodes: each node's end, as its gang's exit record says (JSON).
    8: ("ALTER TABLE attempts ADD COLUMN nodes TEXT",),
}
