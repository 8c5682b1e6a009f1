"""The API: its handlers, one module per concern (submission, job_views, stops, outputs,
host, and the resources of sharing, again, tunes, ui), built with what each needs and joined
by one route table (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from trainq.core import __version__
from trainq.core.spec import JobSpec
from trainq.core.wire import (
    EventRecord,
    GpuList,
    GroupStopped,
    HealthRecord,
    JobList,
    JobMetrics,
    JobRecord,
    JobSamples,
    StopRequest,
    SubmittedGroup,
    UsageReport,
    UserList,
)
from trainqd.access.admission import HostFacts
from trainqd.access.authorization import Authorizer, Sight
from trainqd.api.control import JobControl
from trainqd.api.handlers.again import AgainRoutes
from trainqd.api.handlers.host import HostViews
from trainqd.api.handlers.job_views import MAX_PAGE_SIZE, PAGE_SIZE, JobViews
from trainqd.api.handlers.outputs import MAX_TAIL_LINES, Outputs
from trainqd.api.handlers.sharing import SharingRoutes
from trainqd.api.handlers.stops import Stops
from trainqd.api.handlers.submission import SUBMIT_MAX_BODY, Submission
from trainqd.api.handlers.tunes import TuneRoutes
from trainqd.api.handlers.ui import ui_routes
from trainqd.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from trainqd.api.metrics import Metrics
from trainqd.api.openapi import build_openapi
from trainqd.api.routing import QueryParam, Request, Response, Route
from trainqd.api.views import job_record
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.snapshots import Snapshots
from trainqd.config import Config
from trainqd.experiments.metric_watch import MetricWatch
from trainqd.experiments.tuner import Tuner
from trainqd.gpus.base import GpuBackend, GpuDevice
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.removal import Removal
from trainqd.scheduling.sampling import Sampler
from trainqd.store import JobOwner, JobRow, Store
from trainqd.store.submit_tokens import IDEMPOTENCY_ABOUT, IDEMPOTENCY_HEADER


@dataclass
class Api:
    """The handlers, built with what they need; the scheduler is reached only through the
    narrow `JobControl`."""

    store: Store
    control: JobControl
    dirs: JobDirs
    notifier: ChangeNotifier
    gpu_backend: GpuBackend
    devices: Mapping[int, GpuDevice]
    config: Config
    sampler: Sampler
    metric_watch: MetricWatch
    authorizer: Authorizer
    instance: str
    metrics: Metrics
    removal: Removal  # of ended jobs, by `trainq rm` (sharing.py) as by the retention purge
    started_at: float
    tuner: Tuner | None = None  # tuning experiments (tune_routes.py)
    _openapi: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _listing: anyio.CapacityLimiter | None = field(default=None, init=False, repr=False)
    sharing: SharingRoutes = field(init=False, repr=False)  # hold, update, rm, drain
    again: AgainRoutes = field(init=False, repr=False)  # requeue
    snapshots: Snapshots = field(init=False, repr=False)  # sources copied at submit
    tunes: TuneRoutes | None = field(default=None, init=False, repr=False)
    submission: Submission = field(init=False, repr=False)  # POST /v1/jobs
    views: JobViews = field(init=False, repr=False)  # the list, a job, its samples
    stops: Stops = field(init=False, repr=False)  # a job's stop, a group's
    outputs: Outputs = field(init=False, repr=False)  # logs, metrics, events
    host_views: HostViews = field(init=False, repr=False)  # gpus, users, health, report

    def __post_init__(self) -> None:
        self.sharing = SharingRoutes(self, self.removal)
        self.again = AgainRoutes(self)
        self.snapshots = Snapshots(self.dirs, self.config)
        if self.tuner is not None:
            self.tunes = TuneRoutes(self, self.tuner)
        self.submission = Submission(
            store=self.store,
            control=self.control,
            dirs=self.dirs,
            config=self.config,
            authorizer=self.authorizer,
            instance=self.instance,
            snapshots=self.snapshots,
            record=self.record,
            reveal=self._reveal,
            host=self.host,
            listing=self._listing_limiter,
        )
        self.views = JobViews(
            store=self.store,
            control=self.control,
            dirs=self.dirs,
            sampler=self.sampler,
            instance=self.instance,
            record=self.record,
            reveal=self._reveal,
            listing=self._listing_limiter,
        )
        self.stops = Stops(store=self.store, control=self.control, record=self.record)
        self.outputs = Outputs(
            store=self.store,
            dirs=self.dirs,
            notifier=self.notifier,
            authorizer=self.authorizer,
            metric_watch=self.metric_watch,
        )
        self.host_views = HostViews(
            store=self.store,
            control=self.control,
            dirs=self.dirs,
            gpu_backend=self.gpu_backend,
            devices=self.devices,
            config=self.config,
            sampler=self.sampler,
            metrics=self.metrics,
            started_at=self.started_at,
        )

    def _reveal(self, uid: int, job: JobRow) -> Sight:
        return self.authorizer.sight(uid, job)

    def record(self, job_id: int, uid: int) -> JobRecord:
        job = self.store.get(job_id)
        attempts = self.store.attempts([job_id])[job_id]
        return job_record(
            job,
            attempts,
            self.dirs,
            self.control.waiting.get(job_id),
            reveal=self._reveal(uid, job),
            instance=self.instance,
            use=self.sampler.attempts.get(job_id),
            place=self.control.place(job_id),
        )

    def shutting_down(self) -> None:
        """trainqd stops: the health answer says so from now on."""
        self.host_views.stopping = True

    def _listing_limiter(self) -> anyio.CapacityLimiter:
        # One page built at a time: each builder thread competes with the event loop for the
        # interpreter lock, so ten at once would make every other request wait ten turns.
        if self._listing is None:
            self._listing = anyio.CapacityLimiter(1)
        return self._listing

    async def submit_one(self, spec: JobSpec, owner: JobOwner) -> JobRow:
        """Commit one admitted spec (`Handlers`: `trainq requeue`)."""
        return await self.submission.submit_one(spec, owner)

    def host(self) -> HostFacts:
        return HostFacts(
            # Under Slurm the cluster's GPUs count, not this host's: sbatch judges them.
            gpu_backend="slurm" if self.config.backend == "slurm" else self.gpu_backend.kind,
            gpu_count=len(self.devices),
            default_engine=self.config.default_engine,
            allowed_images=tuple(self.config.allowed_images),
            classes=self.config.job_classes,
            default_class=self.config.default_class,
            max_channels=self.config.max_channels_per_job,
            path_check_seconds=self.config.path_check_timeout_seconds,
            mail=self.config.mail_command is not None,
            cpu_slots=self.config.cpu_slots,
        )

    async def openapi_document(self, request: Request) -> Response:
        if self._openapi is None:  # built on the first ask, from the routes themselves
            self._openapi = build_openapi(self.routes(), version=__version__)
        return Response(200, self._openapi)

    def routes(self) -> list[Route]:
        job_id = "{id}"
        return [
            Route(
                "POST",
                "/v1/jobs",
                self.submission.submit,
                "Submit a job, or a list of jobs as one group (a sweep)",
                request_model=JobSpec | list[JobSpec],
                response_model=JobRecord | SubmittedGroup,
                status=201,
                # A list of specs (a sweep) is one request: 10,000 of them run to megabytes.
                max_body=SUBMIT_MAX_BODY,
                headers=[(IDEMPOTENCY_HEADER, IDEMPOTENCY_ABOUT)],
            ),
            Route(
                "POST",
                "/v1/groups/{id}/stop",
                self.stops.stop_group,
                "Stop every unfinished job of a group (a sweep) that you may stop",
                request_model=StopRequest,
                response_model=GroupStopped,
                status=202,
                body_optional=True,
            ),
            Route(
                "GET",
                "/v1/jobs",
                self.views.list_jobs,
                "List jobs",
                response_model=JobList,
                query=[
                    QueryParam("all", "boolean", "include ended jobs", False),
                    QueryParam("state", "string", "only jobs in this state"),
                    QueryParam("user", "string", "only this user's jobs"),
                    QueryParam("group", "integer", "only this group's jobs (a sweep)", minimum=1),
                    QueryParam("limit", "integer", "jobs per page", PAGE_SIZE, 1, MAX_PAGE_SIZE),
                    QueryParam("after", "integer", "the `next` of the previous page", 0, 0),
                ],
            ),
            Route(
                "GET",
                f"/v1/jobs/{job_id}",
                self.views.get_job,
                "Show a job",
                response_model=JobRecord,
            ),
            Route(
                "GET",
                f"/v1/jobs/{job_id}/samples",
                self.views.job_samples,
                "The GPU samples trainqd keeps of a job's running attempt",
                response_model=JobSamples,
            ),
            Route(
                "POST",
                f"/v1/jobs/{job_id}/stop",
                self.stops.stop_job,
                "Stop a job",
                request_model=StopRequest,
                response_model=JobRecord,
                status=202,
                body_optional=True,
            ),
            Route(
                "GET",
                f"/v1/jobs/{job_id}/logs",
                self.outputs.logs,
                "A job's stdout and stderr",
                streaming_content_type="text/plain; charset=utf-8",
                query=[
                    QueryParam("follow", "boolean", "keep streaming until the job ends", False),
                    QueryParam("stream", "string", "stdout, stderr or both", "both"),
                    QueryParam("node", "integer", "a job of several nodes: node N's", 1, minimum=1),
                    QueryParam(
                        "attempt", "integer", "one attempt (default: the latest)", minimum=1
                    ),
                    QueryParam(
                        "tail",
                        "integer",
                        "from the last N lines only",
                        minimum=0,
                        maximum=MAX_TAIL_LINES,
                    ),
                    QueryParam("since", "string", "from this time on (Unix seconds)"),
                    QueryParam(
                        "stamps",
                        "boolean",
                        "one JSON line per line of output: its time, its stream and its text",
                        False,
                    ),
                ],
            ),
            Route(
                "GET",
                f"/v1/jobs/{job_id}/metrics",
                self.outputs.job_metrics,
                "A job's metric reports, every kept point of each attempt",
                response_model=JobMetrics,
            ),
            Route(
                "GET", "/v1/gpus", self.host_views.gpus, "The GPU inventory", response_model=GpuList
            ),
            Route(
                "GET",
                "/v1/events",
                self.outputs.events,
                "Job state changes as they happen",
                response_model=EventRecord,
                streaming_content_type="application/x-ndjson",
                query=[
                    QueryParam("job", "integer", "only this job's events", minimum=1),
                    QueryParam(
                        "since",
                        "integer",
                        "replay stored events after this id (default: none); older than "
                        "the history kept, the Trainq-Events-Pruned-Before header says "
                        "before which id only each job's latest event is kept",
                        minimum=0,
                    ),
                ],
            ),
            Route(
                "GET",
                "/v1/health",
                self.host_views.health,
                "Daemon health",
                response_model=HealthRecord,
            ),
            Route(
                "GET",
                "/v1/users",
                self.host_views.users,
                "Each user's recent usage, share, and running and waiting jobs",
                response_model=UserList,
            ),
            Route(
                "GET",
                "/v1/metrics",
                self.host_views.prometheus,
                "Metrics in the Prometheus text format",
                streaming_content_type=METRICS_CONTENT_TYPE,
            ),
            Route(
                "GET",
                "/v1/report",
                self.host_views.report,
                "GPU-hours, jobs, failures and idle GPU-hours per user",
                response_model=UsageReport,
                query=[
                    QueryParam("since", "string", "the period: 30d, 12h, 90m, 2w", "30d"),
                    QueryParam("by", "string", "how rows are grouped: user or class", "user"),
                ],
            ),
            Route("GET", "/v1/openapi.json", self.openapi_document, "This API's OpenAPI document"),
            *self.sharing.routes(),
            *self.again.routes(),
            *(self.tunes.routes() if self.tunes is not None else []),
            *ui_routes(),
        ]
