"""The API's handlers, one per request, joined by one route table (DESIGN §6)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio

from trainq.core import __version__
from trainq.core.errors import InvalidRequest, NotFound
from trainq.core.spec import JobSpec
from trainq.core.states import UNFINISHED, JobState
from trainq.core.wire import (
    EventRecord,
    GpuList,
    GpuRecord,
    HealthRecord,
    JobList,
    JobRecord,
    StopRequest,
)
from trainqd.admission import HostFacts, admit
from trainqd.api.http import (
    INT64_MAX,
    QueryParam,
    Request,
    Response,
    Route,
    StreamResponse,
    decimal,
)
from trainqd.leftovers import job_of_process
from trainqd.scheduler import Scheduler
from trainqd.store import JobRow, Store
from trainqd.streams import check_logs, event_lines, log_chunks
from trainqd.views import job_record


@dataclass
class Api:
    scheduler: Scheduler
    started_at: float
    openapi: Callable[[], dict[str, Any]]
    stopping: bool = False

    @property
    def store(self) -> Store:
        return self.scheduler.store

    def _reveal(self, uid: int, job: JobRow) -> bool:
        return uid == job.owner.uid or self.scheduler.authorizer.is_admin(uid)

    def _record(self, job_id: int, uid: int) -> JobRecord:
        job = self.store.get(job_id)
        attempts = self.store.attempts([job_id])[job_id]
        return job_record(
            job,
            attempts,
            self.scheduler.dirs,
            self.scheduler.waiting.get(job_id),
            reveal=self._reveal(uid, job),
            instance=self.scheduler.settings.instance,
        )

    def _job_id(self, request: Request) -> int:
        text = request.params["id"]
        job_id = decimal(text)
        if job_id is None or job_id < 0:
            raise InvalidRequest(f"a job id is a number, not {text!r}")
        if job_id > INT64_MAX:  # beyond any id the database can hold
            raise NotFound(f"no job {text}")
        return job_id

    def host(self) -> HostFacts:
        return HostFacts(
            gpu_backend=self.scheduler.gpus.kind,
            gpu_count=len(self.scheduler.devices),
            default_engine=self.scheduler.config.default_engine,
            allowed_images=tuple(self.scheduler.config.allowed_images),
        )

    # -- handlers ------------------------------------------------------------------------

    async def submit(self, request: Request) -> Response:
        spec = request.model(JobSpec)
        owner = await admit(spec, request.caller.uid, self.host(), self.scheduler.authorizer)
        job = self.store.submit(spec, owner, time.time())
        self.scheduler.submitted(job)
        return Response(201, self._record(job.id, request.caller.uid))

    async def list_jobs(self, request: Request) -> Response:
        everything = request.query_bool("all")
        state = request.query_str("state")
        user = request.query_str("user")
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
        jobs = self.store.jobs(states)
        if user is not None:
            jobs = [j for j in jobs if j.owner.user == user]
        attempts = self.store.attempts([j.id for j in jobs])
        waiting = self.scheduler.waiting
        uid = request.caller.uid
        records = [
            job_record(
                j,
                attempts[j.id],
                self.scheduler.dirs,
                waiting.get(j.id),
                reveal=self._reveal(uid, j),
                instance=self.scheduler.settings.instance,
            )
            for j in jobs
        ]
        return Response(200, JobList(jobs=records))

    async def get_job(self, request: Request) -> Response:
        return Response(200, self._record(self._job_id(request), request.caller.uid))

    async def stop_job(self, request: Request) -> Response:
        job_id = self._job_id(request)
        body = request.model(StopRequest, allow_empty=True)
        self.scheduler.stop(job_id, request.caller.uid, body.grace_seconds)
        return Response(202, self._record(job_id, request.caller.uid))

    async def logs(self, request: Request) -> StreamResponse:
        job_id = self._job_id(request)
        job = self.store.get(job_id)  # 404 before the stream starts
        self.scheduler.authorizer.require_manage(request.caller.uid, job, "read the logs of")
        stream = request.query_str("stream", "both") or "both"
        if stream not in ("stdout", "stderr", "both"):
            raise InvalidRequest("query parameter 'stream' must be stdout, stderr or both")
        attempt = request.query_int("attempt", None, min=1, max=max(1, job.attempt_count))
        if attempt or job.attempt_count:  # a log the owner made a FIFO or a link: one line
            await anyio.to_thread.run_sync(
                check_logs, self.scheduler.dirs, job_id, attempt or job.attempt_count, stream
            )
        chunks = log_chunks(
            self.store,
            self.scheduler.dirs,
            self.scheduler.notifier,
            job_id,
            attempt=attempt,
            stream=stream,
            follow=request.query_bool("follow"),
        )
        return StreamResponse("text/plain; charset=utf-8", chunks)

    async def events(self, request: Request) -> StreamResponse:
        job_id = request.query_int("job", None, min=1)
        if job_id is not None:
            self.store.get(job_id)
        since = request.query_int("since", None, min=0)
        if since is None:
            since = self.store.last_event_id()
        chunks = event_lines(self.store, self.scheduler.notifier, job_id, since)
        return StreamResponse("application/x-ndjson", chunks)

    async def gpus(self, request: Request) -> Response:
        scheduler = self.scheduler
        holder = {
            gpu: job.id
            for job in self.store.jobs([JobState.RUNNING, JobState.STOPPING])
            for gpu in job.gpus
        }
        usage = {u.index: u for u in scheduler.gpus.usage()} if scheduler.devices else {}
        records = []
        for index, device in sorted(scheduler.devices.items()):
            live = usage.get(index)
            pids = sorted(live.pids) if live else []
            job_id = holder.get(index)
            jobs_dir = str(scheduler.dirs.root)
            foreign = [p for p in pids if job_id is None or job_of_process(p, jobs_dir) != job_id]
            records.append(
                GpuRecord(
                    index=index,
                    uuid=device.uuid,
                    name=device.name,
                    memory_total_mib=device.memory_total_mib,
                    memory_used_mib=None if live is None else live.memory_used_mib,
                    job_id=job_id,
                    foreign_pids=foreign,
                    available=job_id is None and not foreign and not (live and live.error),
                )
            )
        return Response(200, GpuList(backend=scheduler.gpus.kind, gpus=records))

    async def health(self, request: Request) -> Response:
        return Response(
            200,
            HealthRecord(
                status="stopping" if self.stopping else "ok",
                version=__version__,
                pid=os.getpid(),
                uid=os.geteuid(),
                started_at=datetime.fromtimestamp(self.started_at, UTC),
                gpu_backend=self.scheduler.gpus.kind,
                gpus=len(self.scheduler.devices),
                cpu_slots=self.scheduler.config.cpu_slots,
                jobs=self.store.counts(),
            ),
        )

    async def openapi_document(self, request: Request) -> Response:
        return Response(200, self.openapi())

    def routes(self) -> list[Route]:
        job_id = "{id}"
        return [
            Route(
                "POST",
                "/v1/jobs",
                self.submit,
                "Submit a job",
                request_model=JobSpec,
                response_model=JobRecord,
                status=201,
            ),
            Route(
                "GET",
                "/v1/jobs",
                self.list_jobs,
                "List jobs",
                response_model=JobList,
                query=[
                    QueryParam("all", "boolean", "include ended jobs", False),
                    QueryParam("state", "string", "only jobs in this state"),
                    QueryParam("user", "string", "only this user's jobs"),
                ],
            ),
            Route(
                "GET", f"/v1/jobs/{job_id}", self.get_job, "Show a job", response_model=JobRecord
            ),
            Route(
                "POST",
                f"/v1/jobs/{job_id}/stop",
                self.stop_job,
                "Stop a job",
                request_model=StopRequest,
                response_model=JobRecord,
                status=202,
                body_optional=True,
            ),
            Route(
                "GET",
                f"/v1/jobs/{job_id}/logs",
                self.logs,
                "A job's stdout and stderr",
                streaming_content_type="text/plain; charset=utf-8",
                query=[
                    QueryParam("follow", "boolean", "keep streaming until the job ends", False),
                    QueryParam("stream", "string", "stdout, stderr or both", "both"),
                    QueryParam(
                        "attempt", "integer", "one attempt (default: the latest)", minimum=1
                    ),
                ],
            ),
            Route("GET", "/v1/gpus", self.gpus, "The GPU inventory", response_model=GpuList),
            Route(
                "GET",
                "/v1/events",
                self.events,
                "Job state changes as they happen",
                response_model=EventRecord,
                streaming_content_type="application/x-ndjson",
                query=[
                    QueryParam("job", "integer", "only this job's events", minimum=1),
                    QueryParam(
                        "since",
                        "integer",
                        "replay stored events after this id (default: none)",
                        minimum=0,
                    ),
                ],
            ),
            Route("GET", "/v1/health", self.health, "Daemon health", response_model=HealthRecord),
            Route("GET", "/v1/openapi.json", self.openapi_document, "This API's OpenAPI document"),
        ]
