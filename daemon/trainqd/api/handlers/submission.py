"""The handlers of submissions: one spec, or a list of them as one group (a sweep), and a
submission repeated with its token answered with the jobs it first queued."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

from trainq.core.errors import InvalidSpec, NotFound, PayloadTooLarge
from trainq.core.spec import JobSpec
from trainq.core.wire import JobRecord, SubmittedGroup
from trainqd.access.admission import HostFacts, admit, check_queue_room
from trainqd.access.authorization import Authorizer, Sight
from trainqd.access.budgets import SpecBudget, check_spec_sizes
from trainqd.access.identity import account
from trainqd.api.control import JobControl
from trainqd.api.limits import ServerLimits
from trainqd.api.routing import Encoded, Request, Response
from trainqd.api.submissions import (
    PARSE_ON_LOOP_BYTES,
    admit_all,
    is_list,
    judged_alike,
    parse_specs,
)
from trainqd.api.views import job_record
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.snapshots import Snapshots
from trainqd.config import Config
from trainqd.scheduling.dependencies import check_named
from trainqd.store import JobOwner, JobRow, NewJobs, Store, Submitted, SubmitToken, TokenUsed
from trainqd.store.group_commit import GroupCommit
from trainqd.store.submit_tokens import IDEMPOTENCY_HEADER, all_there, same_request, token_of

# The body of one POST /v1/jobs, which may hold a list of specs (max_jobs_per_submit of them).
SUBMIT_MAX_BODY = 16 << 20
ONE_SPEC_MAX_BODY = ServerLimits().max_body


@dataclass
class Submission:
    """`POST /v1/jobs`, with what it needs of the API (`Api` builds it)."""

    store: Store
    control: JobControl
    dirs: JobDirs
    config: Config
    authorizer: Authorizer
    instance: str
    snapshots: Snapshots  # sources copied at submit
    record: Callable[[int, int], JobRecord]  # a job as a uid may see it
    reveal: Callable[[int, JobRow], Sight]
    host: Callable[[], HostFacts]
    listing: Callable[[], anyio.CapacityLimiter]  # one page of records built at a time
    _commits: GroupCommit | None = field(default=None, init=False, repr=False)
    # Jobs each user has in submissions not yet committed (max_unfinished_jobs_per_user).
    _submitting: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    # Bytes of specs each user has in submissions not yet committed (budgets.py).
    _spec_budget: SpecBudget = field(default_factory=SpecBudget, init=False, repr=False)

    @property
    def commits(self) -> GroupCommit:
        """Where submissions are committed, together with those that arrive with them."""
        if self._commits is None:
            self._commits = GroupCommit(self.store)
        return self._commits

    @contextmanager
    def _queue_room(self, owner: JobOwner, sizes: Sequence[int]) -> Iterator[None]:
        """Room in the owner's queue for jobs whose specs take `sizes` bytes, held while
        they are committed: checked and taken in one step on the loop, so concurrent
        submissions cannot all pass it."""
        stored = self.store.unfinished_spec_bytes(owner.uid)
        budget = self.config.max_unfinished_spec_bytes_per_user
        with (
            self._spec_budget.room(owner.uid, owner.user, stored, sum(sizes), budget),
            self._job_room(owner, len(sizes)),
        ):
            yield

    @contextmanager
    def _job_room(self, owner: JobOwner, adding: int) -> Iterator[None]:
        most = self.config.max_unfinished_jobs_per_user
        busy = self._submitting.get(owner.uid, 0)
        # Counting one user's jobs walks them all: only needed once all users' could pass.
        if most and self.store.unfinished_count() + busy + adding > most:
            have = self.store.unfinished_count(owner.uid) + busy
            check_queue_room(owner.user, have, adding, most)
        self._submitting[owner.uid] = busy + adding
        try:
            yield
        finally:
            left = self._submitting[owner.uid] - adding
            if left:
                self._submitting[owner.uid] = left
            else:
                del self._submitting[owner.uid]

    async def _replay(self, token: SubmitToken, submitted: Submitted) -> Response:
        """The answer a repeated submission gets: the jobs its token first queued, as they
        are now, in the shape of the first answer (submit_tokens.py). A sweep's records are
        read and built in a worker thread, as a listing's are."""
        same_request(token, submitted)
        first = submitted.first_id
        if not submitted.grouped:
            try:
                found = [self.store.get(first)]
            except NotFound:
                found = []
            (job,) = all_there(token, submitted, found)
            return Response(201, self.record(job.id, token.uid))
        waiting = dict(self.control.waiting)

        def build() -> bytes:
            page, _, _ = self.store.page(None, None, first - 1, submitted.job_count, group=first)
            jobs = all_there(token, submitted, [job for job, _ in page])
            reveal = self.reveal(token.uid, jobs[0])
            records = [
                job_record(
                    job, attempts, self.dirs, waiting.get(job.id), reveal=reveal,
                    instance=self.instance,
                )
                for job, attempts in page
            ]  # fmt: skip
            return SubmittedGroup(group_id=first, jobs=records).model_dump_json().encode()

        payload = await anyio.to_thread.run_sync(build, limiter=self.listing())
        return Response(201, Encoded(payload))

    async def submit(self, request: Request) -> Response:
        given = request.header(IDEMPOTENCY_HEADER.lower())
        token = token_of(given, request.body, request.caller.uid)
        if token is not None and (earlier := self.store.submitted_with(token.uid, token.token)):
            return await self._replay(token, earlier)
        if is_list(request.body):
            return await self.submit_list(request, token)
        if len(request.body) > ONE_SPEC_MAX_BODY:  # the larger limit is a list's alone
            raise PayloadTooLarge(f"request body is larger than {ONE_SPEC_MAX_BODY} bytes")
        spec = request.model(JobSpec)
        texts = [spec.model_dump_json()]
        check_spec_sizes(texts, self.config.max_spec_bytes, listed=False)  # before any child
        owner = await admit(spec, request.caller.uid, self.host(), self.authorizer)
        check_named([spec], self.store)
        try:
            job = await self.submit_one(spec, owner, texts=texts, token=token)
        except TokenUsed as used:  # the same token, sent twice at once: queued once
            assert token is not None
            return await self._replay(token, used.submitted)
        self.control.submitted(job)
        return Response(201, self.record(job.id, request.caller.uid))

    async def submit_one(
        self,
        spec: JobSpec,
        owner: JobOwner,
        *,
        texts: list[str] | None = None,
        token: SubmitToken | None = None,
    ) -> JobRow:
        """Commit one admitted spec, its source copied first where it has a snapshot."""
        texts = texts or [spec.model_dump_json()]
        sizes = check_spec_sizes(texts, self.config.max_spec_bytes, listed=False)
        staging = await self.snapshots.take(spec, account(owner.uid))
        try:
            with self._queue_room(owner, sizes):
                (job,) = await self.commits.submit(
                    NewJobs([spec], owner, spec_json=texts, token=token)
                )
        except BaseException:
            if staging is not None:
                self.snapshots.discard(staging)
            raise
        if staging is not None:
            self.snapshots.place(staging, job.id)
        return job

    async def submit_list(self, request: Request, token: SubmitToken | None = None) -> Response:
        """A list of specs: all parsed and admitted first, then queued in one transaction
        as one group. Parsing 10,000 specs and building their records take a worker
        thread; the inserts and their one commit stay on the loop (group_commit.py)."""
        cap = self.config.max_jobs_per_submit

        most_bytes = self.config.max_spec_bytes

        def parse() -> tuple[list[JobSpec], list[int], list[str], list[int]]:
            specs = parse_specs(request, cap)
            texts = [spec.model_dump_json() for spec in specs]
            sizes = check_spec_sizes(texts, most_bytes, listed=True)
            return specs, judged_alike(specs), texts, sizes

        if len(request.body) <= PARSE_ON_LOOP_BYTES:
            specs, firsts, texts, sizes = parse()
        else:
            specs, firsts, texts, sizes = await anyio.to_thread.run_sync(parse)
        uid = request.caller.uid
        owner = await admit_all(specs, firsts, uid, self.host(), self.authorizer)
        check_named([specs[index] for index in firsts], self.store)
        if any(spec.snapshot for spec in specs):
            raise InvalidSpec("snapshot: a sweep's jobs run their source as it is when each starts")
        submission = NewJobs(specs, owner, grouped=True, spec_json=texts, token=token)
        try:
            with self._queue_room(owner, sizes):
                jobs = await self.commits.submit(submission)
        except TokenUsed as used:
            assert token is not None
            return await self._replay(token, used.submitted)
        self.control.submitted_many(jobs)
        waiting = dict(self.control.waiting)
        reveal = self.reveal(uid, jobs[0])

        def build() -> bytes:
            records = [
                job_record(
                    job, [], self.dirs, waiting.get(job.id), reveal=reveal, instance=self.instance
                )
                for job in jobs
            ]
            group = jobs[0].group_id or jobs[0].id
            return SubmittedGroup(group_id=group, jobs=records).model_dump_json().encode()

        payload = build() if len(jobs) <= 16 else await anyio.to_thread.run_sync(build)
        return Response(201, Encoded(payload))
