"""The handlers about the workstation: its GPUs, users, health, metrics and usage report."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio

from trainq.core import __version__
from trainq.core.states import JobState
from trainq.core.wire import GpuList, GpuRecord, HealthRecord, UserList
from trainqd.api.control import JobControl
from trainqd.api.handlers.sharing import drain_record, drain_records
from trainqd.api.metrics import Metrics
from trainqd.api.routing import Request, Response, StreamResponse
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.leftovers import job_of_process
from trainqd.config import Config
from trainqd.gpus.base import GpuBackend, GpuDevice, GpuUsage
from trainqd.observe.report import period_seconds, usage_report
from trainqd.scheduling.sampling import Sampler
from trainqd.store import Store
from trainqd.store.rows import HOST


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
class HostViews:
    """The GPUs, users, health, metrics and report, with what they need of the API."""

    store: Store
    control: JobControl
    dirs: JobDirs
    gpu_backend: GpuBackend
    devices: Mapping[int, GpuDevice]
    config: Config
    sampler: Sampler
    metrics: Metrics
    started_at: float
    stopping: bool = False  # trainqd is shutting down (`Api.shutting_down`)

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
