"""What every export target shares: the refusal and the names of things."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainq.core.errors import InvalidSpec

if TYPE_CHECKING:  # pydantic stays off the CLI's start-up (trainq.cli registers `export`)
    from trainq.core.spec import JobSpec

TARGETS = ("slurm", "kubernetes", "sagemaker")


class Unsupported(InvalidSpec):
    """The target cannot express this part of the spec: one line naming the field and why."""

    def __init__(self, target: str, field: str, why: str) -> None:
        super().__init__(f"cannot export to {target}: {field}: {why}")
        self.target = target
        self.field = field


def job_name(spec: JobSpec, default: str = "trainq-job") -> str:
    return spec.name or default


def ceil_seconds(value: float) -> int:
    whole = int(value)
    return whole if whole == value else whole + 1
