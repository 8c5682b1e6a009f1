"""The API's handlers for sharing the workstation: holding and releasing a job, changing a
pending one, removing an ended one, and draining and resuming GPUs.

Who may do each is `authorization.Authorizer`'s to say; a changed spec passes the checks a
submission passes (the spec model, then admission's); each change is written in one guarded
transaction with its event row (store.py), and the scheduler plans again after it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError

from trainq.core.errors import Conflict, InvalidRequest, InvalidSpec
from trainq.core.spec import JobSpec, describe_validation_error
from trainq.core.states import JobState
from trainq.core.wire import (
    DrainList,
    DrainRecord,
    DrainRequest,
    JobRecord,
    JobUpdate,
    Removed,
    ResumeRequest,
)
from trainqd.access.admission import check_change, check_running_limit
from trainqd.access.identity import account
from trainqd.api.handlers.common import Handlers, job_id_of
from trainqd.api.routing import Request, Response, Route
from trainqd.scheduling.removal import Removal
from trainqd.store.rows import HOST, DrainRow, JobRow

log = structlog.get_logger("trainqd.sharing")

# The keys of a spec `trainq update` changes, as its event row names them.
_CHANGE_LABELS = {
    "priority": "priority",
    "gpus": "gpus",
    "max_runtime_seconds": "max runtime",
    "class": "class",
}


def drain_record(row: DrainRow) -> DrainRecord:
    return DrainRecord(
        gpu=None if row.gpu == HOST else row.gpu,
        reason=row.reason,
        by=row.by_user,
        since=datetime.fromtimestamp(row.since, UTC),
    )


def drain_records(drains: Mapping[int, DrainRow]) -> list[DrainRecord]:
    """The host's drain first, then the GPUs' in index order."""
    return [drain_record(drains[gpu]) for gpu in sorted(drains)]


def _one_line(text: str, what: str) -> str:
    text = text.strip()
    if not text or not text.isprintable():
        raise InvalidRequest(f"{what} must be one line of printable text")
    return text


class SharingRoutes:
    def __init__(self, api: Handlers, removal: Removal) -> None:
        self.api = api
        self.removal = removal

    def _job(self, request: Request) -> JobRow:
        return self.api.store.get(job_id_of(request))

    def _answer(self, job_id: int, request: Request) -> Response:
        return Response(200, self.api.record(job_id, request.caller.uid))

    # -- hold and release ----------------------------------------------------------------

    async def hold(self, request: Request) -> Response:
        job, uid = self._job(request), request.caller.uid
        self.api.authorizer.require_manage(uid, job, "hold")
        if job.state == JobState.RUNNING:  # paused: stopped, then queued again held
            self.api.control.pause(job.id, uid)
            return self._answer(job.id, request)
        if job.state != JobState.PENDING:
            raise Conflict(
                f"job {job.id} is {job.state}; only a pending or running job can be held"
            )
        who = account(uid).user
        admin = self.api.authorizer.is_admin(uid)
        if job.held_by == who:
            return self._answer(job.id, request)
        if job.held_by is not None and not admin:
            raise Conflict(f"job {job.id} is held by {job.held_by} already")
        # An admin's hold replaces the owner's, so that the owner cannot lift it.
        self.api.store.set_hold(job.id, who, time.time(), f"held by {who}")
        self.api.control.changed()
        return self._answer(job.id, request)

    async def release(self, request: Request) -> Response:
        job, uid = self._job(request), request.caller.uid
        self.api.authorizer.require_release(uid, job)
        if job.state != JobState.PENDING:
            raise Conflict(f"job {job.id} is {job.state}; only a pending job can be released")
        if job.held_by is None:
            raise Conflict(f"job {job.id} is not held")
        who = account(uid).user
        self.api.store.set_hold(job.id, None, time.time(), f"released by {who}")
        self.api.control.changed()
        return self._answer(job.id, request)

    # -- changing a pending job ----------------------------------------------------------

    async def update(self, request: Request) -> Response:
        body = request.model(JobUpdate)
        job, uid = self._job(request), request.caller.uid
        self.api.authorizer.require_manage(uid, job, "change")
        if body.boost is not None and body.boost != job.boost:
            self.api.authorizer.require_admin(uid, "boost a job above other users' work")
        if job.state == JobState.RUNNING:
            return self._retime(job, body, request)
        if job.state != JobState.PENDING:
            raise Conflict(f"job {job.id} is {job.state}; only a pending job can be changed")
        changes: dict[str, Any] = body.model_dump(by_alias=True, exclude_unset=True)
        if "boost" in changes and changes["boost"] is None:  # a boost is a number; 0 is none
            raise InvalidRequest("boost must be a whole number (0 lifts a boost), not null")
        boost = changes.pop("boost", job.boost)
        if not changes and "boost" not in body.model_fields_set:
            raise InvalidRequest(
                "nothing to change: give priority, gpus, max_runtime_seconds, class or boost"
            )
        before: dict[str, Any] = job.spec.model_dump(mode="json", by_alias=True)
        try:
            spec = JobSpec.model_validate({**before, **changes})
        except ValidationError as exc:
            raise InvalidSpec(describe_validation_error(exc, "spec")) from None
        # As the caller: the owner, or an admin, who may place a job in any class.
        check_change(spec, uid, self.api.host(), self.api.authorizer)
        after: dict[str, Any] = spec.model_dump(mode="json", by_alias=True)
        said = [
            f"{label} {_shown(before.get(key))} -> {_shown(after.get(key))}"
            for key, label in _CHANGE_LABELS.items()
            if before.get(key) != after.get(key)
        ]
        if boost != job.boost:
            said.append(f"boost {job.boost} -> {boost}")
        if not said:  # the same values again: nothing to record
            return self._answer(job.id, request)
        who = account(uid).user
        reason = f"updated by {who}: {', '.join(said)}"
        self.api.store.change_pending(job.id, spec, boost, time.time(), reason)
        self.api.control.changed()
        return self._answer(job.id, request)

    def _retime(self, job: JobRow, body: JobUpdate, request: Request) -> Response:
        """A running job's time limit, the one thing of it that may still change; its monitor
        gets the new deadline (Scheduler.retimed)."""
        changes: dict[str, Any] = body.model_dump(by_alias=True, exclude_unset=True)
        if set(changes) != {"max_runtime_seconds"}:
            raise Conflict(f"job {job.id} is RUNNING; only its max_runtime_seconds can change now")
        if self.api.host().gpu_backend == "slurm":
            raise Conflict(
                f"job {job.id} runs under Slurm, which holds the time limit it was given; "
                "ask the Slurm administrator (scontrol update TimeLimit=)"
            )
        uid = request.caller.uid
        before = job.spec.max_runtime_seconds
        spec = job.spec.model_copy(update={"max_runtime_seconds": changes["max_runtime_seconds"]})
        try:
            spec = JobSpec.model_validate(spec.model_dump(mode="json", by_alias=True))
        except ValidationError as exc:
            raise InvalidSpec(describe_validation_error(exc, "spec")) from None
        check_running_limit(spec, uid, self.api.host(), self.api.authorizer)
        after = spec.max_runtime_seconds
        if after == before:
            return self._answer(job.id, request)
        who = account(uid).user
        reason = f"updated by {who}: max runtime {_shown(before)} -> {_shown(after)}"
        changed = self.api.store.change_running_limit(job.id, spec, time.time(), reason)
        self.api.control.retimed(changed)
        log.info("time limit changed", job_id=job.id, before=before, after=after, by=who)
        return self._answer(job.id, request)

    # -- removing an ended job -----------------------------------------------------------

    async def remove(self, request: Request) -> Response:
        job, uid = self._job(request), request.caller.uid
        self.api.authorizer.require_manage(uid, job, "remove")
        files = await self.removal.remove(job)
        log.info(
            "removed an ended job", job_id=job.id, user=job.owner.user, by_uid=uid, files=files
        )
        return Response(200, Removed(id=job.id, files=files))

    # -- draining and resuming GPUs ------------------------------------------------------

    def _gpus(self, gpus: list[int] | None) -> list[int] | None:
        if gpus is None:
            return None
        have = sorted(self.api.devices)
        if not gpus:
            raise InvalidRequest("name at least one GPU, or leave gpus out for the whole host")
        for gpu in gpus:
            if gpu not in self.api.devices:
                which = ", ".join(map(str, have)) if have else "none"
                raise InvalidRequest(f"GPU {gpu} is not one of this host's GPUs ({which})")
        return sorted(set(gpus))

    def _drains(self) -> Response:
        self.api.control.changed()
        return Response(200, DrainList(drains=drain_records(self.api.store.drains())))

    async def drain(self, request: Request) -> Response:
        body = request.model(DrainRequest)
        uid = request.caller.uid
        self.api.authorizer.require_admin(uid, "drain GPUs")
        gpus = self._gpus(body.gpus)
        reason = _one_line(body.reason, "the reason")
        who = account(uid).user
        self.api.store.drain(gpus or [HOST], reason, who, time.time())
        log.info("drained", gpus=gpus or "the host", reason=reason, by=who)
        return self._drains()

    async def resume(self, request: Request) -> Response:
        body = request.model(ResumeRequest, allow_empty=True)
        uid = request.caller.uid
        self.api.authorizer.require_admin(uid, "resume drained GPUs")
        gpus = self._gpus(body.gpus)
        self.api.store.resume(gpus)
        log.info("resumed", gpus=gpus or "everything", by=account(uid).user)
        return self._drains()

    def routes(self) -> list[Route]:
        job_id = "/v1/jobs/{id}"
        return [
            Route(
                "POST",
                f"{job_id}/hold",
                self.hold,
                "Hold a pending job back from starting",
                response_model=JobRecord,
            ),
            Route(
                "POST",
                f"{job_id}/release",
                self.release,
                "Release a held job",
                response_model=JobRecord,
            ),
            Route(
                "PATCH",
                job_id,
                self.update,
                "Change a pending job (priority, gpus, max_runtime_seconds, class, boost) "
                "or a running job's max_runtime_seconds",
                request_model=JobUpdate,
                response_model=JobRecord,
            ),
            Route(
                "DELETE",
                job_id,
                self.remove,
                "Remove an ended job: its directory, logs and records",
                response_model=Removed,
            ),
            Route(
                "POST",
                "/v1/drain",
                self.drain,
                "Drain GPUs or the whole host: nothing new starts there",
                request_model=DrainRequest,
                response_model=DrainList,
            ),
            Route(
                "POST",
                "/v1/resume",
                self.resume,
                "Lift drains",
                request_model=ResumeRequest,
                response_model=DrainList,
                body_optional=True,
            ),
        ]


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)
