"""The Python library, `from trainq import Client`: trainqd's API (`trainq.client.api`) with
typed calls that return the wire records of `trainq.core.wire` and raise trainq's errors.

The records' models (pydantic) are imported on a method's first use, so `import trainq` and
the CLI, which uses the JSON calls of `Api` alone, stay cheap.
"""

from __future__ import annotations

import builtins
import json as jsonlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from trainq.client.api import Api
from trainq.client.following import follow_group, follow_until_ended
from trainq.client.specs import localized, spec_of
from trainq.client.transport import iter_lines

if TYPE_CHECKING:
    from trainq.core.spec import JobSpec
    from trainq.core.wire import (
        EventRecord,
        GroupStopped,
        JobMetrics,
        JobRecord,
        SubmittedGroup,
        TuneRecord,
        UserList,
    )


class LogLine(NamedTuple):
    """A line of a job's output: when the monitor read it, its stream, its text."""

    time: float
    stream: str
    text: str


def _body(spec: Mapping[str, Any] | JobSpec | None, fields: Mapping[str, Any], cwd: Path) -> Any:
    """A spec as the library takes it (a dict, a JobSpec) with `fields` over it, localized
    as `trainq submit` localizes one."""
    if spec is None:
        data: dict[str, Any] = {}
    elif isinstance(spec, Mapping):
        data = dict(spec)
    else:
        data = spec.model_dump(mode="json", exclude_unset=True)
    data.update(fields)
    return localized(data, cwd, os.environ)


