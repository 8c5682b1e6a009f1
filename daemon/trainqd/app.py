"""trainqd's parts, built in one place and wired together (docs/architecture.md).

`build` makes every part once, in the order their needs allow, and hands each what it needs
of the others: the part itself where it is lower in the layers, else a protocol the
consumer declares (the API's `JobControl`, the tuner's `TrialStops`, the policy's
`Preempting`, the scheduler's `Handoff`) or one callable. The scheduler builds nothing, and
no part reaches another through it. `Daemon.run` runs them all in one task group; main.py
does, before, all that can refuse to start, and serves the socket.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import anyio.abc

from trainqd.access.authorization import Authorizer
from trainqd.api.handlers.jobs import Api
from trainqd.api.metrics import Metrics
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.launch import LaunchSettings
from trainqd.attempts.watcher import MonitorWatcher, OnEnd, Watcher, WatcherFactory
from trainqd.backends.slurm import SlurmBackend
from trainqd.config import Config
from trainqd.experiments.metric_watch import MetricWatch
from trainqd.experiments.tuner import Tuner
from trainqd.gpus.base import GpuBackend, GpuDevice
from trainqd.planning.policy import SharingPolicy
from trainqd.scheduling import retention, sampling
from trainqd.scheduling.endings import AttemptEnds
from trainqd.scheduling.event_pruning import prune as prune_events
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.launcher import Launcher
from trainqd.scheduling.notifications import Notifications
from trainqd.scheduling.reconcile import reconcile
from trainqd.scheduling.removal import Removal
from trainqd.scheduling.sampling import Sampler
from trainqd.scheduling.scheduler import Scheduler
from trainqd.scheduling.stopping import Stopping
from trainqd.scheduling.unrecorded import Backlog
from trainqd.scheduling.wakeup import Wakeup
from trainqd.scheduling.watching import Watching
from trainqd.store.store import AttemptRow, JobRow, Store


@dataclass(frozen=True)
class Daemon:
    """Every part of a running trainqd but its sockets."""

    config: Config
    store: Store
    devices: Mapping[int, GpuDevice]
    notifier: ChangeNotifier
    sampler: Sampler
    metric_watch: MetricWatch
    stopping: Stopping
    policy: SharingPolicy
    scheduler: Scheduler
    tuner: Tuner
    notifications: Notifications
    removal: Removal
    metrics: Metrics
    api: Api

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run every part until cancelled; started once the scheduler has taken over what an
        earlier trainqd left running."""
        config = self.config
        async with anyio.create_task_group() as tg:
            await tg.start(self.scheduler.run)
            if self.devices:  # GPU use of running jobs, and the idle rule
                tg.start_soon(
                    sampling.watch, self.sampler, self.store, self.stopping, self.notifier.notify
                )
            tg.start_soon(self.metric_watch.run)
            tg.start_soon(self.tuner.run)
            tg.start_soon(self.metrics.run)
            tg.start_soon(self.notifications.run)
            tg.start_soon(retention.purge, self.store, self.removal, config.retention_days)
            tg.start_soon(prune_events, self.store, config.max_events, config.event_retention_days)
            task_status.started()


