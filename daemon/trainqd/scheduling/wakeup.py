"""The scheduler's wake-up: made before the scheduler (app.py), so that the parts built
before it (the launcher, attempt ends, stopping, the Slurm back end, the tuner) can tell it
that something changed without holding the scheduler."""

from __future__ import annotations

import anyio

from trainqd.scheduling.events import ChangeNotifier


class Wakeup:
    def __init__(self, notifier: ChangeNotifier) -> None:
        self._notifier = notifier
        self._event = anyio.Event()

    def wake(self) -> None:
        """Plan again."""
        self._event.set()

    def changed(self) -> None:
        """A job changed: tell whoever waits on job changes (streams, `wait`), and plan again."""
        self._notifier.notify()
        self.wake()

    async def sleep(self, delay: float) -> None:
        """Until woken, or `delay` seconds at most."""
        with anyio.move_on_after(delay):
            await self._event.wait()
        self._event = anyio.Event()
