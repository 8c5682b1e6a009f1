"""Tuning experiments, run by trainqd for their owners (README.md, "Tuning").

Each tune asks Optuna (ask and tell) for its trials' hyperparameters, queues each trial as an
ordinary job of its owner in the tune's group, feeds the objective's reports (metric_watch)
to Optuna's pruner, stops a trial the pruner gives up on (STOPPED, with the reason), tells
Optuna how each trial ended, and keeps `max_parallel` trials going until `max_trials`.

Optuna is imported when the first tune is opened: an idle trainqd never pays for it. The
study lives in memory and is rebuilt from the store at start-up: each recorded trial is
asked again with its recorded hyperparameters (enqueued) and told what it reported and how
it ended, so trial numbers and search state are as before the crash. Every fresh ask uses a
sampler seeded from the tune's seed and the trial's number, and the grid's order is fixed by
the seed: a seeded `random` or `grid` tune proposes the same configurations, crash or not.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import structlog

from trainq.core.errors import NotFound
from trainq.core.spec import JobSpec
from trainq.core.spec_parts import check_name
from trainq.core.states import TERMINAL, JobState, TransitionError
from trainq.core.tuning import Dimension, TuneRequest, TuneSettings, as_hyperparameter
from trainq.core.wire import MetricSeriesRecord
from trainqd.attempts.jobdir import JobDirs
from trainqd.experiments import pbt
from trainqd.experiments.checkpoint_copy_as import copy_as
from trainqd.experiments.metric_watch import MetricWatch
from trainqd.store import JobOwner, JobRow, Store
from trainqd.store.tunes import TrialRow, TrialState, TuneRow, TuneStore

POLL = 1.0
MAX_STEP = 2**53
STOPPED_BY_TUNE = "stopped by tune "
log = structlog.get_logger("trainqd.tuner")

_WHY = {
    "median": "worse than the median of earlier trials at that step",
    "asha": "not promoted by successive halving",
    "hyperband": "not promoted by hyperband",
}


def _distribution(dimension: Dimension) -> Any:
    from optuna import distributions  # noqa: PLC0415 (only with a tune)

    if dimension.loguniform is not None:
        low, high = dimension.loguniform
        return distributions.FloatDistribution(float(low), float(high), log=True)
    if dimension.uniform is not None:
        low, high = dimension.uniform
        return distributions.FloatDistribution(float(low), float(high))
    if dimension.int is not None:
        return distributions.IntDistribution(*dimension.int)
    return distributions.CategoricalDistribution(list(dimension.choice or []))


def _sampler(settings: TuneSettings, number: int) -> Any:
    from optuna import samplers  # noqa: PLC0415

    if settings.search == "grid":
        return samplers.GridSampler(settings.grid(), seed=settings.seed)
    seed = (settings.seed * 1_000_003 + number) % 2**32  # one stream per trial: replayable
    if settings.search == "random":
        return samplers.RandomSampler(seed=seed)
    return samplers.TPESampler(
        seed=seed, n_startup_trials=min(10, max(2, settings.max_trials // 4))
    )


def _pruner(settings: TuneSettings) -> Any:
    from optuna import pruners  # noqa: PLC0415

    if settings.early_stopping == "median":
        return pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if settings.early_stopping == "asha":
        return pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    if settings.early_stopping == "hyperband":
        return pruners.HyperbandPruner(min_resource=1, reduction_factor=3)
    return pruners.NopPruner()  # none, and pbt (which pauses and copies instead)


def trials_allowed(settings: TuneSettings) -> int:
    """max_trials, or the grid's size if that is smaller."""
    if settings.search != "grid":
        return settings.max_trials
    size = 1
    for values in settings.grid().values():
        size *= len(values)
    return min(settings.max_trials, size)


def objective_series(
    metrics: list[dict[str, MetricSeriesRecord]], objective: str
) -> list[tuple[float, float]]:
    """The objective's points over the trial's attempts, in order (a resumed attempt's
    steps go on from its checkpoint)."""
    points: list[tuple[float, float]] = []
    for attempt in metrics:
        series = attempt.get(objective)
        if series is not None:
            points.extend(series.points)
    return points


def trial_spec(tune: TuneRow, number: int, params: dict[str, Any]) -> JobSpec:
    base = tune.request.spec
    name = f"{base.name or 'tune'}-{tune.id}-{number}"[-64:].lstrip("-._") or f"t{number}"
    check_name("job", name)
    values = {**base.hyperparameters, **{k: as_hyperparameter(v) for k, v in params.items()}}
    data = base.model_dump(by_alias=True, exclude_unset=True)
    return JobSpec.model_validate({**data, "name": name, "hyperparameters": values})