def build(
    *,
    config: Config,
    store: Store,
    gpus: GpuBackend,
    dirs: JobDirs,
    authorizer: Authorizer,
    started_at: float,
    watcher: WatcherFactory | None = None,
) -> Daemon:
    """Every part, each given what it needs. `watcher`: how monitors are started and
    watched (the in-process tests stand in for them); with Slurm, its back end does it."""
    notifier = ChangeNotifier()
    wakeup = Wakeup(notifier)
    devices = {d.index: d for d in gpus.devices()}
    settings = LaunchSettings(
        default_stop_grace_seconds=config.default_stop_grace_seconds,
        default_engine=config.default_engine,
        real_gpus=gpus.kind == "nvml",
        instance=store.instance,
        container_capabilities=tuple(config.container_capabilities),
        allowed_images=tuple(config.allowed_images),
        max_processes=config.process_cap(),
    )
    # When each running attempt's time limit falls due: its monitor enforces it, the planner
    # only reckons with it; the launcher, attempt ends and reconcile keep it up to date.
    deadlines: dict[int, float] = {}
    unrecorded = Backlog()  # attempt ends the full disk kept out of the database
    sampler = sampling.new_sampler(config, gpus)
    metric_watch = MetricWatch(store, dirs)
    metrics = Metrics(store, devices, sampler, notifier)

    def attempt_ended(job: JobRow, attempt: AttemptRow, ended: float) -> None:
        # Fair share counts each ended attempt; a tune hears of its trial's end at once. Both
        # are built below: they need stopping, which needs the watcher, which may be Slurm's,
        # which needs these ends.
        policy.attempt_ended(job, attempt, ended)
        tuner.wake()

    ends = AttemptEnds(
        store=store,
        dirs=dirs,
        sampler=sampler,
        unrecorded=unrecorded,
        deadlines=deadlines,
        default_engine=config.default_engine,
        instance=settings.instance,
        changed=wakeup.changed,
        on_ended=attempt_ended,
    )
    # backend = "slurm": every job is handed to Slurm, which plans and runs it instead, and
    # follows it in place of the local monitors.
    slurm = None
    if config.backend == "slurm":
        slurm = SlurmBackend(
            config=config, store=store, dirs=dirs, ends=ends, changed=wakeup.changed
        )
        watcher = slurm.watching
    watching = Watching(watcher or _monitor_watcher(config.end_margin_seconds))

    async def take_over(opened: Watcher) -> None:
        if slurm is not None:
            await slurm.take_over()
        else:
            await reconcile(
                store=store,
                dirs=dirs,
                watcher=opened,
                ends=ends,
                deadlines=deadlines,
                default_grace=config.default_stop_grace_seconds,
            )

    launcher = Launcher(
        store=store,
        dirs=dirs,
        devices=devices,
        settings=settings,
        watcher=watching.current,
        ends=ends,
        deadlines=deadlines,
        notify=notifier.notify,
        changed=wakeup.changed,
        dispatched=metrics.dispatch.observe,
    )
    stopping = Stopping(
        store=store,
        authorizer=authorizer,
        watcher=watching.current,
        default_grace=config.default_stop_grace_seconds,
        changed=wakeup.changed,
    )
    # Classes, fair share and preemption (policy.py); the limits include the classes'.
    policy = SharingPolicy(config, store, stopping)
    policy.seed(time.time())
    scheduler = Scheduler(
        config=config,
        store=store,
        gpus=gpus,
        devices=devices,
        notifier=notifier,
        wakeup=wakeup,
        watching=watching,
        take_over=take_over,
        ends=ends,
        launcher=launcher,
        stopping=stopping,
        policy=policy,
        unrecorded=unrecorded,
        deadlines=deadlines,
        handoff=slurm,
        started=metric_watch.started,
    )
    # Tuning experiments: their trials are jobs like any other (tuner.py).
    tuner = Tuner(
        store=store,
        dirs=dirs,
        metric_watch=metric_watch,
        stopping=stopping,
        submitted=scheduler.submitted,
        changed=wakeup.changed,
        max_unfinished=config.max_unfinished_jobs_per_user,
    )
    removal = Removal(store, dirs.root)
    api = Api(
        store=store,
        control=scheduler,
        dirs=dirs,
        notifier=notifier,
        gpu_backend=gpus,
        devices=devices,
        config=config,
        sampler=sampler,
        metric_watch=metric_watch,
        tuner=tuner,
        authorizer=authorizer,
        instance=settings.instance,
        metrics=metrics,
        removal=removal,
        started_at=started_at,
    )
    return Daemon(
        config=config,
        store=store,
        devices=devices,
        notifier=notifier,
        sampler=sampler,
        metric_watch=metric_watch,
        stopping=stopping,
        policy=policy,
        scheduler=scheduler,
        tuner=tuner,
        # Built before anything runs: jobs that ended while trainqd was down, recorded when
        # the scheduler takes over, are announced too.
        notifications=Notifications(store, notifier, config),
        removal=removal,
        metrics=metrics,
        api=api,
    )


def _monitor_watcher(margin: float) -> WatcherFactory:
    def watcher(task_group: anyio.abc.TaskGroup, on_end: OnEnd) -> Watcher:
        return MonitorWatcher(task_group, on_end, margin=margin)

    return watcher
