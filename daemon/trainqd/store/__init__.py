"""The store: the SQLite database of jobs, attempts, events and tunes, and its schema."""
