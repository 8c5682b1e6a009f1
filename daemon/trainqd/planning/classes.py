"""Job classes (QoS), as the administrator defines them in the configuration: each has an
order weight, whether its jobs may be preempted or may preempt, per-user limits, a longest
runtime, and who may use it (docs/architecture.md, "Sharing").

With no `[classes.NAME]` table there is one implicit class, `default_class`, with none of
these: everyone may use it, nothing is preempted, and the queue is ordered as without
classes. Whether a user may use a class is `authorization.Authorizer.may_use_class`'s to
say; admission.py refuses a submission that names a class it may not use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from trainqd.planning import planner

CLASS_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}\Z")


class JobClass(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Higher goes first in the queue, before fair share and the users' own priorities.
    weight: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] = 0
    preemptible: bool = False  # its running jobs may be stopped and queued again
    may_preempt: bool = False  # its waiting jobs may preempt lower classes' preemptible jobs
    max_gpus_per_user: Annotated[int, Field(ge=0)] = 0  # 0 = no limit
    max_running_jobs_per_user: Annotated[int, Field(ge=0)] = 0
    max_runtime_seconds: Annotated[int, Field(ge=1)] | None = None  # None = no limit
    users: list[str] | None = None  # who may use it (with `groups`); both unset: everyone
    groups: list[str] | None = None

    @property
    def restricted(self) -> bool:
        return self.users is not None or self.groups is not None


def check_name(name: str) -> str:
    if not CLASS_NAME_RE.match(name):
        raise ValueError(
            f"class name {name!r} must be 1-32 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def limits(classes: Mapping[str, JobClass]) -> dict[str, planner.ClassLimits]:
    """The classes' per-user limits, as the planner takes them."""
    return {
        name: planner.ClassLimits(c.max_running_jobs_per_user, c.max_gpus_per_user)
        for name, c in classes.items()
        if c.max_running_jobs_per_user or c.max_gpus_per_user
    }


def class_of(job_class: str | None, default: str) -> str:
    """The class a job runs in: the one it names, or the default."""
    return default if job_class is None else job_class