@dataclass
class _Trial:
    row: TrialRow
    handle: Any  # optuna.Trial
    reported: set[int] = field(default_factory=set)
    told: bool = False
    latest: tuple[float, float] | None = None  # its objective's last (step, value)
    perturbed_at: int = 0  # pbt: the last perturbation interval it was ranked at


@dataclass
class _Live:
    tune: TuneRow
    study: Any  # optuna.Study
    distributions: dict[str, Any]
    open: dict[int, _Trial] = field(default_factory=dict)  # trial number -> not yet told
    asked: int = 0
    failures: int = 0


class TrialStops(Protocol):
    """What the tuner asks of trainqd's stopping (scheduling/stopping.py)."""

    def pause_for(self, job_id: int, who: str, event: str) -> JobRow: ...

    def stop_by_trainq(self, job_id: int, now: float, event: str, reason: str) -> None: ...


class Tuner:
    def __init__(
        self,
        *,
        store: Store,
        dirs: JobDirs,
        metric_watch: MetricWatch,
        stopping: TrialStops,
        submitted: Callable[[JobRow], None],
        changed: Callable[[], None],
        max_unfinished: int,
    ) -> None:
        self.store = store
        self._dirs = dirs
        self.tunes = TuneStore(store)
        self._watch = metric_watch
        self._stopping = stopping
        self._submitted = submitted
        self._changed = changed
        self._max_unfinished = max_unfinished
        self._live: dict[int, _Live] = {}
        self._wake = anyio.Event()
        self._lock = anyio.Lock()
        # Open trials' output is read as it is written, and their reports wake the tuner.
        metric_watch.listeners.append(self._reported)

    def _reported(self, job_id: int, number: int, snapshot: object) -> None:
        if job_id in self._watch.closely:
            self.wake()

    def wake(self) -> None:
        """Step the tunes now (a trial's attempt ended), not at the next poll."""
        self._wake.set()

    # -- what the API asks ------------------------------------------------------------

    def create(self, request: TuneRequest, owner: JobOwner) -> TuneRow:
        tune = self.tunes.create(request, owner, time.time())
        self._wake.set()
        return tune

    async def stop(self, tune: TuneRow, who: str) -> None:
        async with self._lock:
            live = self._live.get(tune.id)
            if live is not None:
                await self._end(live, "STOPPED", f"stopped by {who}")
            else:
                self.tunes.end(tune.id, "STOPPED", time.time(), f"stopped by {who}")

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            async with self._lock:
                for tune in self.tunes.tunes(unfinished=True):
                    try:
                        await self._step(tune)
                    except Exception:  # one tune's trouble must not stop the others
                        log.exception("tune step failed", tune=tune.id)
            with anyio.move_on_after(POLL):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def _step(self, tune: TuneRow) -> None:
        live = self._live.get(tune.id)
        if live is None:
            live = self._live[tune.id] = await self._open(tune)
        settings = tune.request.tune
        for trial in list(live.open.values()):
            await self._follow(live, trial)
        if live.failures > settings.max_failures:
            await self._end(
                live,
                "FAILED",
                f"{live.failures} trials failed, over max_failures ({settings.max_failures})",
            )
            return
        while len(live.open) < settings.max_parallel and live.asked < trials_allowed(settings):
            if self._max_unfinished and self.store.unfinished_count(tune.owner.uid) >= (
                self._max_unfinished
            ):
                break  # the owner's queue is full: the next trial waits for room
            await self._ask(live)
        if not live.open and live.asked >= trials_allowed(settings):
            await self._end(live, "COMPLETED", f"{live.asked} trials run")

    async def _ask(self, live: _Live) -> None:
        tune, number = live.tune, live.asked
        live.study.sampler = _sampler(tune.request.tune, number)
        # TPE fits a model of every trial so far: off the event loop (the lock keeps the
        # study to one thread at a time).
        handle = await anyio.to_thread.run_sync(live.study.ask, live.distributions)
        params = dict(handle.params)
        spec = trial_spec(tune, number, params)
        job = self.tunes.add_trial(tune, number, params, spec, time.time())
        if tune.group_id is None:
            live.tune = self.tunes.get(tune.id)
        row = TrialRow(tune.id, number, job.id, params, "running", None, None, None, None)
        live.open[number] = _Trial(row, handle)
        live.asked += 1
        self._watch.closely.add(job.id)
        self._submitted(job)

    async def _open(self, tune: TuneRow) -> _Live:
        """The tune's study, rebuilt from its recorded trials."""
        import optuna  # noqa: PLC0415 (only once a tune exists)

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        settings = tune.request.tune
        study = optuna.create_study(
            direction=settings.direction,
            sampler=_sampler(settings, 0),
            pruner=_pruner(settings),
        )
        space = {name: _distribution(d) for name, d in settings.space.items()}
        live = _Live(tune, study, space)
        for row in self.tunes.trials(tune.id):
            study.enqueue_trial(row.params, skip_if_exists=False)
            handle = study.ask(space)
            trial = _Trial(row, handle)
            live.asked = row.number + 1
            live.open[row.number] = trial
            if row.state == "failed":
                live.failures += 1
            await self._follow(live, trial, replaying=True)
        self._watch.closely.update(trial.row.job_id for trial in live.open.values())
        return live

    async def _follow(self, live: _Live, trial: _Trial, *, replaying: bool = False) -> None:
        """Report the trial's new points; prune it, or tell how it ended."""
        try:
            job = self.store.get(trial.row.job_id)
        except NotFound:  # its job was removed: nothing more will come of it
            self._tell(live, trial, "failed", None, "its job was removed")
            return
        settings = live.tune.request.tune
        metrics = await self._watch.job_metrics(job)
        points = objective_series([a.series for a in metrics.attempts], settings.objective)
        ended = job.state in TERMINAL
        # The pruner judges each report at its own step, as if asked as it came: a pass
        # may bring several, and one judged at a later step would look better than it was.
        judging = not ended and trial.row.state == "running" and not replaying
        judging = judging and settings.early_stopping not in ("none", "pbt")
        for step, value in points:
            # Steps are the trainer's to print: Optuna takes whole steps from 0 only.
            if 0 <= step < MAX_STEP and int(step) not in trial.reported:
                trial.reported.add(int(step))
                trial.handle.report(value, int(step))
                if judging and trial.handle.should_prune():
                    self._prune(live, trial, job, (step, value))
                    judging = False
        trial.latest = points[-1] if points else None
        if not ended:
            if settings.early_stopping == "pbt":
                await self._population(live, trial, job, replaying=replaying)
            return
        if trial.row.state == "pruned" or (
            replaying and trial.row.state in ("completed", "failed", "stopped")
        ):
            self._tell(live, trial, trial.row.state, points, trial.row.reason)
        elif job.state == JobState.COMPLETED and points:
            self._tell(live, trial, "completed", points, None)
        elif job.state == JobState.COMPLETED:
            self._tell(live, trial, "failed", None, f"it reported no {settings.objective}")
        elif job.state == JobState.FAILED:
            self._tell(live, trial, "failed", points, job.failure_reason)
        else:
            self._tell(live, trial, "stopped", points, job.stop_reason)

    async def _population(
        self, live: _Live, trial: _Trial, job: JobRow, *, replaying: bool
    ) -> None:
        """pbt: rank the trial at each perturbation interval, pause it to copy a better
        one's checkpoints, and resume it once paused (also after a crash in between)."""
        settings = live.tune.request.tune
        exploit = trial.row.exploit
        if exploit is not None:
            if job.state == JobState.PENDING and job.held_by is not None:
                await self._resume_exploited(live, trial, job, exploit)
            return
        if trial.latest is None or job.state != JobState.RUNNING:
            return
        interval = int(trial.latest[0] // settings.perturbation_interval)
        if replaying or interval <= trial.perturbed_at:
            trial.perturbed_at = max(trial.perturbed_at, interval)
            return
        trial.perturbed_at = interval
        standings = [
            pbt.Standing(t.row.number, *t.latest)
            for t in live.open.values()
            if t.latest is not None and t.row.exploit is None
        ]
        me = pbt.Standing(trial.row.number, *trial.latest)
        donor = pbt.donor_for(
            me, standings, quantile=settings.quantile, minimize=settings.direction == "minimize"
        )
        if donor is None:
            return
        source = live.open[donor.number].row
        params = pbt.perturb(
            source.params, settings.space, seed=settings.seed * 7919 + trial.row.number + interval
        )
        exploit = {"from": donor.number, "from_job": source.job_id, "params": params}
        self.tunes.set_exploit(live.tune.id, trial.row.number, exploit)
        trial.row = _replace(trial.row, exploit=exploit)
        event = (
            f"paused by tune {live.tune.id} (pbt): {settings.objective} {me.value:.4g} at step "
            f"{me.step:g} is in the bottom {settings.quantile:g}; it goes on from trial "
            f"{donor.number}'s checkpoints"
        )
        with contextlib.suppress(TransitionError):  # it ended meanwhile: followed as any end
            self._stopping.pause_for(job.id, job.owner.user, event)

    async def _resume_exploited(
        self, live: _Live, trial: _Trial, job: JobRow, exploit: dict[str, Any]
    ) -> None:
        tune = live.tune
        source = self._dirs.ml_root(int(exploit["from_job"])) / "checkpoints"
        target = self._dirs.ml_root(job.id) / "checkpoints"
        try:
            await copy_as(job.owner, str(source), str(target))
        except OSError as exc:  # the donor's files are the owner's to break: go on as it was
            log.warning("pbt copy failed", tune=tune.id, trial=trial.row.number, error=str(exc))
        params = exploit["params"]
        now = time.time()
        spec = trial_spec(tune, trial.row.number, params)
        words = " ".join(f"{k}={as_hyperparameter(v)}" for k, v in params.items())
        self.store.change_pending(
            job.id,
            spec,
            job.boost,
            now,
            f"tune {tune.id} (pbt): from trial {exploit['from']}, {words}",
        )
        self.store.set_hold(job.id, None, now, f"resumed by tune {tune.id} (pbt)")
        history = [
            *trial.row.history,
            {"attempt": job.attempt_count + 1, "from_trial": exploit["from"], "params": params},
        ]
        self.tunes.exploited(tune.id, trial.row.number, params, history)
        trial.row = _replace(trial.row, exploit=None, params=params, history=tuple(history))
        self._changed()

    def _prune(self, live: _Live, trial: _Trial, job: JobRow, last: tuple[float, float]) -> None:
        settings = live.tune.request.tune
        step, value = last
        reason = (
            f"stopped early by tune {live.tune.id}: {settings.objective} {value:.4g} at step "
            f"{step:g}, {_WHY.get(settings.early_stopping, 'pruned')}"
        )
        trial.row = _replace(trial.row, state="pruned", reason=reason)
        self.tunes.update_trial(
            live.tune.id, trial.row.number, "pruned", value=value, best=None, step=step,
            reason=reason,
        )  # fmt: skip
        self._stop_job(job, reason)

    def _stop_job(self, job: JobRow, reason: str) -> None:
        now = time.time()
        try:
            if job.state == JobState.PENDING:
                self.store.transition(
                    job.id, JobState.STOPPED, now, reason, stop_reason=reason, ended_at=now
                )
            elif job.state == JobState.RUNNING:
                self._stopping.stop_by_trainq(job.id, now, reason, reason)
        except TransitionError:
            pass  # it ended or moved on meanwhile: its end is followed as any other

    def _tell(
        self,
        live: _Live,
        trial: _Trial,
        state: TrialState,
        points: list[tuple[float, float]] | None,
        reason: str | None,
    ) -> None:
        from optuna.trial import TrialState as Told  # noqa: PLC0415

        settings = live.tune.request.tune
        values = [v for _, v in points or []]
        value = values[-1] if values else None
        best = (min if settings.direction == "minimize" else max)(values) if values else None
        step = points[-1][0] if points else None
        told = {"completed": Told.COMPLETE, "pruned": Told.PRUNED}.get(state, Told.FAIL)
        # The grid sampler asks a study to stop once its grid is done (a RuntimeError outside
        # Optuna's own loop): the trial is told by then.
        with contextlib.suppress(RuntimeError):
            live.study.tell(
                trial.handle,
                value if told == Told.COMPLETE else None,
                state=told,
                skip_if_finished=True,
            )
        if state == "failed" and trial.row.state != "failed":
            live.failures += 1
        if (trial.row.state, trial.row.value, trial.row.step) != (state, value, step):
            self.tunes.update_trial(
                live.tune.id, trial.row.number, state, value=value, best=best, step=step,
                reason=reason,
            )  # fmt: skip
        trial.told = True
        live.open.pop(trial.row.number, None)
        self._watch.closely.discard(trial.row.job_id)

    async def _end(self, live: _Live, state: Any, reason: str) -> None:
        """End the tune; its trials still queued or running are stopped."""
        tune_reason = f"{STOPPED_BY_TUNE}{live.tune.id}: the tune ended"
        for trial in list(live.open.values()):
            row = trial.row
            self._watch.closely.discard(row.job_id)
            if row.state == "running":
                self.tunes.update_trial(
                    live.tune.id, row.number, "stopped", value=row.value, best=row.best,
                    step=row.step, reason=tune_reason,
                )  # fmt: skip
            try:
                self._stop_job(self.store.get(row.job_id), tune_reason)
            except NotFound:
                continue
        self.tunes.end(live.tune.id, state, time.time(), reason)
        self._live.pop(live.tune.id, None)


def _replace(row: TrialRow, **changes: Any) -> TrialRow:
    from dataclasses import replace  # noqa: PLC0415

    return replace(row, **changes)
