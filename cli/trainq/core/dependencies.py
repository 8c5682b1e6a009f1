"""A job's dependencies (`--after JOB[:ok|:any|:failed]`, `--after group:G[:...]`, the spec's
`after`): their one written form, and what the ended states of the jobs they name mean.

    12 or 12:ok     job 12 COMPLETED                     (Slurm afterok)
    12:failed       job 12 ended otherwise: FAILED or STOPPED (afternotok)
    12:any          job 12 ended, however                (afterany)
    group:12[:...]  the same of every job of group 12 (`:failed`: of at least one, once all
                    ended)

Standard library only: the CLI and trainqd both read it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

When = Literal["ok", "failed", "any"]
_FORM = re.compile(r"^(group:)?([1-9][0-9]{0,17})(?::(ok|failed|any))?\Z")
_WORDS = {"ok": "succeed", "failed": "fail", "any": "end"}
ENDED = frozenset({"COMPLETED", "FAILED", "STOPPED"})
MAX_DEPENDENCIES = 64


class Status(enum.Enum):
    MET = "met"
    WAITING = "waiting"
    NEVER = "never"  # can no longer be met


@dataclass(frozen=True)
class Dependency:
    job_id: int  # the job, or the group (whose id is its first job's)
    group: bool = False
    when: When = "ok"

    def __str__(self) -> str:
        return f"{'group:' if self.group else ''}{self.job_id}:{self.when}"

    def what(self) -> str:
        return f"group {self.job_id}" if self.group else f"job {self.job_id}"

    def waiting_words(self) -> str:
        """`job 12 to succeed`, `every job of group 7 to end`."""
        if self.group:
            return f"every job of group {self.job_id} to {_WORDS[self.when]}"
        return f"job {self.job_id} to {_WORDS[self.when]}"


def parse(text: str) -> Dependency:
    """`12`, `12:any`, `group:7:failed`; ValueError in one line otherwise."""
    match = _FORM.match(text.strip())
    if match is None:
        raise ValueError(
            f"dependency {text!r} is not JOB, JOB:ok, JOB:failed, JOB:any or group:G[:...]"
        )
    group, number, when = match.groups()
    return Dependency(int(number), group is not None, when or "ok")  # type: ignore[arg-type]


def judge(dependency: Dependency, states: Sequence[str] | None) -> tuple[Status, str | None]:
    """Whether the dependency holds given the states of the jobs it names (one for a job,
    every member's for a group; None: removed), and, if it never will, why."""
    what = dependency.what()
    if not states:
        return Status.NEVER, f"{what} was removed"
    ended = [s for s in states if s in ENDED]
    if dependency.when == "ok":
        failed = [s for s in ended if s != "COMPLETED"]
        if failed:
            return Status.NEVER, f"{what} ended {failed[0]}"
        return (Status.MET, None) if len(ended) == len(states) else (Status.WAITING, None)
    if len(ended) < len(states):
        return Status.WAITING, None
    if dependency.when == "failed" and all(s == "COMPLETED" for s in ended):
        return Status.NEVER, f"{what} COMPLETED"
    return Status.MET, None
