"""The handlers that show jobs: the list, in pages, one job, and its GPU samples."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from trainq.core.errors import InvalidRequest
from trainq.core.states import UNFINISHED, JobState
from trainq.core.wire import JobList, JobRecord, JobSamples
from trainqd import gc_tuning
from trainqd.access.authorization import Sight
from trainqd.api.control import JobControl
from trainqd.api.handlers.common import job_id_of
from trainqd.api.routing import Encoded, Request, Response
from trainqd.api.views import job_record, job_samples
from trainqd.attempts.jobdir import JobDirs
from trainqd.scheduling.sampling import Sampler
from trainqd.store import JobRow, Store

# A listing comes in pages (a cursor in `next`) so that no request holds the loop for long.
PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass
class JobViews:
    """`GET /v1/jobs`, a job and its samples, with what they need of the API."""

    store: Store
    control: JobControl
    dirs: JobDirs
    sampler: Sampler
    instance: str
    record: Callable[[int, int], JobRecord]  # a job as a uid may see it
    reveal: Callable[[int, JobRow], Sight]
    listing: Callable[[], anyio.CapacityLimiter]  # one page of records built at a time

    async def list_jobs(self, request: Request) -> Response:
        everything = request.query_bool("all")
        state = request.query_str("state")
        user = request.query_str("user")
        group = request.query_int("group", None, min=1)
        states: list[JobState] | None = None
        if state is not None:
            try:
                states = [JobState(state.upper())]
            except ValueError:
                raise InvalidRequest(
                    f"unknown state {state!r}; one of {', '.join(JobState)}"
                ) from None
        elif not everything:
            states = sorted(UNFINISHED)
        limit = request.query_int("limit", PAGE_SIZE, min=1, max=MAX_PAGE_SIZE)
        after = request.query_int("after", 0, min=0)
        assert limit is not None  # a default was given
        assert after is not None
        # Read, built and encoded in a worker thread: a page of 1,000 jobs takes tens of
        # milliseconds, which the event loop must not spend (the others' requests wait on it).
        waiting = dict(self.control.waiting)
        use = dict(self.sampler.attempts)
        uid = request.caller.uid
        place = self.control.place

        def build() -> bytes:
            with gc_tuning.paused():
                return page_of_records()

        def page_of_records() -> bytes:
            page, total, more = self.store.page(states, user, after, limit, group)
            records = [
                job_record(
                    j,
                    attempts,
                    self.dirs,
                    waiting.get(j.id),
                    reveal=self.reveal(uid, j),
                    instance=self.instance,
                    use=use.get(j.id),
                    place=place(j.id),
                )
                for j, attempts in page
            ]
            cursor = str(page[-1][0].id) if more and page else None
            return JobList(jobs=records, total=total, next=cursor).model_dump_json().encode()

        payload = await anyio.to_thread.run_sync(build, limiter=self.listing())
        return Response(200, Encoded(payload))

    async def get_job(self, request: Request) -> Response:
        return Response(200, self.record(job_id_of(request), request.caller.uid))

    async def job_samples(self, request: Request) -> Response:
        """Its running attempt's GPU samples, for everyone: what `ls` shows of the last one."""
        job_id = job_id_of(request)
        self.store.get(job_id)  # 404 for no such job
        use = self.sampler.attempts.get(job_id)
        if use is None:
            return Response(200, JobSamples(job_id=job_id))
        return Response(200, job_samples(job_id, use))
