"""`trainq requeue JOB`: an ended job runs again, as a new job with the same spec.

A new job, not a new attempt of the old one: an ended job's record is final (the states'
table has no way back from COMPLETED, FAILED or STOPPED; `wait`, the events stream, reports
and the retention purge rely on it), and the new job starts with its own time limit and
retries rather than what the old one left. The old job's checkpoints stay in its directory
(a channel can hand them to the new one). Only the owner may requeue: the job runs as
whoever submits it, so anyone else makes a job of their own with `trainq submit --like`.
"""

from __future__ import annotations

import structlog

from trainq.core.errors import Conflict, Forbidden
from trainq.core.states import TERMINAL
from trainq.core.wire import JobRecord
from trainqd.access.admission import admit
from trainqd.api.handlers.common import Handlers, job_id_of
from trainqd.api.routing import Request, Response, Route
from trainqd.scheduling.dependencies import check_named

log = structlog.get_logger("trainqd.again")


class AgainRoutes:
    def __init__(self, api: Handlers) -> None:
        self.api = api

    async def requeue(self, request: Request) -> Response:
        api, uid = self.api, request.caller.uid
        old = api.store.get(job_id_of(request))
        if old.owner.uid != uid:
            raise Forbidden(
                f"job {old.id} belongs to {old.owner.user}; only its owner may requeue it "
                f"(`trainq submit --like {old.id}` makes a job of your own from it)"
            )
        if old.state not in TERMINAL:
            raise Conflict(f"job {old.id} is {old.state}; only an ended job can be requeued")
        # Admitted again as a new submission: the classes, images and paths of today.
        owner = await admit(old.spec, uid, api.host(), api.authorizer)
        check_named([old.spec], api.store)
        job = await api.submit_one(old.spec, owner)
        api.control.submitted(job)
        log.info("requeued", job_id=old.id, new_job_id=job.id, user=owner.user)
        return Response(201, api.record(job.id, uid))

    def routes(self) -> list[Route]:
        return [
            Route(
                "POST",
                "/v1/jobs/{id}/requeue",
                self.requeue,
                "Run an ended job again, as a new job with the same spec (its owner only)",
                response_model=JobRecord,
            ),
        ]
