"""Word that a closely followed attempt's output grew (metric_watch.py), from inotify: the
attempt's directory, where its monitor writes the trainer's stdout and stderr, and its ml
root's `output`, where the trainer writes `metrics.jsonl`.

An event is only a wake-up: what changed is read as every pass reads (metric_reading.py,
hostile input, bounded). The owner controls `output`, so it is watched without following a
link and only if it is a directory; whatever they do in it costs at most a quick pass per
metric_watch.QUICK_GAP. The kernel's queue of events is bounded; when it overflows, every
watched attempt counts as changed. A directory removed (and so unwatched by the kernel)
is watched again when the next full pass finds it made again.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Hashable, Sequence
from pathlib import Path

import anyio
from inotify_simple import INotify, flags

_WATCHED = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE
_SAFELY = flags.ONLYDIR | flags.DONT_FOLLOW


class OutputEvents:
    """Directories watched per key (an attempt); `changed` waits for the keys whose
    directories saw writes. `watch` and `unwatch` may run on worker threads."""

    def __init__(self) -> None:
        self._inotify = INotify()
        os.set_inheritable(self._inotify.fileno(), False)  # no child of trainqd's gets it
        self._lock = threading.Lock()
        self._keys: dict[int, tuple[Hashable, Path]] = {}  # descriptor -> key, directory
        self._watches: dict[Hashable, dict[Path, int]] = {}  # key -> directory -> descriptor

    def watch(self, key: Hashable, directories: Sequence[Path]) -> None:
        """Watch those of `directories` that exist and are not yet watched for `key` (one
        not made yet is tried again at the next call)."""
        with self._lock:
            watched = self._watches.setdefault(key, {})
            for directory in directories:
                if directory in watched:
                    continue
                try:
                    wd = self._inotify.add_watch(directory, _WATCHED | _SAFELY)
                except OSError:
                    continue
                self._keys[wd] = (key, directory)
                watched[directory] = wd

    def watched(self, key: Hashable) -> list[Path]:
        """The directories watched for `key`."""
        with self._lock:
            return list(self._watches.get(key, {}))

    def unwatch(self, key: Hashable) -> None:
        with self._lock:
            for wd in self._watches.pop(key, {}).values():
                # Another key's now (the same directory, or a number used again): kept.
                if self._keys.get(wd, (None,))[0] == key:
                    del self._keys[wd]
                    # Its directory may be gone, and the watch with it.
                    with contextlib.suppress(OSError):
                        self._inotify.rm_watch(wd)

    async def changed(self) -> set[Hashable]:
        """The keys whose directories were written to since the last call."""
        while True:
            await anyio.wait_readable(self._inotify.fileno())
            events = self._inotify.read(timeout=0)
            with self._lock:
                keys = {self._keys[e.wd][0] for e in events if e.wd in self._keys}
                if any(event.mask & flags.Q_OVERFLOW for event in events):
                    keys = set(self._watches)
                for event in events:
                    if event.mask & flags.IGNORED and event.wd in self._keys:
                        # Its directory was removed: watched again once made again.
                        key, directory = self._keys.pop(event.wd)
                        self._watches.get(key, {}).pop(directory, None)
            if keys:
                return keys

    def close(self) -> None:
        self._inotify.close()
