"""What the ended states of the jobs a dependency names mean (trainq.core.dependencies)."""

from __future__ import annotations

import pytest

from trainq.core.dependencies import Dependency, Status, judge, parse
from trainq.core.reasons import Wait, WaitReason, render


@pytest.mark.parametrize(
    ("text", "written"),
    [("12", "12:ok"), (" 12:any", "12:any"), ("group:7:failed", "group:7:failed")],
)
def test_the_written_forms(text: str, written: str) -> None:
    assert str(parse(text)) == written


@pytest.mark.parametrize("text", ["", "0", "-3", "12:maybe", "group:", "g12", "12:ok:ok", "1" * 19])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not JOB, JOB:ok"):
        parse(text)


@pytest.mark.parametrize(
    ("dependency", "states", "status", "why"),
    [
        ("12:ok", ["RUNNING"], Status.WAITING, None),
        ("12:ok", ["COMPLETED"], Status.MET, None),
        ("12:ok", ["STOPPED"], Status.NEVER, "job 12 ended STOPPED"),
        ("12:failed", ["FAILED"], Status.MET, None),
        ("12:failed", ["STOPPED"], Status.MET, None),
        ("12:failed", ["COMPLETED"], Status.NEVER, "job 12 COMPLETED"),
        ("12:any", ["PENDING"], Status.WAITING, None),
        ("12:any", ["FAILED"], Status.MET, None),
        ("12:any", None, Status.NEVER, "job 12 was removed"),
        ("group:7:ok", ["COMPLETED", "RUNNING"], Status.WAITING, None),
        ("group:7:ok", ["FAILED", "RUNNING"], Status.NEVER, "group 7 ended FAILED"),
        ("group:7:ok", ["COMPLETED", "COMPLETED"], Status.MET, None),
        ("group:7:failed", ["FAILED", "RUNNING"], Status.WAITING, None),
        ("group:7:failed", ["FAILED", "COMPLETED"], Status.MET, None),
        ("group:7:failed", ["COMPLETED", "COMPLETED"], Status.NEVER, "group 7 COMPLETED"),
        ("group:7:any", ["STOPPED", "COMPLETED"], Status.MET, None),
    ],
)
def test_what_the_states_mean(
    dependency: str, states: list[str] | None, status: Status, why: str | None
) -> None:
    assert judge(parse(dependency), states) == (status, why)


def test_the_waiting_reason_in_words() -> None:
    assert render(WaitReason(Wait.DEPENDENCY, after="12:ok")) == "waiting for job 12 to succeed"
    group = Dependency(7, group=True, when="any")
    assert render(WaitReason(Wait.DEPENDENCY, after=str(group))) == (
        "waiting for every job of group 7 to end"
    )
