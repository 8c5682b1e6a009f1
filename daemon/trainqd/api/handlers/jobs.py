"""The API's handlers, one per request, joined by one route table (docs/architecture.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio

from trainq.core import __version__
from trainq.core.errors import Forbidden, InvalidRequest, InvalidSpec, NotFound, PayloadTooLarge
from trainq.core.nodes import host_name, is_gang
from trainq.core.spec import JobSpec
from trainq.core.states import UNFINISHED, JobState
from trainq.core.wire import (
    EventRecord,
    GpuList,
    GpuRecord,
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
from trainqd import gc_tuning
from trainqd.access.admission import HostFacts, admit, check_queue_room
from trainqd.access.authorization import Authorizer, Sight
from trainqd.access.budgets import SpecBudget, check_spec_sizes
from trainqd.access.identity import account
from trainqd.api.control import JobControl
from trainqd.api.handlers.again import AgainRoutes
from trainqd.api.handlers.common import job_id_of
from trainqd.api.handlers.sharing import SharingRoutes, drain_record, drain_records
from trainqd.api.handlers.tunes import TuneRoutes
from trainqd.api.handlers.ui import ui_routes
from trainqd.api.limits import ServerLimits
from trainqd.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from trainqd.api.metrics import Metrics
from trainqd.api.openapi import build_openapi
from trainqd.api.routing import (
    INT64_MAX,
    Encoded,
    QueryParam,
    Request,
    Response,
    Route,
    StreamResponse,
    decimal,
)
from trainqd.api.streams import (
    EVENTS_PRUNED_HEADER,
    REPLAY_THREADS,
    check_logs,
    event_lines,
    log_chunks,
)
from trainqd.api.submissions import (
    PARSE_ON_LOOP_BYTES,
    admit_all,
    is_list,
    judged_alike,
    parse_specs,
)
from trainqd.api.views import job_record, job_samples
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.leftovers import job_of_process
from trainqd.attempts.snapshots import Snapshots
from trainqd.config import Config
from trainqd.experiments.metric_watch import MetricWatch
from trainqd.experiments.tuner import Tuner
from trainqd.gpus.base import GpuBackend, GpuDevice, GpuUsage
from trainqd.observe.report import period_seconds, usage_report
from trainqd.scheduling.dependencies import check_named
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.removal import Removal
from trainqd.scheduling.sampling import Sampler
from trainqd.store import JobOwner, JobRow, NewJobs, Store, Submitted, SubmitToken, TokenUsed
from trainqd.store.group_commit import GroupCommit
from trainqd.store.rows import HOST
from trainqd.store.submit_tokens import (
    IDEMPOTENCY_ABOUT,
    IDEMPOTENCY_HEADER,
    all_there,
    same_request,
    token_of,
)

# The body of one POST /v1/jobs, which may hold a list of specs (max_jobs_per_submit of them).
SUBMIT_MAX_BODY = 16 << 20
ONE_SPEC_MAX_BODY = ServerLimits().max_body

# A listing comes in pages (a cursor in `next`) so that no request holds the loop for long.
PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


def foreign_processes(
    gpus: GpuBackend, holder: dict[int, int], jobs_dir: str
) -> dict[int, tuple[GpuUsage, list[int]]]:
    """Each GPU's live state and the processes on it that are not its holding job's, for
    `trainq gpus` (blocking: NVML and /proc)."""
    found: dict[int, tuple[GpuUsage, list[int]]] = {}
    for live in gpus.usage():
        job_id = holder.get(live.index)
        pids = [
            p for p in sorted(live.pids) if job_id is None or job_of_process(p, jobs_dir) != job_id
        ]
        found[live.index] = (live, pids)
    return found


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
    stopping: bool = False  # trainqd is shutting down (`shutting_down`)
    tuner: Tuner | None = None  # tuning experiments (tune_routes.py)
    _openapi: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _listing: anyio.CapacityLimiter | None = field(default=None, init=False, repr=False)
    _replays: anyio.CapacityLimiter | None = field(default=None, init=False, repr=False)
    _commits: GroupCommit | None = field(default=None, init=False, repr=False)
    # Jobs each user has in submissions not yet committed (max_unfinished_jobs_per_user).
    _submitting: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    # Bytes of specs each user has in submissions not yet committed (budgets.py).
    _spec_budget: SpecBudget = field(default_factory=SpecBudget, init=False, repr=False)
    sharing: SharingRoutes = field(init=False, repr=False)  # hold, update, rm, drain
    again: AgainRoutes = field(init=False, repr=False)  # requeue
    snapshots: Snapshots = field(init=False, repr=False)  # sources copied at submit
    tunes: TuneRoutes | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.sharing = SharingRoutes(self, self.removal)
        self.again = AgainRoutes(self)
        self.snapshots = Snapshots(self.dirs, self.config)
        if self.tuner is not None:
            self.tunes = TuneRoutes(self, self.tuner)

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
        self.stopping = True

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
        )

    # -- handlers ------------------------------------------------------------------------

    @property
    def commits(self) -> GroupCommit:
        """Where submissions are committed, together with those that arrive with them."""
        if self._commits is None:
            self._commits = GroupCommit(self.store)
        return self._commits

    @contextmanager
    def _queue_room(self, owner: JobOwner, sizes: Sequence[int]) -> Iterator[None]:
        """Room in the owner's queue for jobs whose specs take `sizes` bytes, held while
        they are committed: checked and taken in one step on the loop, so concurrent
        submissions cannot all pass it."""
        stored = self.store.unfinished_spec_bytes(owner.uid)
        budget = self.config.max_unfinished_spec_bytes_per_user
        with (
            self._spec_budget.room(owner.uid, owner.user, stored, sum(sizes), budget),
            self._job_room(owner, len(sizes)),
        ):
            yield

    @contextmanager
    def _job_room(self, owner: JobOwner, adding: int) -> Iterator[None]:
        most = self.config.max_unfinished_jobs_per_user
        busy = self._submitting.get(owner.uid, 0)
        # Counting one user's jobs walks them all: only needed once all users' could pass.
        if most and self.store.unfinished_count() + busy + adding > most:
            have = self.store.unfinished_count(owner.uid) + busy
            check_queue_room(owner.user, have, adding, most)
        self._submitting[owner.uid] = busy + adding
        try:
            yield
        finally:
            left = self._submitting[owner.uid] - adding
            if left:
                self._submitting[owner.uid] = left
            else:
                del self._submitting[owner.uid]

    async def _replay(self, token: SubmitToken, submitted: Submitted) -> Response:
        """The answer a repeated submission gets: the jobs its token first queued, as they
        are now, in the shape of the first answer (submit_tokens.py). A sweep's records are
        read and built in a worker thread, as a listing's are."""
        same_request(token, submitted)
        first = submitted.first_id
        if not submitted.grouped:
            try:
                found = [self.store.get(first)]
            except NotFound:
                found = []
            (job,) = all_there(token, submitted, found)
            return Response(201, self.record(job.id, token.uid))
        waiting = dict(self.control.waiting)

        def build() -> bytes:
            page, _, _ = self.store.page(None, None, first - 1, submitted.job_count, group=first)
            jobs = all_there(token, submitted, [job for job, _ in page])
            reveal = self._reveal(token.uid, jobs[0])
            records = [
                job_record(
                    job, attempts, self.dirs, waiting.get(job.id), reveal=reveal,
                    instance=self.instance,
                )
                for job, attempts in page
            ]  # fmt: skip
            return SubmittedGroup(group_id=first, jobs=records).model_dump_json().encode()

        if self._listing is None:
            self._listing = anyio.CapacityLimiter(1)
        payload = await anyio.to_thread.run_sync(build, limiter=self._listing)
        return Response(201, Encoded(payload))

    async def submit(self, request: Request) -> Response:
        given = request.header(IDEMPOTENCY_HEADER.lower())
        token = token_of(given, request.body, request.caller.uid)
        if token is not None and (earlier := self.store.submitted_with(token.uid, token.token)):
            return await self._replay(token, earlier)
        if is_list(request.body):
            return await self.submit_list(request, token)
        if len(request.body) > ONE_SPEC_MAX_BODY:  # the larger limit is a list's alone
            raise PayloadTooLarge(f"request body is larger than {ONE_SPEC_MAX_BODY} bytes")
        spec = request.model(JobSpec)
        texts = [spec.model_dump_json()]
        check_spec_sizes(texts, self.config.max_spec_bytes, listed=False)  # before any child
        owner = await admit(spec, request.caller.uid, self.host(), self.authorizer)
        check_named([spec], self.store)
        try:
            job = await self.submit_one(spec, owner, texts=texts, token=token)
        except TokenUsed as used:  # the same token, sent twice at once: queued once
            assert token is not None
            return await self._replay(token, used.submitted)
        self.control.submitted(job)
        return Response(201, self.record(job.id, request.caller.uid))

    async def submit_one(
        self,
        spec: JobSpec,
        owner: JobOwner,
        *,
        texts: list[str] | None = None,
        token: SubmitToken | None = None,
    ) -> JobRow:
        """Commit one admitted spec, its source copied first where it has a snapshot."""
        texts = texts or [spec.model_dump_json()]
        sizes = check_spec_sizes(texts, self.config.max_spec_bytes, listed=False)
        staging = await self.snapshots.take(spec, account(owner.uid))
        try:
            with self._queue_room(owner, sizes):
                (job,) = await self.commits.submit(
                    NewJobs([spec], owner, spec_json=texts, token=token)
                )
        except BaseException:
            if staging is not None:
                self.snapshots.discard(staging)
            raise
        if staging is not None:
            self.snapshots.place(staging, job.id)
        return job

    async def submit_list(self, request: Request, token: SubmitToken | None = None) -> Response:
        """A list of specs: all parsed and admitted first, then queued in one transaction
        as one group. Parsing 10,000 specs and building their records take a worker
        thread; the inserts and their one commit stay on the loop (group_commit.py)."""
        cap = self.config.max_jobs_per_submit

        most_bytes = self.config.max_spec_bytes

        def parse() -> tuple[list[JobSpec], list[int], list[str], list[int]]:
            specs = parse_specs(request, cap)
            texts = [spec.model_dump_json() for spec in specs]
            sizes = check_spec_sizes(texts, most_bytes, listed=True)
            return specs, judged_alike(specs), texts, sizes

        if len(request.body) <= PARSE_ON_LOOP_BYTES:
            specs, firsts, texts, sizes = parse()
        else:
            specs, firsts, texts, sizes = await anyio.to_thread.run_sync(parse)
        uid = request.caller.uid
        owner = await admit_all(specs, firsts, uid, self.host(), self.authorizer)
        check_named([specs[index] for index in firsts], self.store)
        if any(spec.snapshot for spec in specs):
            raise InvalidSpec("snapshot: a sweep's jobs run their source as it is when each starts")
        submission = NewJobs(specs, owner, grouped=True, spec_json=texts, token=token)
        try:
            with self._queue_room(owner, sizes):
                jobs = await self.commits.submit(submission)
        except TokenUsed as used:
            assert token is not None
            return await self._replay(token, used.submitted)
        self.control.submitted_many(jobs)
        waiting = dict(self.control.waiting)
        reveal = self._reveal(uid, jobs[0])

        def build() -> bytes:
            records = [
                job_record(
                    job, [], self.dirs, waiting.get(job.id), reveal=reveal, instance=self.instance
                )
                for job in jobs
            ]
            group = jobs[0].group_id or jobs[0].id
            return SubmittedGroup(group_id=group, jobs=records).model_dump_json().encode()

        payload = build() if len(jobs) <= 16 else await anyio.to_thread.run_sync(build)
        return Response(201, Encoded(payload))

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
                    reveal=self._reveal(uid, j),
                    instance=self.instance,
                    use=use.get(j.id),
                    place=place(j.id),
                )
                for j, attempts in page
            ]
            cursor = str(page[-1][0].id) if more and page else None
            return JobList(jobs=records, total=total, next=cursor).model_dump_json().encode()

        # One page built at a time: each builder thread competes with the event loop for the
        # interpreter lock, so ten at once would make every other request wait ten turns.
        if self._listing is None:
            self._listing = anyio.CapacityLimiter(1)
        payload = await anyio.to_thread.run_sync(build, limiter=self._listing)
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

    async def stop_job(self, request: Request) -> Response:
        job_id = job_id_of(request)
        body = request.model(StopRequest, allow_empty=True)
        self.control.stop(job_id, request.caller.uid, body.grace_seconds)
        return Response(202, self.record(job_id, request.caller.uid))

    async def logs(self, request: Request) -> StreamResponse:
        job_id = job_id_of(request)
        job = self.store.get(job_id)  # 404 before the stream starts
        self.authorizer.require_manage(request.caller.uid, job, "read the logs of")
        stream = request.query_str("stream", "both") or "both"
        if stream not in ("stdout", "stderr", "both"):
            raise InvalidRequest("query parameter 'stream' must be stdout, stderr or both")
        attempt = request.query_int("attempt", None, min=1, max=max(1, job.attempt_count))
        # A job of several nodes: one node's output (the first's unless asked).
        number = request.query_int("node", None, min=1, max=job.spec.node_count)
        node = host_name(number - 1 if number else 0) if is_gang(job.spec) else None
        if attempt or job.attempt_count:  # a log the owner made a FIFO or a link: one line
            await anyio.to_thread.run_sync(
                check_logs, self.dirs, job_id, attempt or job.attempt_count, stream, node
            )
        since = request.query_str("since", None)
        stamps = request.query_bool("stamps")
        chunks = log_chunks(
            self.store,
            self.dirs,
            self.notifier,
            job_id,
            attempt=attempt,
            stream=stream,
            follow=request.query_bool("follow"),
            tail=request.query_int("tail", None, min=0, max=MAX_TAIL_LINES),
            since_ns=None if since is None else _unix_ns("since", since),
            stamps=stamps,
            node=node,
        )
        if stamps:
            return StreamResponse("application/x-ndjson", chunks)
        return StreamResponse("text/plain; charset=utf-8", chunks)

    async def job_metrics(self, request: Request) -> Response:
        job = self.store.get(job_id_of(request))
        # Metrics come from the job's output: whoever may read its logs may read them.
        self.authorizer.require_manage(request.caller.uid, job, "read the metrics of")
        return Response(200, await self.metric_watch.job_metrics(job))

    async def events(self, request: Request) -> StreamResponse:
        job_id = request.query_int("job", None, min=1)
        if job_id is not None:
            self.store.get(job_id)
        since = request.query_int("since", None, min=0)
        if since is None:
            since = self.store.last_event_id()
        if self._replays is None:
            self._replays = anyio.CapacityLimiter(REPLAY_THREADS)
        headers = []
        pruned = self.store.events_pruned_before()
        if since + 1 < pruned:  # what it asks for is partly gone: say so, not silently
            headers.append((EVENTS_PRUNED_HEADER, str(pruned)))
        chunks = event_lines(self.store, self.notifier, job_id, since, self._replays)
        return StreamResponse("application/x-ndjson", chunks, headers=headers)

    async def gpus(self, request: Request) -> Response:
        holder = {
            gpu: job.id
            for job in self.store.jobs([JobState.RUNNING, JobState.STOPPING])
            for gpu in job.gpus
        }
        # NVML and /proc can block: read them on a worker thread, never on the event loop.
        foreign = (
            await anyio.to_thread.run_sync(
                foreign_processes, self.gpu_backend, holder, str(self.dirs.root)
            )
            if self.devices
            else {}
        )
        records = []
        drains = self.store.drains()
        for index, device in sorted(self.devices.items()):
            live, pids = foreign.get(index, (None, []))
            sampled = self.sampler.gpus.get(index)
            job_id = holder.get(index)
            records.append(
                GpuRecord(
                    index=index,
                    uuid=device.uuid,
                    name=device.name,
                    memory_total_mib=device.memory_total_mib,
                    memory_used_mib=None if live is None else live.memory_used_mib,
                    job_id=job_id,
                    foreign_pids=pids,
                    available=job_id is None
                    and HOST not in drains
                    and index not in drains
                    and not (live is not None and live.taken_by_others(held_by_trainq=False)),
                    utilization_percent=sampled.utilization_percent if sampled else None,
                    power_watts=sampled.power_watts if sampled else None,
                    drain=drain_record(drains[index]) if index in drains else None,
                )
            )
        host = drain_record(drains[HOST]) if HOST in drains else None
        return Response(200, GpuList(backend=self.gpu_backend.kind, gpus=records, host_drain=host))

    async def users(self, request: Request) -> Response:
        """Each user's recent usage (fair share), share, and running and waiting work."""
        days = self.config.fair_share_half_life_days
        return Response(200, UserList(half_life_days=days, users=self.control.shares()))

    async def health(self, request: Request) -> Response:
        return Response(
            200,
            HealthRecord(
                status="stopping" if self.stopping else "ok",
                version=__version__,
                pid=os.getpid(),
                uid=os.geteuid(),
                started_at=datetime.fromtimestamp(self.started_at, UTC),
                gpu_backend=self.gpu_backend.kind,
                gpus=len(self.devices),
                cpu_slots=self.config.cpu_slots,
                jobs=self.store.counts(),
                drains=drain_records(self.store.drains()),
            ),
        )

    async def prometheus(self, request: Request) -> StreamResponse:
        return await self.metrics.handle(request)

    async def report(self, request: Request) -> Response:
        now = time.time()
        since = now - period_seconds(request.query_str("since", "30d") or "30d")
        by = request.query_str("by", "user") or "user"
        # A report reads a month of history: in a worker thread, through a reader connection.
        report = await anyio.to_thread.run_sync(
            usage_report, self.store, since, now, by, self.config.default_class
        )
        return Response(200, report)

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
                self.submit,
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
                self.stop_group,
                "Stop every unfinished job of a group (a sweep) that you may stop",
                request_model=StopRequest,
                response_model=GroupStopped,
                status=202,
                body_optional=True,
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
                    QueryParam("group", "integer", "only this group's jobs (a sweep)", minimum=1),
                    QueryParam("limit", "integer", "jobs per page", PAGE_SIZE, 1, MAX_PAGE_SIZE),
                    QueryParam("after", "integer", "the `next` of the previous page", 0, 0),
                ],
            ),
            Route(
                "GET", f"/v1/jobs/{job_id}", self.get_job, "Show a job", response_model=JobRecord
            ),
            Route(
                "GET",
                f"/v1/jobs/{job_id}/samples",
                self.job_samples,
                "The GPU samples trainqd keeps of a job's running attempt",
                response_model=JobSamples,
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
                self.job_metrics,
                "A job's metric reports, every kept point of each attempt",
                response_model=JobMetrics,
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
                        "replay stored events after this id (default: none); older than "
                        "the history kept, the Trainq-Events-Pruned-Before header says "
                        "before which id only each job's latest event is kept",
                        minimum=0,
                    ),
                ],
            ),
            Route("GET", "/v1/health", self.health, "Daemon health", response_model=HealthRecord),
            Route(
                "GET",
                "/v1/users",
                self.users,
                "Each user's recent usage, share, and running and waiting jobs",
                response_model=UserList,
            ),
            Route(
                "GET",
                "/v1/metrics",
                self.prometheus,
                "Metrics in the Prometheus text format",
                streaming_content_type=METRICS_CONTENT_TYPE,
            ),
            Route(
                "GET",
                "/v1/report",
                self.report,
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


MAX_TAIL_LINES = 1_000_000


def _unix_ns(name: str, text: str) -> int:
    """A query parameter in Unix seconds (a fraction allowed), as nanoseconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < 1e11:  # NaN fails too
        raise InvalidRequest(f"query parameter {name!r} must be a time in Unix seconds")
    return round(seconds * 1e6) * 1000  # microseconds: the grain of the times sent
