"""Values tests build their cases from: owners, configurations, specs."""

from __future__ import annotations

from trainqd.store.store import JobOwner

# The owner of the jobs the store's own tests submit (no such user need exist).
OWNER = JobOwner(uid=1000, gid=1000, user="alice")
