"""The scheduler's side of sharing (docs/architecture.md, "Sharing"): turns the queue and
the running jobs into the planner's inputs with their classes and the users' fair share
usage, carries out the plan's preemptions, and answers `trainq users` and a job's place.

The planner decides (planner.py, a pure function); this module only gathers what it needs
and acts on what it returns. Fair share's bookkeeping is fairshare.py's; a preemption is a
stop (stopping.py) whose monitor records the attempt as `preempted`, and outcomes.py then
queues the job again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from trainq.core.errors import DiskFull
from trainq.core.nodes import cpu_nodes
from trainq.core.reasons import Wait
from trainq.core.states import ACTIVE, JobState, TransitionError
from trainq.core.wire import UserShare
from trainqd.config import Config
from trainqd.planning import classes, fairshare, planner
from trainqd.planning import inputs as plan_inputs
from trainqd.planning.classes import JobClass
from trainqd.planning.share_preemptors import SharePreemptors
from trainqd.store import AttemptRow, JobRow, Store

log = structlog.get_logger("trainqd.policy")

# How long after its last victim stopped a job that preempted still goes first: time
# enough for the plan that starts it to run.
CLAIM_SLACK = 30.0


class Preempting(Protocol):
    """What the policy asks of trainqd's stopping (scheduling/stopping.py)."""

    def preempt(self, victim_id: int, for_job: JobRow, now: float) -> float: ...


@dataclass
class Claim:
    row: JobRow  # the job's row when it preempted: a change to the job ends the claim
    victims: set[int]  # the jobs preempted for it
    until: float  # when the claim lapses unless a victim is still stopping


