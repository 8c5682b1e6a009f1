"""Wake-ups for whoever waits on job changes: event streams, log followers, `wait`.

The events themselves are rows in the store (written in the same transaction as the state
change they describe); this only says "something changed, look again". A waiter takes the
current `changed()` event *before* reading the store, so a change that lands between its
read and its wait still wakes it, and no buffer per subscriber can overflow.
"""

from __future__ import annotations

import anyio


class ChangeNotifier:
    def __init__(self) -> None:
        self._event = anyio.Event()

    def changed(self) -> anyio.Event:
        return self._event

    def notify(self) -> None:
        event, self._event = self._event, anyio.Event()
        event.set()
