"""Helpers shared by every test tier: bounded waiting on conditions, never bare sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar, cast

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_for(
    condition: Callable[[], T | bool | None],
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str | None = None,
) -> T:
    """Poll `condition` until it returns something truthy and return that; fail after
    `timeout` seconds with `what` (or the condition's name) in the message."""
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        value = condition()
        if value:
            return cast(T, value)  # truthy: not None, not False
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
