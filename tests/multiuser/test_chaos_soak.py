"""Half a minute of the chaos soak (bench/chaos.py, whose long runs are in bench/README.md):
every kind of event happens at least once, each of trainqd's processes is killed, and every
invariant holds after each event and at the end."""

from __future__ import annotations

import pytest
from bench.chaos import soak

pytestmark = pytest.mark.multiuser

# Every kind of event once, the kills early (while the first jobs run), then chance.
OPENING = (
    "sweep",
    "submit",
    "kill_monitor",
    "kill_fork_server",
    "submit",
    "kill_trainqd",
    "sweep",  # jobs to stop, whatever ended meanwhile
    "stop_own",
    "stop_foreign",
    "stop_as_admin",
    "sweep",
    "stop_group",
    "restart_trainqd",
    "drain_or_resume",
    "freeze_trainqd",
    "hold_or_release",
    "change_priority",
    "sweep",
)
EVENTS = (
    "submit",
    "sweep",
    "kill -9 a monitor",
    "kill -9 the fork server",
    "kill -9 trainqd",
    "restart trainqd",
    "clean restart of trainqd",
    "trainqd frozen",
    "drain a GPU",
)
CHECKS = (
    "acknowledged jobs kept",
    "attempts one at a time",
    "no GPU given twice (API)",
    "never run twice, resumed from checkpoint (ledgers)",
    "ledgers agree with trainqd",
    "no GPU used twice (trainers' own view)",
    "completed jobs did every step",
    "usage report equals attempts",
    "no process of an ended attempt alive",
    "nothing started on a drained GPU",
    "a stopped job never runs again",
    "a stop takes effect",
    "no job failed by trainq's doing",
    "trainqd stops cleanly and logged no error",
)


def test_half_a_minute_of_chaos_breaks_no_invariant() -> None:
    lines: list[str] = []
    result = soak(0.5, gpus="fake:4", seed=20, say=lines.append, opening=OPENING)
    assert result.tally.broken == [], "\n".join([*lines, result.text])
    for event in EVENTS:
        assert result.tally.events[event] > 0, (event, result.text)
    for check in CHECKS:
        assert result.tally.rounds[check] > 0, (check, result.text)
        assert result.tally.items[check] > 0, (check, result.text)