class Client(Api):
    """trainqd's API on `socket_path` (default: the socket `trainq` would use: $TRAINQ_SOCKET,
    your own daemon's, else the system's), typed. Holds no connection between calls."""

    def submit(
        self,
        spec: Mapping[str, Any] | JobSpec | None = None,
        /,
        *,
        client_token: str | None = None,
        **fields: Any,
    ) -> JobRecord:
        """Submit a job: `spec` (a dict shaped like a spec file, or a JobSpec) with `fields`
        over it. As with `trainq submit`, relative paths are taken from the current
        directory, and a subprocess job runs there with your PATH unless the spec says
        otherwise. Raises InvalidSpec (and the daemon's other refusals) as trainq errors.

        `client_token` (1-128 letters, digits, `.`, `_`, `:`, `-`; a fresh uuid4 per job)
        makes the submission idempotent: the same call again returns the same job, never a
        second one, and a lost answer is retried (see trainq.client.api)."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415 (pydantic on first use)

        body = _body(spec, fields, Path.cwd())
        return JobRecord.model_validate(self.post_jobs(body, client_token))

    def submit_many(
        self,
        specs: Iterable[Mapping[str, Any] | JobSpec],
        *,
        client_token: str | None = None,
        **fields: Any,
    ) -> SubmittedGroup:
        """Submit several jobs in one request, queued together in one transaction as one
        group (the first job's id; `list(group=...)`, `stop_group`, `wait_group`): each
        spec as `submit` takes it, with `fields` over every one. Nothing is queued if any
        spec is refused; the error names its index (`jobs[3]: ...`). `client_token` as
        for `submit`: the same call again returns the same group."""
        from trainq.core.wire import SubmittedGroup  # noqa: PLC0415 (pydantic on first use)

        cwd = Path.cwd()
        bodies = [_body(spec, fields, cwd) for spec in specs]
        return SubmittedGroup.model_validate(self.post_jobs(bodies, client_token))

    def stop_group(self, group: int, *, grace_seconds: float | None = None) -> GroupStopped:
        """Stop every unfinished job of the group that you may stop."""
        from trainq.core.wire import GroupStopped  # noqa: PLC0415

        answer = self.post_group_stop(group, grace_seconds=grace_seconds)
        return GroupStopped.model_validate(answer)

    def wait_group(self, group: int) -> builtins.list[JobRecord]:
        """Block until every job of the group has ended; their final records."""
        follow_group(self, int(group))
        return self.list(include_ended=True, group=group)

    def list(
        self,
        *,
        include_ended: bool = False,
        state: str | None = None,
        user: str | None = None,
        group: int | None = None,
    ) -> builtins.list[JobRecord]:
        """Jobs, unfinished ones unless `include_ended` (every page, oldest first); with
        `group`, only that group's."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        listed = self.all_jobs(include_ended=include_ended, state=state, user=user, group=group)
        return [JobRecord.model_validate(job) for job in listed]

    def show(self, job_id: int) -> JobRecord:
        """One job's record: state, spec, attempts. NotFound if there is no such job."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        return JobRecord.model_validate(self.get_job(job_id))

    def metrics(self, job_id: int) -> JobMetrics:
        """The job's metric reports: each attempt's series (kept points, count, latest,
        best). Forbidden for a job whose logs you may not read."""
        from trainq.core.wire import JobMetrics  # noqa: PLC0415

        return JobMetrics.model_validate(self.get_job_metrics(job_id))

    def tune(self, spec: Mapping[str, Any], tune: Mapping[str, Any]) -> TuneRecord:
        """Start a tuning experiment: trials of `spec` (a job spec as a dict) over the
        `tune` table's search space (README.md, "Tuning"). InvalidSpec, with one line, for
        bad input; nothing is queued then."""
        from trainq.core.wire import TuneRecord  # noqa: PLC0415

        return TuneRecord.model_validate(self.post_tunes(spec, tune))

    def tunes(self) -> builtins.list[TuneRecord]:
        """Every tuning experiment, with its trials."""
        from trainq.core.wire import TuneList  # noqa: PLC0415

        return TuneList.model_validate(self.get_tunes()).tunes

    def show_tune(self, tune_id: int) -> TuneRecord:
        from trainq.core.wire import TuneRecord  # noqa: PLC0415

        return TuneRecord.model_validate(self.get_tune(tune_id))

    def stop_tune(self, tune_id: int) -> TuneRecord:
        """Stop a tune: no new trial starts, its queued and running trials are stopped."""
        from trainq.core.wire import TuneRecord  # noqa: PLC0415

        return TuneRecord.model_validate(self.post_tune_stop(tune_id))

    def users(self) -> UserList:
        """Each user's recent usage (decayed with the fair share half-life), share of all
        users' GPU-hours, and running and waiting jobs and GPUs."""
        from trainq.core.wire import UserList  # noqa: PLC0415

        return UserList.model_validate(self.get_users())

    def stop(self, job_id: int, *, grace_seconds: float | None = None) -> JobRecord:
        """Stop a job (SIGTERM, the grace, SIGKILL); the record as it is now (STOPPING or
        STOPPED). Forbidden for another user's job, Conflict for one that has ended."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        return JobRecord.model_validate(self.post_job_stop(job_id, grace_seconds=grace_seconds))

    def hold(self, job_id: int) -> JobRecord:
        """Keep a pending job from starting until `release`; a running one is paused (stopped
        with its grace, queued again held). Conflict once it has ended."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        return JobRecord.model_validate(self.post_job_hold(job_id))

    def release(self, job_id: int) -> JobRecord:
        """Let a held job start; Forbidden for a hold an admin placed (unless you are one)."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        return JobRecord.model_validate(self.post_job_release(job_id))

    def update(self, job_id: int, **changes: Any) -> JobRecord:
        """Change a pending job: `priority`, `gpus`, `max_runtime_seconds`, `class`
        (pass it as `job_class`) or, for admins, `boost`; the rules of a submission apply.
        Of a running job, `max_runtime_seconds` alone (its monitor gets the new deadline)."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        if "job_class" in changes:
            changes["class"] = changes.pop("job_class")
        return JobRecord.model_validate(self.patch_job(job_id, changes))

    def requeue(self, job_id: int) -> JobRecord:
        """Run an ended job of yours again with the same spec, as a new job; its record."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        return JobRecord.model_validate(self.post_job_requeue(job_id))

    def submit_like(self, job_id: int, /, **fields: Any) -> JobRecord:
        """Submit a new job from job `job_id`'s spec with `fields` over it (`trainq submit
        --like`); InvalidSpec if values of that spec are hidden from you."""
        return self.submit(spec_of(self, int(job_id)), **fields)

    def remove(self, job_id: int) -> int:
        """Delete an ended job's directory, logs and records; the files and directories
        removed. Conflict for a job that has not ended."""
        return int(self.delete_job(job_id)["files"])

    def drain(self, reason: str, gpus: builtins.list[int] | None = None) -> Any:
        """Start nothing new on `gpus` (None: the whole host); admins only. Every drain now."""
        return self.post_drain(reason, gpus)["drains"]

    def resume(self, gpus: builtins.list[int] | None = None) -> Any:
        """Lift the drains of `gpus` (None: every drain); admins only. The drains left."""
        return self.post_resume(gpus)["drains"]

    def logs(
        self,
        job_id: int,
        *,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
    ) -> str:
        """The output of the job's attempt (the last unless `attempt`) so far, as text, both
        streams in the order they were written; `stream` is "both", "stdout" or "stderr";
        `tail`: the last N lines only; `since`: what was written from then on (Unix time)."""
        logs = self.get_job_logs(
            job_id, stream=stream, attempt=attempt, tail=tail, since=since, follow=False
        )
        with logs as chunks:
            return b"".join(chunks).decode("utf-8", "replace")

    def follow_logs(
        self,
        job_id: int,
        *,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
    ) -> Iterator[str]:
        """The attempt's output line by line as it is written, until the job ends."""
        logs = self.get_job_logs(
            job_id, stream=stream, attempt=attempt, tail=tail, since=since, follow=True
        )
        with logs as chunks:
            for line in iter_lines(chunks):
                yield line.decode("utf-8", "replace")

    def log_lines(
        self,
        job_id: int,
        *,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[LogLine]:
        """Each line of output with when it was written (Unix time) and its stream."""
        logs = self.get_job_logs(
            job_id, stream=stream, attempt=attempt, tail=tail, since=since, follow=follow,
            stamps=True,
        )  # fmt: skip
        with logs as chunks:
            for line in iter_lines(chunks):
                entry = jsonlib.loads(line) if line.strip() else {}
                if "text" in entry:
                    yield LogLine(float(entry["time"]), str(entry["stream"]), entry["text"])

    def wait(self, job_id: int) -> JobRecord:
        """Block until the job has ended (through a daemon restart, as `trainq wait` does);
        its final record. The state says how it ended."""
        follow_until_ended(self, int(job_id))
        return self.show(job_id)

    def events(
        self, *, job_id: int | None = None, since: int | None = None
    ) -> Iterator[EventRecord]:
        """State changes as they happen (of one job, or all you may see); `since=0` replays
        the stored ones first. One job's events end once it has ended; all jobs' run until
        you stop reading them."""
        from trainq.core.wire import EventRecord  # noqa: PLC0415

        with self.get_events(job=job_id, since=since) as chunks:
            for line in iter_lines(chunks):
                if line.strip():  # an empty line is a keep-alive
                    yield EventRecord.model_validate_json(line)
