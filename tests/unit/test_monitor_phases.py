"""The monitor's lifecycle: explicit phases, each step checked against one table."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from trainqd.monitor.records import Launch
from trainqd.monitor.supervise import Phase, PhaseError, TrainerSupervisor


def supervisor() -> TrainerSupervisor:
    # Only the phase bookkeeping is exercised: nothing is prepared or started.
    launch = SimpleNamespace(runtime="process", container=None, deadline=None)
    return TrainerSupervisor(cast(Launch, launch))


def test_an_attempt_goes_through_every_phase_in_order() -> None:
    monitor = supervisor()
    assert monitor.phase is Phase.PREPARING
    for phase in (Phase.RUNNING, Phase.STOPPING, Phase.ENDING, Phase.ENDED):
        monitor._enter(phase)
        assert monitor.phase is phase


@pytest.mark.parametrize("before", [Phase.PREPARING, Phase.RUNNING, Phase.STOPPING])
def test_an_attempt_may_end_from_any_phase_before_the_end(before: Phase) -> None:
    monitor = supervisor()
    monitor.phase = before
    monitor._enter(Phase.ENDING)
    monitor._enter(Phase.ENDED)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (Phase.PREPARING, Phase.STOPPING),  # no trainer to stop yet
        (Phase.PREPARING, Phase.ENDED),  # no record written
        (Phase.RUNNING, Phase.RUNNING),  # a trainer starts once
        (Phase.STOPPING, Phase.RUNNING),  # a stop is never taken back
        (Phase.ENDING, Phase.STOPPING),
        (Phase.ENDED, Phase.ENDING),
    ],
)
def test_a_step_the_table_does_not_allow_is_refused(before: Phase, after: Phase) -> None:
    monitor = supervisor()
    monitor.phase = before
    with pytest.raises(PhaseError, match=f"from {before.value} to {after.value}"):
        monitor._enter(after)
    assert monitor.phase is before
