"""Budgets, not just counts: what one job and one user may take of trainqd and the host.

A count of jobs says nothing of their size: 400 specs of 866 KB each took trainqd's memory
from 104 MB to 723 MB and made every listing slow, and one job with 19,000 channels put as
many bind mounts into the host's mount table. So a spec has a cap on its channels
(`max_channels_per_job`) and on its stored size (`max_spec_bytes`), and the specs of one
user's unfinished jobs a cap on their sum (`max_unfinished_spec_bytes_per_user`), checked
and taken on the event loop in one step with the submission, so that concurrent submissions
cannot all pass it. Each refusal is one line naming the limit; nothing of a refused
submission is queued.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from trainq.core.errors import Conflict, InvalidSpec
from trainq.core.spec import JobSpec


def check_channels(spec: JobSpec, most: int) -> None:
    """At most `most` channels (trainqd's max_channels_per_job)."""
    if len(spec.channels) > most:
        raise InvalidSpec(
            f"the job names {len(spec.channels)} channels; at most {most} are allowed "
            "(trainqd's max_channels_per_job)"
        )


def check_spec_sizes(texts: Sequence[str], most: int, *, listed: bool) -> list[int]:
    """The stored size in bytes of each spec (`texts`: their JSON as stored); InvalidSpec for
    the first over `most` (trainqd's max_spec_bytes), with its place in a list."""
    sizes = []
    for index, text in enumerate(texts):
        size = len(text.encode())
        if size > most:
            where = f"jobs[{index}]: " if listed else ""
            raise InvalidSpec(
                f"{where}the spec takes {size:,} bytes; at most {most:,} are allowed "
                "(trainqd's max_spec_bytes): pass large values in a file"
            )
        sizes.append(size)
    return sizes


class SpecBudget:
    """Bytes of specs each user has in submissions not yet committed, beside those the
    store keeps for their unfinished jobs (`Store.unfinished_spec_bytes`)."""

    def __init__(self) -> None:
        self._submitting: Counter[int] = Counter()

    @contextmanager
    def room(self, uid: int, user: str, stored: int, adding: int, budget: int) -> Iterator[None]:
        """Room for `adding` bytes of `user`'s specs (`stored`: those of their unfinished
        jobs), held while they are committed; Conflict when they would pass `budget`
        (0: no budget)."""
        in_use = stored + self._submitting[uid]
        if budget and in_use + adding > budget:
            raise Conflict(
                f"{user}'s unfinished jobs take {in_use:,} bytes of specs and may take at most "
                f"{budget:,} (trainqd's max_unfinished_spec_bytes_per_user); these {adding:,} "
                "more would pass it: wait for some to end, or stop some"
            )
        self._submitting[uid] += adding
        try:
            yield
        finally:
            self._submitting[uid] -= adding
            if not self._submitting[uid]:
                del self._submitting[uid]
