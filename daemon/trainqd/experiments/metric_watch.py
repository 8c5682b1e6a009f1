"""Metrics of running attempts, read as their trainers write them (docs/architecture.md).

Every POLL seconds one worker thread reads each running attempt's new output
(`metric_reading`); an attempt no longer running gets a last read to the end of its files.
The attempts of jobs in `closely` (a tune's trials, whose reports its pruner waits for) are
also read as soon as their output grows (inotify, output_events.py), in a quick pass over
them alone, at most one per QUICK_GAP and QUICK_BUDGET bytes of each source, so a trainer
that floods its output costs a bounded share of the thread; the listeners hear at once.
What was read is saved, with how far each source was read, in
`attempts/<n>.metrics.json` of trainqd's own job directory (0600: metrics are shown only to
whoever may read the job's logs), at most every SAVE_EVERY seconds and at the end, so a
restarted trainqd goes on where the file says and reads nothing twice. An attempt that ended
while no trainqd ran is read when its metrics are first asked for.

The loop only swaps in snapshots the worker made: it never sees a series being changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainq.core.wire import AttemptMetricsRecord, JobMetrics, MetricSeriesRecord
from trainqd.attempts.jobdir import JobDirs
from trainqd.experiments.metric_reading import READ_BUDGET, AttemptReader, patterns
from trainqd.experiments.metric_series import AttemptMetrics
from trainqd.store.store import JobRow, Store

if TYPE_CHECKING:
    from trainqd.experiments.output_events import OutputEvents

POLL = 1.0
QUICK_GAP = 0.02  # seconds between two quick passes at least
QUICK_BUDGET = 1 << 16  # bytes of each source a quick pass reads at most
SAVE_EVERY = 5.0
FINAL_PASSES = 64  # READ_BUDGET each: how much of an ended attempt's output is read at most
_LIVE = (JobState.RUNNING, JobState.STOPPING)
# A snapshot of one attempt's metrics: the JSON form of AttemptMetrics.
Snapshot = dict[str, Any]
Listener = Callable[[int, int, Snapshot], None]

log = structlog.get_logger("trainqd.metric_watch")


def metrics_file(dirs: JobDirs, job_id: int, number: int) -> Path:
    return dirs.job_dir(job_id) / "attempts" / f"{number}.metrics.json"


def _load(path: Path) -> AttemptMetrics | None:
    try:
        with open(path, "rb") as file:
            return AttemptMetrics.from_json(json.load(file))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("metrics file unreadable: reading again", path=str(path), error=str(exc))
        return None


def _save(path: Path, metrics: AttemptMetrics) -> None:
    """Atomically, in trainqd's own directory; a full disk loses the save, not the reads."""
    temporary = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(metrics.to_json(), file, separators=(",", ":"))
        os.replace(temporary, path)
        metrics.changed = False
    except OSError as exc:
        log.warning("metrics not saved", path=str(path), error=exc.strerror)


def _directions(spec: JobSpec) -> dict[str, str]:
    return {d.name: d.direction for d in spec.metric_definitions}


def attempt_record(number: int, snapshot: Snapshot, directions: dict[str, str]) -> Any:
    series = {}
    for name, data in snapshot["series"].items():
        direction = directions.get(name, "minimize")
        best = data["least"] if direction == "minimize" else data["greatest"]
        points = [tuple(p) for p in data["points"]]
        last = None if data["last"] is None else tuple(data["last"])
        if last is not None and (not points or points[-1] != last):
            points.append(last)
        series[name] = MetricSeriesRecord(
            points=points, count=data["count"], direction=direction, latest=last, best=best
        )
    return AttemptMetricsRecord(number=number, series=series, dropped=snapshot["dropped"])


@dataclass
class _Tracked:
    reader: AttemptReader
    path: Path
    saved_at: float = 0.0


