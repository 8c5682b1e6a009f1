"""What the handlers of every resource share: a job's id read from the request's path, and
`Handlers`, the part of the API that the resource modules (sharing, again, tunes) use. They
are given the API as a `Handlers`, so none of them imports jobs.py, which builds them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from trainq.core.errors import InvalidRequest, NotFound
from trainq.core.spec import JobSpec
from trainq.core.wire import JobRecord
from trainqd.access.admission import HostFacts
from trainqd.access.authorization import Authorizer
from trainqd.api.control import JobControl
from trainqd.api.routing import INT64_MAX, Request, decimal
from trainqd.attempts.jobdir import JobDirs
from trainqd.config import Config
from trainqd.gpus.base import GpuDevice
from trainqd.store.store import JobOwner, JobRow, Store


def job_id_of(request: Request) -> int:
    """The job id of the request's path; InvalidRequest for what is not one."""
    text = request.params["id"]
    number = decimal(text)
    if number is None or number < 0:
        raise InvalidRequest(f"a job id is a number, not {text!r}")
    if number > INT64_MAX:  # beyond any id the database can hold
        raise NotFound(f"no job {text}")
    return number


class Handlers(Protocol):
    """The API's parts and answers that every resource's handlers use."""

    @property
    def store(self) -> Store: ...

    @property
    def control(self) -> JobControl: ...

    @property
    def dirs(self) -> JobDirs: ...

    @property
    def devices(self) -> Mapping[int, GpuDevice]: ...

    @property
    def config(self) -> Config: ...

    @property
    def authorizer(self) -> Authorizer: ...

    def host(self) -> HostFacts: ...

    def record(self, job_id: int, uid: int) -> JobRecord:
        """The job as `uid` may see it."""
        ...

    async def submit_one(self, spec: JobSpec, owner: JobOwner) -> JobRow:
        """Commit one admitted spec."""
        ...
