"""The watcher of the running scheduler. It needs the scheduler's task group, so it is
opened when the scheduler runs (`open`); the parts built before that (the launcher,
stopping) are handed `current`, which they ask only while the scheduler runs."""

from __future__ import annotations

from anyio.abc import TaskGroup

from trainqd.attempts.watcher import OnEnd, Watcher, WatcherFactory


class Watching:
    def __init__(self, factory: WatcherFactory) -> None:
        self._factory = factory
        self._watcher: Watcher | None = None

    def open(self, task_group: TaskGroup, on_end: OnEnd) -> Watcher:
        self._watcher = self._factory(task_group, on_end)
        return self._watcher

    def current(self) -> Watcher:
        assert self._watcher is not None, "the scheduler is not running"
        return self._watcher