class SharingPolicy:
    def __init__(self, config: Config, store: Store, stopping: Preempting) -> None:
        self._config = config
        self._store = store
        self._stopping = stopping
        self.classes: Mapping[str, JobClass] = config.job_classes
        self.limits = planner.Limits(
            max_running_jobs_per_user=config.max_running_jobs_per_user,
            max_gpus_per_user=config.max_gpus_per_user,
            classes=classes.limits(self.classes),
        )
        self.usage = fairshare.FairShare(config.fair_share_half_life_days)
        # Victims asked to stop, and when their grace is over at the latest: the planner
        # counts their GPUs as coming free then, and none is preempted twice.
        self.stop_due: dict[int, float] = {}
        # The head's claim on the GPUs its victims free: a head that running jobs were
        # preempted for goes first within its rank (planner.QueuedJob.claiming) while one of
        # them is still stopping and CLAIM_SLACK after, for the plan that starts it to run.
        # Any change to the job (held, updated, started, stopped) replaces its row and so
        # ends the claim: it cannot be kept to jump the queue later.
        self.claims: dict[int, Claim] = {}
        # The same for a job behind the head that preempted for fair share as a backfill:
        # the plan considers it right after the head (planner.QueuedJob.backfill_claim).
        self.backfill_claims: dict[int, Claim] = {}
        self._order: list[int] = []  # the last plan's queue, in order
        self._places: dict[int, int] | None = None
        self._starts: dict[int, float] = {}  # running job -> its attempt's start
        self._gpu_usage: Mapping[int, float] = {}  # as the last plan was given it
        # Who may not preempt for fair share: their preemptor did not run (docs: "Sharing").
        self.share_preemptors = SharePreemptors(config.min_runtime_before_preemption_seconds)

    # -- fair share --------------------------------------------------------------------

    def seed(self, now: float) -> None:
        """Read the attempts of the last few half-lives once, at start-up."""
        if not self.usage.enabled:
            return
        rows = self._store.attempts_ended_since(self.usage.seed_since(now))
        used = [
            fairshare.Used(
                row.uid, row.user, _gpu_count(row.gpus), row.started, row.ended, slots=row.slots
            )
            for row in rows
        ]
        self.usage.seed(used, now)
        if rows:
            log.info("fair share seeded", attempts=len(rows))

    def attempt_ended(self, job: JobRow, attempt: AttemptRow, ended: float) -> None:
        """An attempt's end was recorded (endings.py's hook)."""
        self._starts.pop(job.id, None)
        self.usage.add(
            fairshare.Used(
                job.owner.uid,
                job.owner.user,
                len(attempt.gpus),
                attempt.started_at,
                ended,
                slots=cpu_nodes(job.spec),
            )
        )

    def _running(self, active: Sequence[JobRow], now: float) -> list[fairshare.Used]:
        return [
            fairshare.Used(
                job.owner.uid,
                job.owner.user,
                len(job.gpus),
                self._starts[job.id],
                now,
                slots=cpu_nodes(job.spec),
            )
            for job in active
            if job.id in self._starts
        ]

    def _attempt_starts(self, active: Sequence[JobRow]) -> None:
        """Learn the running attempts' starts the first time each is seen."""
        unknown = [job.id for job in active if job.id not in self._starts]
        if unknown:
            for job_id, attempts in self._store.attempts(unknown).items():
                if attempts:
                    self._starts[job_id] = attempts[-1].started_at
        running = {job.id for job in active}
        for job_id in [j for j in self._starts if j not in running]:
            del self._starts[job_id]
        for job_id in [j for j in self.stop_due if j not in running]:
            del self.stop_due[job_id]

    # -- the planner's inputs ----------------------------------------------------------

    def class_of(self, job: JobRow) -> tuple[str, JobClass]:
        return plan_inputs.class_of(job, self.classes, self._config.default_class)

    def prepare(
        self, active: Sequence[JobRow], deadlines: Mapping[int, float], now: float
    ) -> plan_inputs.Snapshot:
        """What the plan needs of the sharing state, read on the event loop (it reads the
        store and the usage, which the loop changes): a frozen copy the plan may use on a
        worker thread."""
        self._attempt_starts(active)
        self.share_preemptors.review(
            active, self._starts, self._store.unfinished, self._store.attempts, now
        )
        for claims in (self.claims, self.backfill_claims):
            for job_id, claim in list(claims.items()):
                if claim.victims & self.stop_due.keys():
                    claim.until = max(claim.until, now + CLAIM_SLACK)
                if claim.until <= now or self._store.unfinished(job_id) is not claim.row:
                    del claims[job_id]
        usage = self.usage.usage(self._running(active, now), now)
        return plan_inputs.Snapshot(
            classes=self.classes,
            default_class=self._config.default_class,
            default_grace=self._config.default_stop_grace_seconds,
            deadlines=dict(deadlines),
            attempt_starts=dict(self._starts),
            stop_due=dict(self.stop_due),
            claims={job_id: claim.row for job_id, claim in self.claims.items()},
            backfill_claims={
                job_id: (claim.row, frozenset(claim.victims))
                for job_id, claim in self.backfill_claims.items()
            },
            settings=planner.Sharing(
                fair=self.usage.enabled,
                gpu_usage=usage.gpu,
                cpu_usage=usage.cpu,
                preempt_after=self._config.preempt_after_seconds,
                min_runtime=self._config.min_runtime_before_preemption_seconds,
                share_preemption=self._config.preempt_for_fair_share,
                share_barred=self.share_preemptors.barred,
            ),
        )

    # -- acting on the plan ------------------------------------------------------------

    def planned(self, result: planner.Plan, now: float) -> None:
        """Keep the plan's order and stop its victims; each victim once."""
        started = {start.job_id for start in result.starts}
        # A held job has no place: it is not waiting its turn.
        held = {job_id for job_id, why in result.waiting.items() if why.kind == Wait.HELD}
        self._order = [j for j in result.order if j not in started and j not in held]
        self._gpu_usage = result.gpu_usage
        self._places = None
        # The head claims its place first within its rank; a job behind it that preempted
        # for fair share (as a backfill) sorting first would take the head's place and its
        # reservation, so it claims only the place right after the head.
        head = None if result.head_key is None else result.head_key[-1]
        for preemption in result.preemptions:
            if preemption.victim in self.stop_due:
                continue
            try:
                for_job = self._store.get(preemption.for_job)
                due = self._stopping.preempt(preemption.victim, for_job, now)
            except TransitionError:  # it ended meanwhile: its GPUs are free anyway
                continue
            except DiskFull:  # the next plan asks again
                log.warning("disk full: a preemption is put off", job_id=preemption.victim)
                continue
            self.stop_due[preemption.victim] = due
            why = result.waiting.get(for_job.id)
            if why is not None and why.kind == Wait.PREEMPTING_SHARE:
                self.share_preemptors.preempted_for(for_job, now)
            if for_job.id == head:
                _claim(self.claims, for_job, preemption.victim, due)
            elif why is not None and why.kind == Wait.PREEMPTING_SHARE:
                _claim(self.backfill_claims, for_job, preemption.victim, due)
            log.info(
                "preempted",
                job_id=preemption.victim,
                for_job=preemption.for_job,
                by=for_job.owner.user,
            )

    def sorts_after(self, job: JobRow, head: planner.OrderKey | None) -> bool:
        """Whether a job just queued sorts after the last plan's head, so that it cannot
        start (nor preempt) before the next plan. Its owner's usage is taken as the plan
        left it; the GPU rescan plans again soon in any case while GPU jobs wait."""
        if head is None:
            return False
        weight = self.class_of(job)[1].weight
        usage = self._gpu_usage.get(job.owner.uid, 0.0)
        key = (-job.boost, -weight, 0, usage, -job.priority, job.created_at, job.id)  # no claim
        return key > head

    def place(self, job_id: int) -> int | None:
        """A pending job's place among those the last plan left waiting (1: first)."""
        if self._places is None:
            self._places = {job_id: n for n, job_id in enumerate(self._order, start=1)}
        return self._places.get(job_id)

    def shares(self, jobs: Sequence[JobRow]) -> list[UserShare]:
        """`trainq users`: `jobs` are the unfinished ones."""
        now = time.time()
        active = [job for job in jobs if job.state in ACTIVE]
        usage = self.usage.usage(self._running(active, now), now)
        loads = [
            fairshare.Load(
                job.owner.uid,
                job.owner.user,
                job.state,
                job.spec.total_gpus if job.state == JobState.PENDING else len(job.gpus),
            )
            for job in jobs
        ]
        return fairshare.user_shares(usage, loads)


def _claim(claims: dict[int, Claim], for_job: JobRow, victim: int, due: float) -> None:
    """`victim` was preempted for `for_job`, its grace over at `due` at the latest."""
    claim = claims.get(for_job.id)
    if claim is None or claim.row is not for_job:
        claim = claims[for_job.id] = Claim(for_job, set(), 0.0)
    claim.victims.add(victim)
    claim.until = max(claim.until, due + CLAIM_SLACK)


def _gpu_count(gpus_json: str) -> int:
    # The attempts table keeps the GPU list as JSON ("[]" for a CPU job).
    text = gpus_json.strip("[] ")
    return 0 if not text else text.count(",") + 1
