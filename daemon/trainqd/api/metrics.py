"""trainqd's Prometheus metrics, written with prometheus-client into a registry of its own.

Gauges are read from trainqd's state when a scraper asks (`StateCollector`), so there is no
second copy of the jobs, GPUs or samples to keep in step. What happens over time (submits,
retries, how long jobs waited, how long starting them took, how long API requests took) is
counted by Counter and Histogram objects: the store's event rows are followed as the event
stream's readers follow them; the launcher is given `dispatch.observe` for dispatch latency.
The counters start from the store's totals (`Store.counter_totals`: the jobs, attempts and
events kept, and what removed jobs added), so a restart does not reset them.

Only what every user may already see is exposed (docs/security.md): job counts per state and
user, GPU use per GPU and per job id; never a failure's reason, an environment, a log line or
a path.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence

import anyio.lowlevel
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from trainq.core.errors import NotFound
from trainq.core.states import ACTIVE, JobState
from trainqd.api.routing import Handler, Request, Response, Route, StreamResponse
from trainqd.gpus.base import GpuDevice
from trainqd.planning.inputs import slots
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.outcomes import is_preemption
from trainqd.scheduling.sampling import Sampler
from trainqd.store import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Queue waits run from seconds to days.
_WAIT_BUCKETS = (
    1,
    5,
    15,
    60,
    300,
    900,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    3 * 86400,
)
_DISPATCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Event loop lateness: what matters is anything over a few milliseconds.
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
FOLLOW_BATCH = 250  # events counted in one turn of the event loop
_REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class StateCollector(Collector):
    """Gauges of trainqd's state as it is at scrape time."""

    def __init__(self, store: Store, devices: Mapping[int, GpuDevice], sampler: Sampler) -> None:
        self._store = store
        self._devices = devices
        self._sampler = sampler

    def collect(self) -> Iterable[Metric]:
        store = self._store
        jobs = GaugeMetricFamily("trainq_jobs", "Jobs by state and owner", labels=["state", "user"])
        for state, user, count in store.counts_by_user():
            jobs.add_metric([state, user], count)
        yield jobs
        # Concurrent submissions share a commit (group_commit.py): fewer commits than submits.
        yield CounterMetricFamily(
            "trainq_database_commits",
            "Write transactions committed to trainqd's database, each one fsync",
            store.commits,
        )

        active = store.jobs(list(ACTIVE))
        holder = {gpu: job for job in active for gpu in job.gpus}
        yield GaugeMetricFamily("trainq_gpus", "GPUs in the inventory", len(self._devices))
        yield GaugeMetricFamily("trainq_gpus_allocated", "GPUs held by jobs", len(holder))
        yield GaugeMetricFamily(
            "trainq_cpu_slots_allocated",
            "CPU slots held by jobs' nodes that use no GPU",
            sum(slots(job) for job in active),
        )
        yield from self._gpus(holder)
        yield from self._jobs()

    def _owner(self, job_id: int) -> str:
        try:
            return self._store.get(job_id).owner.user
        except NotFound:  # the job row is gone: its numbers count all the same
            return ""

    def _gpus(self, holder: Collection[int]) -> Iterable[Metric]:
        labels = ["gpu", "uuid"]
        total = GaugeMetricFamily("trainq_gpu_memory_total_mib", "GPU memory", labels=labels)
        allocated = GaugeMetricFamily(
            "trainq_gpu_allocated", "1 when a job holds the GPU", labels=labels
        )
        utilization = GaugeMetricFamily(
            "trainq_gpu_utilization_percent", "GPU utilization at the last sample", labels=labels
        )
        memory = GaugeMetricFamily(
            "trainq_gpu_memory_used_mib", "GPU memory used at the last sample", labels=labels
        )
        power = GaugeMetricFamily(
            "trainq_gpu_power_watts", "GPU power draw at the last sample", labels=labels
        )
        samples = self._sampler.gpus
        for index, device in sorted(self._devices.items()):
            names = [str(index), device.uuid]
            total.add_metric(names, device.memory_total_mib)
            allocated.add_metric(names, 1 if index in holder else 0)
            sample = samples.get(index)
            if sample is None:
                continue
            if sample.utilization_percent is not None:
                utilization.add_metric(names, sample.utilization_percent)
            if sample.memory_used_mib is not None:
                memory.add_metric(names, sample.memory_used_mib)
            if sample.power_watts is not None:
                power.add_metric(names, sample.power_watts)
        yield from (total, allocated, utilization, memory, power)

    def _jobs(self) -> Iterable[Metric]:
        labels = ["job", "user"]
        utilization = GaugeMetricFamily(
            "trainq_job_gpu_utilization_percent",
            "A running job's GPU utilization (mean over its GPUs) at the last sample",
            labels=labels,
        )
        memory = GaugeMetricFamily(
            "trainq_job_gpu_memory_used_mib",
            "Memory used on a running job's GPUs at the last sample",
            labels=labels,
        )
        idle = GaugeMetricFamily(
            "trainq_job_gpu_idle", "1 when a running job's GPUs are flagged idle", labels=labels
        )
        for job_id, use in sorted(self._sampler.attempts.items()):
            names = [str(job_id), self._owner(job_id)]
            idle.add_metric(names, 0 if use.idle.flagged_since is None else 1)
            latest = use.latest
            if latest is None:
                continue
            if latest.utilization_percent is not None:
                utilization.add_metric(names, latest.utilization_percent)
            if latest.memory_used_mib is not None:
                memory.add_metric(names, latest.memory_used_mib)
        yield from (utilization, memory, idle)


