"""Attempts: one begins with its job's move to RUNNING, ends with its job's next state, each
in one transaction (one fsync), and keeps what its monitor and its GPUs' sampler said."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from trainq.core.nodes import cpu_nodes
from trainq.core.outcomes import Ending, NodeEnd
from trainq.core.spec import JobSpec
from trainq.core.states import JobState, TransitionError
from trainqd.store.rows import ATTEMPT_COLUMNS, AttemptRow, JobRow, attempt_from, node_ends_to
from trainqd.store.transitions import JobChanges, Transitions


class Attempts(Transitions):
    def begin_attempt(
        self, job_id: int, gpus: Sequence[int], uuids: Sequence[str], now: float
    ) -> tuple[JobRow, int]:
        """PENDING -> RUNNING with a new attempt row holding the assignment."""
        with self._tx():
            number = self._db.execute(
                "SELECT attempt_count + 1 FROM jobs WHERE id=?", (job_id,)
            ).fetchone()[0]
            self._guarded(
                job_id,
                JobState.RUNNING,
                now,
                f"attempt {number}",
                [
                    ("gpus=?", json.dumps(list(gpus))),
                    ("gpu_uuids=?", json.dumps(list(uuids))),
                    ("attempt_count=?", number),
                    ("not_before=?", None),
                    # A preemption's stop reason is over once the job runs again.
                    ("stop_reason=?", None),
                    ("started_at=COALESCE(started_at, ?)", now),
                ],
            )
            self._db.execute(
                "INSERT INTO attempts(job_id, number, gpus, started_at) VALUES (?,?,?,?)",
                (job_id, number, json.dumps(list(gpus)), now),
            )
        return self._refresh(job_id), number

    def record_monitor(
        self, job_id: int, number: int, pid: int, start: int | None, boot_id: str
    ) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE attempts SET monitor_pid=?, monitor_start=?, boot_id=?"
                " WHERE job_id=? AND number=?",
                (pid, start, boot_id, job_id, number),
            )

    def record_gpu_use(
        self,
        job_id: int,
        number: int,
        *,
        utilization_peak: float | None,
        utilization_mean: float | None,
        memory_peak_mib: int | None,
        idle_seconds: float,
    ) -> None:
        """Keep what the sampler saw of an ended attempt's GPUs."""
        with self._tx():
            self._db.execute(
                "UPDATE attempts SET gpu_util_peak=?, gpu_util_mean=?, gpu_memory_peak_mib=?,"
                " gpu_idle_seconds=? WHERE job_id=? AND number=?",
                (utilization_peak, utilization_mean, memory_peak_mib, idle_seconds, job_id, number),
            )

    def end_attempt(
        self,
        job_id: int,
        number: int,
        target: JobState,
        now: float,
        ending: Ending,
        *,
        attempt_started: float | None,
        attempt_ended: float,
        retried: bool,
        event_reason: str | None,
        changes: JobChanges | None = None,
        opt_ml: bool | None = None,
        nodes: tuple[NodeEnd, ...] = (),
    ) -> JobRow:
        """Close an attempt as `ending` says and move its job on to `target`, in one
        transaction (one fsync); `attempt_started`: when it began, if not as recorded;
        `opt_ml`, where the monitor said, whether its trainer found /opt/ml; `nodes`, a
        gang's, how each of its nodes ended."""
        with self._tx():
            attempt = self.attempt(job_id, number)
            if attempt is None or attempt.ended_at is not None:
                raise TransitionError(self.get(job_id).state, target)
            begun = attempt_started if attempt_started is not None else attempt.started_at
            self._db.execute(
                "UPDATE attempts SET ended_at=?, exit_code=?, signal=?, outcome=?, reason=?,"
                " retried=?, started_at=? WHERE job_id=? AND number=?",
                (
                    attempt_ended,
                    ending.exit_code,
                    ending.signal,
                    str(ending.outcome),
                    ending.reason,
                    int(retried),
                    begun,
                    job_id,
                    number,
                ),
            )
            if opt_ml is not None:
                self._db.execute(
                    "UPDATE attempts SET opt_ml=? WHERE job_id=? AND number=?",
                    (int(opt_ml), job_id, number),
                )
            if nodes:
                self._db.execute(
                    "UPDATE attempts SET nodes=? WHERE job_id=? AND number=?",
                    (node_ends_to(nodes), job_id, number),
                )
            used = max(0.0, attempt_ended - begun)
            assignments = [
                *(changes or JobChanges()).assignments(),
                ("runtime_used=runtime_used + ?", used),
            ]
            self._guarded(job_id, target, now, event_reason, assignments)
        return self._refresh(job_id)

    def attempts(self, job_ids: Sequence[int]) -> dict[int, list[AttemptRow]]:
        out: dict[int, list[AttemptRow]] = {j: [] for j in job_ids}
        if not job_ids:
            return out
        marks = ",".join("?" * len(job_ids))
        for row in self._db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id IN ({marks})"
            " ORDER BY job_id, number",
            list(job_ids),
        ):
            out[row[0]].append(attempt_from(row))
        return out

    def attempt(self, job_id: int, number: int) -> AttemptRow | None:
        row = self._db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id=? AND number=?",
            (job_id, number),
        ).fetchone()
        return None if row is None else attempt_from(row)

    def attempts_ended_since(self, since: float) -> list[EndedAttempt]:
        """Every attempt that ended since `since`: what fair share is seeded with at
        start-up (fairshare.py)."""
        # Only a CPU attempt of several nodes counts more than one slot: its spec alone is
        # read (and parsed once per job), not every job's.
        cur = self._db.execute(
            "SELECT j.id, j.owner_uid, j.owner_user, a.gpus, a.started_at, a.ended_at,"
            " CASE WHEN a.gpus='[]' AND (json_extract(j.spec, '$.instance_count')>1"
            " OR json_array_length(j.spec, '$.instance_groups')>0) THEN j.spec END"
            " FROM attempts a JOIN jobs j ON j.id=a.job_id WHERE a.ended_at>=?",
            (since,),
        )
        slots: dict[int, int] = {}
        out = []
        for job_id, uid, user, gpus, started, ended, spec in cur:
            if spec is not None and job_id not in slots:
                slots[job_id] = cpu_nodes(JobSpec.model_validate_json(spec))
            out.append(
                EndedAttempt(
                    int(uid),
                    str(user),
                    str(gpus),
                    float(started),
                    float(ended),
                    slots.get(job_id, 1),
                )
            )
        return out


@dataclass(frozen=True)
class EndedAttempt:
    """An ended attempt as fair share counts it: `gpus` as the attempts table keeps them
    (JSON), `slots` the CPU slots it held (one per node without GPUs, at least one)."""

    uid: int
    user: str
    gpus: str
    started: float
    ended: float
    slots: int
