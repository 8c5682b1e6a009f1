"""How long the event loop was kept from its other work: every handler, the scheduler and
the monitors' watchers share one thread, so any step that holds it delays them all.

A probe sleeps PROBE_SECONDS at a time and measures how late it wakes; a step that holds
the loop for D seconds makes the next wake-up late by up to D. Lateness also counts time the
process waited for a CPU (a loaded machine), so the probe reports a second figure: the CPU
time the loop's thread used between two wake-ups, an upper bound on the longest step that
ran in that window on the CPU. The probe's own cost is small (about a hundred wake-ups a
second, a few microseconds each) and it is what lets an operator, and bench/scale.py, see a
stall instead of guessing at one from response times.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

PROBE_SECONDS = 0.01


async def watch(
    late: Callable[[float], None],
    busy: Callable[[float], None],
    interval: float = PROBE_SECONDS,
) -> None:
    """Report each wake-up's lateness and the loop thread's CPU seconds since the previous
    wake-up, for as long as trainqd runs."""
    cpu = time.thread_time()
    while True:
        due = time.perf_counter() + interval
        await anyio.sleep(interval)
        late(max(0.0, time.perf_counter() - due))
        now = time.thread_time()
        busy(now - cpu)
        cpu = now