class Metrics:
    """trainqd's registry: the state collector plus the counters and histograms of events."""

    def __init__(
        self,
        store: Store,
        devices: Mapping[int, GpuDevice],
        sampler: Sampler,
        notifier: ChangeNotifier,
    ) -> None:
        self._store = store
        self._notifier = notifier
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StateCollector(store, devices, sampler))
        self.submits = Counter(
            "trainq_jobs_submitted", "Jobs submitted", ["user"], registry=self.registry
        )
        self.retries = Counter(
            "trainq_attempts_retried",
            "Attempts that ended and were retried",
            registry=self.registry,
        )
        self.preemptions = Counter(
            "trainq_preemptions",
            "Attempts preempted for a job of a higher class (back in the queue)",
            registry=self.registry,
        )
        self.ended = Counter(
            "trainq_jobs_ended",
            "Jobs that ended, by final state",
            ["state"],
            registry=self.registry,
        )
        self.idle_flags = Counter(
            "trainq_jobs_idle_flagged",
            "Times a job's GPUs were flagged idle",
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "trainq_queue_wait_seconds",
            "From a job's (re)queueing to its attempt's start",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.dispatch = Histogram(
            "trainq_dispatch_latency_seconds",
            "From the plan deciding to start an attempt to its monitor running",
            buckets=_DISPATCH_BUCKETS,
            registry=self.registry,
        )
        self.requests = Histogram(
            "trainq_api_request_seconds",
            "API requests, to the response's headers",
            ["method", "route"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "trainq_event_loop_lag_seconds",
            "How late the event loop's probe woke up: time the loop was held by other work",
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )
        self.loop_busy = Histogram(
            "trainq_event_loop_busy_seconds",
            "CPU time of the event loop's thread between two of the probe's wake-ups",
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )
        self._queued_at: dict[int, float] = {}  # job -> when it last became PENDING
        self._seed()

    def _seed(self) -> None:
        """The counters start from the store's totals, not from zero at every start: taken
        with the last event's id, on the loop's thread, so no event is counted twice."""
        store = self._store
        totals = store.counter_totals()
        self._last_event = store.last_event_id()
        for user, jobs in totals.submitted.items():
            self.submits.labels(user).inc(jobs)
        for state, jobs in totals.ended.items():
            self.ended.labels(state).inc(jobs)
        self.retries.inc(totals.retries)
        self.preemptions.inc(totals.preemptions)
        self.idle_flags.inc(totals.idle_flags)

    async def scrape(self) -> bytes:
        """The exposition of everything, counters brought up to the latest event first, a
        batch per turn of the loop (a scrape just after a sweep has 10,000 to count)."""
        await self._catch_up()
        return generate_latest(self.registry)

    async def _catch_up(self) -> None:
        while self._follow_batch(FOLLOW_BATCH):
            await anyio.lowlevel.checkpoint()

    # -- events ----------------------------------------------------------------------------

    def _follow_batch(self, limit: int = 1000) -> bool:
        """Count up to `limit` events stored since the last call; whether there were any."""
        events = self._store.events_since(self._last_event, limit=limit)
        if events:
            for event in events:
                self._last_event = event.id
                if event.to_state == JobState.PENDING:
                    self._queued_at[event.job_id] = event.time
                    if event.from_state is None:
                        self.submits.labels(self._user(event.job_id)).inc()
                    elif event.from_state in ACTIVE and is_preemption(event.reason):
                        self.preemptions.inc()
                    elif event.from_state in ACTIVE:
                        self.retries.inc()
                elif event.to_state == JobState.RUNNING and event.from_state == JobState.PENDING:
                    queued = self._queued_at.pop(event.job_id, None)
                    if queued is not None:
                        self.queue_wait.observe(max(0.0, event.time - queued))
                elif (
                    event.from_state == event.to_state
                    and event.reason
                    and (event.reason.startswith("GPUs idle"))
                ):
                    self.idle_flags.inc()
                if event.to_state in (JobState.COMPLETED, JobState.FAILED, JobState.STOPPED):
                    self._queued_at.pop(event.job_id, None)
                    self.ended.labels(str(event.to_state)).inc()
        return bool(events)

    def _user(self, job_id: int) -> str:
        try:
            return self._store.get(job_id).owner.user
        except NotFound:  # the job row is gone: counted all the same
            return ""

    async def run(self) -> None:
        """Follow the events for as long as trainqd runs."""
        notifier = self._notifier
        while True:
            changed = notifier.changed()
            # A batch per turn of the loop: a sweep of 10,000 jobs is 10,000 events.
            await self._catch_up()
            await changed.wait()

    # -- API timing ------------------------------------------------------------------------

    def timed(self, routes: Sequence[Route]) -> list[Route]:
        """The routes with each handler timed into `trainq_api_request_seconds`."""
        return [dataclasses.replace(r, handler=self._timed(r)) for r in routes]

    def _timed(self, route: Route) -> Handler:
        handler, observe = route.handler, self.requests.labels(route.method, route.pattern).observe

        async def timed(request: Request) -> Response | StreamResponse:
            started = time.perf_counter()
            try:
                return await handler(request)
            finally:
                observe(time.perf_counter() - started)

        return timed

    # -- the endpoint ------------------------------------------------------------------------

    async def handle(self, request: Request) -> StreamResponse:
        body = await self.scrape()

        async def once() -> AsyncIterator[bytes]:
            yield body

        return StreamResponse(CONTENT_TYPE, once())