@dataclass
class MetricWatch:
    store: Store
    dirs: JobDirs
    listeners: list[Listener] = field(default_factory=list)
    _tracked: dict[tuple[int, int], _Tracked] = field(default_factory=dict)
    _snapshots: dict[tuple[int, int], Snapshot] = field(default_factory=dict)
    _reading: anyio.Lock = field(default_factory=anyio.Lock)
    # Jobs whose attempts are read as their output grows (the tuner's open trials).
    closely: set[int] = field(default_factory=set)
    _events: OutputEvents | None = None  # made when the first such attempt is tracked
    _waiting: anyio.CancelScope | None = None
    _full_pass_asked: bool = False

    async def run(self) -> None:
        try:
            while True:
                self._full_pass_asked = False
                await self.read_once()
                await self.quick_passes(anyio.current_time() + POLL)
        finally:
            if self._events is not None:
                self._events.close()

    @property
    def output_events(self) -> OutputEvents | None:
        """The inotify watches of closely followed attempts, once there was one."""
        return self._events

    def started(self, job_ids: list[int]) -> None:
        """The scheduler started these jobs: a tune's trial among them is taken up at once."""
        if not self.closely.isdisjoint(job_ids):
            self.wake()

    def wake(self) -> None:
        """A job of `closely` started: a full pass now takes its attempt up."""
        self._full_pass_asked = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def quick_passes(self, until: float) -> None:
        """Until `until` (or a full pass is asked): a quick pass over the closely followed
        attempts whose output grew, each as soon as it grew, at most one per QUICK_GAP."""
        while not self._full_pass_asked:
            left = until - anyio.current_time()
            if left <= 0:
                return
            changed: set[Any] = set()
            with anyio.move_on_after(left) as scope:
                self._waiting = scope
                if self._events is None:
                    await anyio.sleep(left)
                else:
                    changed = await self._events.changed()
            self._waiting = None
            if changed:
                await self._read(changed)
                await anyio.sleep(QUICK_GAP)

    async def read_once(self) -> None:
        """One pass over the running attempts, and a last one over those that ended."""
        await self._read(None)

    async def _read(self, only: set[Any] | None) -> None:
        """A full pass (`only` None), or a quick one over the tracked attempts of `only`."""
        live: dict[tuple[int, int], JobRow] = {}
        if only is None:
            live = {
                (job.id, job.attempt_count): job
                for job in self.store.jobs(list(_LIVE))
                if job.attempt_count > 0
            }
        async with self._reading:
            if only is None:
                started = [key for key in live if key not in self._tracked]
                ended = [key for key in self._tracked if key not in live]
                if not live and not ended:
                    return
                new = {key: live[key] for key in started}
                snapshots = await anyio.to_thread.run_sync(self._pass, new, ended)
            else:
                ended = []
                snapshots = await anyio.to_thread.run_sync(self._quick_pass, only)
        for key in ended:
            self._snapshots.pop(key, None)
        for (job_id, number), snapshot in snapshots.items():
            if (job_id, number) in self._tracked:
                self._snapshots[job_id, number] = snapshot
            for listener in self.listeners:
                listener(job_id, number, snapshot)

    def _follow_closely(self, key: tuple[int, int], tracked: _Tracked) -> None:
        """On a worker thread: watch a closely followed attempt's output."""
        if key[0] not in self.closely:
            return
        if self._events is None:
            # Only once a tune runs: an idle trainqd has no inotify instance.
            from trainqd.experiments.output_events import OutputEvents  # noqa: PLC0415

            self._events = OutputEvents()
        reader = tracked.reader
        self._events.watch(key, [reader.attempt_dir, reader.ml_root / "output"])

    def _quick_pass(self, keys: set[Any]) -> dict[tuple[int, int], Snapshot]:
        """On a worker thread: read what came of `keys`' attempts, within QUICK_BUDGET."""
        changed: dict[tuple[int, int], Snapshot] = {}
        for key in keys:
            tracked = self._tracked.get(key)
            if tracked is None:
                continue
            metrics = tracked.reader.metrics
            before = dict(metrics.offsets)
            tracked.reader.read(budget=QUICK_BUDGET)
            if metrics.offsets != before:
                changed[key] = metrics.to_json()
        return changed

    def _reader(self, job: JobRow, number: int, metrics: AttemptMetrics) -> AttemptReader:
        return AttemptReader(
            attempt_dir=self.dirs.attempt_dir(job.id, number),
            ml_root=self.dirs.ml_root(job.id),
            found=patterns(job.spec.metric_definitions),
            metrics=metrics,
        )

    def _pass(
        self, new: dict[tuple[int, int], JobRow], ended: list[tuple[int, int]]
    ) -> dict[tuple[int, int], Snapshot]:
        """On a worker thread: read, save what is due; the snapshots of what changed."""
        for (job_id, number), job in new.items():
            path = metrics_file(self.dirs, job_id, number)
            metrics = _load(path) or AttemptMetrics()
            self._tracked[job_id, number] = _Tracked(self._reader(job, number, metrics), path)
        now = time.monotonic()
        changed: dict[tuple[int, int], Snapshot] = {}
        for key, tracked in list(self._tracked.items()):
            metrics = tracked.reader.metrics
            reported = metrics.changed
            final = key in ended
            if final:
                _read_to_end(tracked.reader)
            else:
                self._follow_closely(key, tracked)
                tracked.reader.read(budget=READ_BUDGET)
            if metrics.changed and (final or now - tracked.saved_at >= SAVE_EVERY):
                _save(tracked.path, metrics)
                tracked.saved_at = now
            if final:
                if self._events is not None:
                    self._events.unwatch(key)
                del self._tracked[key]
            if metrics.changed or reported or final or key in new:
                changed[key] = metrics.to_json()
        return changed

    async def job_metrics(self, job: JobRow) -> JobMetrics:
        """Every attempt's kept points: a running one's as last read, an ended one's from
        its file (read from its output first if no trainqd has yet)."""
        directions = _directions(job.spec)
        # Only the running attempt's snapshot is current: an ended one is read to its end.
        live = job.attempt_count if job.state in _LIVE else None
        known = {n: s for (j, n), s in self._snapshots.items() if j == job.id and n == live}
        wanted = [n for n in range(1, job.attempt_count + 1) if n not in known]
        if wanted:
            async with self._reading:
                known.update(await anyio.to_thread.run_sync(self._stored, job, wanted))
        return JobMetrics(
            job_id=job.id,
            attempts=[
                attempt_record(n, known[n], directions)
                for n in range(1, job.attempt_count + 1)
                if n in known
            ],
        )

    def _stored(self, job: JobRow, numbers: list[int]) -> dict[int, Snapshot]:
        out = {}
        for number in numbers:
            tracked = self._tracked.get((job.id, number))
            if tracked is not None:
                if not tracked.reader.metrics.final and not (
                    job.state in _LIVE and number == job.attempt_count
                ):
                    _read_to_end(tracked.reader)  # ended before the next pass saw it
                out[number] = tracked.reader.metrics.to_json()
                continue
            if job.state in _LIVE and number == job.attempt_count:
                continue  # not yet taken up by a pass: nothing to show yet
            path = metrics_file(self.dirs, job.id, number)
            metrics = _load(path) or AttemptMetrics()
            if not metrics.final:  # ended while no trainqd read it
                _read_to_end(self._reader(job, number, metrics))
                _save(path, metrics)
            out[number] = metrics.to_json()
        return out


def _read_to_end(reader: AttemptReader) -> None:
    for _ in range(FINAL_PASSES):
        before = dict(reader.metrics.offsets)
        reader.read(final=True)
        if reader.metrics.offsets == before:
            break
    reader.metrics.final = True
    reader.metrics.changed = True
