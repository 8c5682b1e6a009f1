"""The handlers that stop jobs: one, or every unfinished job of a group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainq.core.errors import Forbidden, InvalidRequest, NotFound
from trainq.core.wire import GroupStopped, JobRecord, StopRequest
from trainqd.api.control import JobControl
from trainqd.api.handlers.common import job_id_of
from trainqd.api.routing import INT64_MAX, Request, Response, decimal
from trainqd.store import Store


@dataclass
class Stops:
    """A job's stop and a group's, with what they need of the API."""

    store: Store
    control: JobControl
    record: Callable[[int, int], JobRecord]  # a job as a uid may see it

    def _group_id(self, request: Request) -> int:
        text = request.params["id"]
        group = decimal(text)
        if group is None or group < 1:
            raise InvalidRequest(f"a group id is a job id (a number), not {text!r}")
        if group > INT64_MAX or not self.store.group_exists(group):
            raise NotFound(f"no group {text}")
        return group

    async def stop_group(self, request: Request) -> Response:
        """Stop every unfinished job of a group that the caller may stop."""
        group = self._group_id(request)
        body = request.model(StopRequest, allow_empty=True)
        members = self.store.unfinished_of_group(group)
        stopped, not_allowed = await self.control.stop_many(
            members, request.caller.uid, body.grace_seconds
        )
        if not_allowed and not stopped:
            raise Forbidden(f"you may not stop the jobs of group {group}")
        return Response(202, GroupStopped(group_id=group, stopped=stopped, not_allowed=not_allowed))

    async def stop_job(self, request: Request) -> Response:
        job_id = job_id_of(request)
        body = request.model(StopRequest, allow_empty=True)
        self.control.stop(job_id, request.caller.uid, body.grace_seconds)
        return Response(202, self.record(job_id, request.caller.uid))
