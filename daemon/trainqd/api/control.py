"""What the API asks of the scheduler, and nothing more: the API's handlers are given an
object of this protocol (the scheduler, in trainqd; app.py hands it over), never the
scheduler itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from trainq.core.reasons import WaitReason
from trainq.core.wire import UserShare
from trainqd.store.store import JobRow


class JobControl(Protocol):
    """What the API asks of the scheduler, and nothing more."""

    @property
    def waiting(self) -> Mapping[int, WaitReason]: ...

    def submitted(self, job: JobRow) -> None: ...

    def submitted_many(self, jobs: Sequence[JobRow]) -> None: ...

    def stop(self, job_id: int, uid: int, grace: float | None) -> JobRow: ...

    def pause(self, job_id: int, uid: int) -> JobRow: ...

    async def stop_many(
        self, jobs: Sequence[JobRow], uid: int, grace: float | None
    ) -> tuple[list[int], int]: ...

    def changed(self) -> None: ...

    def retimed(self, job: JobRow) -> None: ...

    def place(self, job_id: int) -> int | None: ...

    def shares(self) -> list[UserShare]: ...
