"""Sharing the workstation: holds, changes to a job while it waits (or to a running one's
time limit), and drained GPUs. Each change writes its event row, which changes no state, in
its transaction."""

from __future__ import annotations

from collections.abc import Sequence

from trainq.core.errors import Conflict, NotFound
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.store.base import StoreBase
from trainqd.store.rows import DrainRow, JobRow


class Sharing(StoreBase):
    _drains: dict[int, DrainRow]  # the drains table, read on every plan

    def set_hold(self, job_id: int, held_by: str | None, now: float, reason: str) -> JobRow:
        """Hold a PENDING job back (`held_by`: who holds it) or release it (None), with an
        event row; Conflict if it is no longer pending."""
        with self._tx():
            self._pending_only(job_id, "held" if held_by else "released")
            self._db.execute(
                "UPDATE jobs SET held_by=? WHERE id=? AND state=?",
                (held_by, job_id, str(JobState.PENDING)),
            )
            self._event(job_id, now, JobState.PENDING, JobState.PENDING, reason)
        return self._refresh(job_id)

    def change_pending(
        self, job_id: int, spec: JobSpec, boost: int, now: float, reason: str
    ) -> JobRow:
        """Replace a PENDING job's spec (and its priority column) and boost, with an event
        row, in one transaction; Conflict if it started meanwhile."""
        with self._tx():
            self._pending_only(job_id, "changed")
            text = spec.model_dump_json()
            self._db.execute(
                "UPDATE jobs SET spec=?, priority=?, boost=? WHERE id=? AND state=?",
                (text, spec.priority, boost, job_id, str(JobState.PENDING)),
            )
            self._event(job_id, now, JobState.PENDING, JobState.PENDING, reason)
        self._memory.rows.pop(job_id, None)  # so that the new spec is the one kept
        job = self._refresh(job_id, spec)
        self._memory.keep(job, len(text.encode()))
        return job

    def change_running_limit(self, job_id: int, spec: JobSpec, now: float, reason: str) -> JobRow:
        """Replace a RUNNING job's spec (its time limit alone differs), with an event row, in
        one transaction; Conflict if it is no longer running."""
        with self._tx():
            row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}")
            if row[0] != JobState.RUNNING:
                raise Conflict(f"job {job_id} is {row[0]}; its time limit can no longer change")
            self._db.execute(
                "UPDATE jobs SET spec=? WHERE id=? AND state=?",
                (spec.model_dump_json(), job_id, str(JobState.RUNNING)),
            )
            self._event(job_id, now, JobState.RUNNING, JobState.RUNNING, reason)
        self._memory.rows.pop(job_id, None)  # so that the new spec is the one kept
        return self._refresh(job_id, spec)

    def _pending_only(self, job_id: int, action: str) -> None:
        """Conflict (one line) unless the job is PENDING, read inside the write transaction."""
        row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}")
        if row[0] != JobState.PENDING:
            raise Conflict(f"job {job_id} is {row[0]}; only a pending job can be {action}")

    def drains(self) -> dict[int, DrainRow]:
        """Drained GPUs by index (rows.HOST: the whole host)."""
        return dict(self._drains)

    def drain(self, gpus: Sequence[int], reason: str, by_user: str, now: float) -> None:
        """Drain `gpus` (rows.HOST for the host); draining again replaces the reason."""
        with self._tx():
            self._db.executemany(
                "INSERT OR REPLACE INTO drains(gpu, reason, by_user, since) VALUES (?,?,?,?)",
                [(gpu, reason, by_user, now) for gpu in gpus],
            )
        self._load_drains()

    def resume(self, gpus: Sequence[int] | None) -> None:
        """Lift the drains of `gpus` (None: every drain, the host's included)."""
        with self._tx():
            if gpus is None:
                self._db.execute("DELETE FROM drains")
            else:
                self._db.executemany("DELETE FROM drains WHERE gpu=?", [(g,) for g in gpus])
        self._load_drains()

    def _load_drains(self) -> None:
        self._drains = {
            row["gpu"]: DrainRow(row["gpu"], row["reason"], row["by_user"], row["since"])
            for row in self._db.execute("SELECT gpu, reason, by_user, since FROM drains")
        }
