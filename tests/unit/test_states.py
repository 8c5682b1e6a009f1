from __future__ import annotations

import pytest

from trainq.core.states import (
    ACTIVE,
    TERMINAL,
    TRANSITIONS,
    UNFINISHED,
    JobState,
    TransitionError,
    check_transition,
    sources_of,
)


def test_terminal_states_never_change() -> None:
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()


def test_every_state_is_reachable_from_pending() -> None:
    seen, frontier = {JobState.PENDING}, [JobState.PENDING]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobState)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.STOPPED),
        (JobState.RUNNING, JobState.PENDING),
        (JobState.RUNNING, JobState.STOPPING),
        (JobState.STOPPING, JobState.STOPPED),
        (JobState.STOPPING, JobState.COMPLETED),
        (JobState.STOPPING, JobState.PENDING),  # preempted
    ],
)
def test_allowed(src: JobState, dst: JobState) -> None:
    check_transition(src, dst)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (JobState.PENDING, JobState.COMPLETED),
        (JobState.PENDING, JobState.STOPPING),
        (JobState.COMPLETED, JobState.PENDING),
        (JobState.STOPPED, JobState.RUNNING),
        (JobState.STOPPED, JobState.PENDING),
        (JobState.FAILED, JobState.STOPPED),
    ],
)
def test_refused(src: JobState, dst: JobState) -> None:
    with pytest.raises(TransitionError, match=f"a {src} job cannot become {dst}"):
        check_transition(src, dst)


def test_groups() -> None:
    assert {JobState.RUNNING, JobState.STOPPING} == ACTIVE
    assert {JobState.PENDING, JobState.RUNNING, JobState.STOPPING} == UNFINISHED
    assert sources_of(JobState.STOPPED) == {JobState.PENDING, JobState.RUNNING, JobState.STOPPING}
