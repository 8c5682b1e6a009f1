"""Slurm as trainqd's back end (config `backend = "slurm"`).

trainqd keeps its API, CLI, authorization and job records; Slurm queues the jobs, allocates
their GPUs and runs them. Every PENDING job that is not held or backing off is handed to
Slurm at once, one Slurm job per attempt, with the exported batch script
(trainq.core.export.slurm) whose step runs `python -m trainqd.run --attempt N`: trainq's own
monitor, in trainqd's job directory, so the trainer finds the same contract and
`trainq logs` reads the same files. The local planner allocates nothing.

- The hand-off: trainqd makes the attempt's directories (as for a local attempt) and runs
  `sbatch` as the job's owner (the privileges dropped in the child, as for any other
  command run for a user; `sbatch --uid` is root-only and deprecated, and, though Slurm
  22.05 still takes it, would carry trainqd's environment into the job). The Slurm job id is kept in
  `attempts/<n>.slurm`, in trainqd's part of the job directory, which the owner cannot
  write; an event says "queued in Slurm as job N". The job stays PENDING, waiting for
  Slurm (`Wait.SLURM`), until Slurm starts it: then its attempt begins and it is RUNNING.
- What the owner's step could not run fails at the hand-off, with the reason, rather than
  being lost on the node: an ordinary user's container job (trainq runs the engine as root,
  with --user for the owner; their step cannot) and a step Python the owner cannot run.
  A container job's step gets the engine's settings from trainqd's environment.
- Following: one `squeue` for all handed jobs every `slurm_poll_seconds`, off the event
  loop. When Slurm says a job ended, or has forgotten it, the attempt's end is the exit
  record its monitor wrote, read as the local back end reads one (watcher.read_exit_record:
  the owner's directory is hostile input); no record means the attempt was lost, which is
  retried up to the lost-attempt limit. A failing `squeue` is tried again at the next poll.
- Stopping: trainqd writes the stop order (the grace, who) where the local monitor reads
  it, then `scancel --batch --signal=TERM`: the step relays it to its monitor, which stops
  the trainer within the grace. Should the Slurm job outlive the grace, a plain `scancel`
  ends it. A job stopped while Slurm still queued it is cancelled at the next poll.
- Retries, the time limit and the grace are trainq's, as on the local back end: each
  attempt is a new Slurm job whose --time is the job's remaining runtime plus the grace.
- A restarted trainqd follows the Slurm jobs its records name (`take_over`).
- A job of several nodes is one Slurm job of one task per node, whose step runs each node
  (slurm_nodes.py); trainqd makes the nodes' directories, and follows, stops and retries
  the job whole, as any other.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
from anyio.abc import TaskGroup

from trainq.core.errors import DiskFull
from trainq.core.export.slurm import batch_script, time_limit_minutes
from trainq.core.nodes import is_gang, layout
from trainq.core.outcomes import REASON_CHARS, ExitRecord, Outcome
from trainq.core.reasons import Wait, WaitReason, own_reason
from trainq.core.spec import JobSpec
from trainq.core.states import ACTIVE, JobState
from trainqd.access.identity import Account, job_account
from trainqd.attempts import engine
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.launch import remaining_runtime, stop_grace
from trainqd.attempts.snapshots import as_run
from trainqd.attempts.watcher import (
    FoundMonitor,
    OnEnd,
    StopCause,
    WatchedMonitor,
    read_exit_record,
)
from trainqd.children import run_child
from trainqd.config import Config
from trainqd.monitor.records import (
    Launch,
    StopOrder,
    atomic_write_json,
    read_json,
)
from trainqd.scheduling.endings import AttemptEnds
from trainqd.scheduling.launcher import stopped_out_of_time
from trainqd.store import DISK_FULL_MESSAGE, JobRow, Store

log = structlog.get_logger("trainqd.slurm")

# Slurm's states (squeue %T) of a job it has not started yet.
QUEUED = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})
# ...and of one that has ended: its step (and monitor) are gone.
ENDED = frozenset(
    {
        "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
        "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT",
    }
)  # fmt: skip
# Beyond a stop's grace: the monitor kills the trainer when the grace ends and then writes its
# record; only a step still there after this much more is cancelled outright.
STOP_MARGIN = 10.0
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
HANDOFF_PAUSE = 5.0  # seconds before a hand-off that failed (not sbatch's refusal) is retried
# sbatch processes at once, of all users together and of one: a sweep of 10,000 jobs is
# handed over a few at a time, not as 10,000 processes (and 60,000 pipes of trainqd's), and
# another user's job is not queued behind it.
HANDOFFS_AT_ONCE = 16
HANDOFFS_PER_USER = 4
SQUEUE_IDS_AT_ONCE = 4000  # about 40 KB of `--jobs=`, well inside one argument's 128 KiB


@dataclass
class Handed:
    """A trainq attempt that is a Slurm job."""

    job_id: int
    number: int
    slurm_id: int
    started: bool  # Slurm has started it: the attempt has begun in trainq's records
    kill_at: float | None = None  # when a stopped step is cancelled outright
    spec: JobSpec | None = None  # the spec Slurm got (None: handed by an earlier trainqd)


def slurm_wait(job: JobRow, handed: Handed | None, now: float) -> WaitReason | None:
    """Why a PENDING job is not handed to Slurm now (its own reasons first, as the planner
    and the API's views take them, then Slurm's queue); None: it may be."""
    own = own_reason(job.held_by, job.not_before, now)
    if own is None and handed is not None:
        return WaitReason(Wait.SLURM, slurm_job=handed.slurm_id)
    return own


class SlurmBackend:
    """The hand-off (`tick`), the following (`poll`), and the scheduler's `Watcher`."""

    boot_id = "slurm"

    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        dirs: JobDirs,
        ends: AttemptEnds,
        changed: Callable[[], None],
    ) -> None:
        self._config = config
        self._command_timeout = config.slurm_command_timeout_seconds
        self._store = store
        self._dirs = dirs
        self._ends = ends
        self._changed = changed
        self.handed: dict[int, Handed] = {}
        self._handing: set[int] = set()  # an sbatch is under way
        self._handing_by: Counter[int] = Counter()  # ...for how many jobs of each owner
        self._paused: dict[int, float] = {}  # a hand-off that failed is tried again then
        self._python_ok: set[tuple[int, str]] = set()  # (owner, interpreter) that ran the step
        self._tg: TaskGroup | None = None

    # -- the scheduler's Watcher ----------------------------------------------------------

    def watching(self, task_group: TaskGroup, on_end: OnEnd) -> SlurmBackend:
        """The scheduler's watcher factory: ends are recorded here, not through on_end."""
        self._tg = task_group
        task_group.start_soon(self._follow, name="following Slurm")
        return self

    def close(self) -> None:
        """Slurm's jobs go on without trainqd; the next one follows them again."""

    def start(self, launch: Launch, attempt_dir: Path, stop_file: Path) -> WatchedMonitor:
        raise RuntimeError("with backend = slurm every attempt is handed to Slurm")

    def attach(self, found: FoundMonitor) -> WatchedMonitor | None:
        return None  # take_over follows Slurm jobs; there are no local monitors

    def set_deadline(self, job_id: int, deadline: float | None) -> bool:
        return False  # Slurm holds the time limit it was handed (the API refuses a change)

    def request_stop(
        self, job_id: int, grace: float, reason: StopCause, requested_by: int | None
    ) -> bool:
        """Write the stop order, then signal the step; False if Slurm has not started it."""
        handed = self.handed.get(job_id)
        if handed is None or not handed.started:
            return False
        order = StopOrder(grace_seconds=grace, reason=reason, requested_by=requested_by)
        try:
            atomic_write_json(str(self._dirs.stop_file(job_id, handed.number)), order.__dict__)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(DISK_FULL_MESSAGE) from None
            raise
        kill_at = time.time() + grace + STOP_MARGIN
        handed.kill_at = kill_at if handed.kill_at is None else min(handed.kill_at, kill_at)
        assert self._tg is not None
        self._tg.start_soon(self._scancel, job_id, handed.slurm_id, "--batch", "--signal=TERM")
        return True

    # -- handing jobs to Slurm ------------------------------------------------------------

    def tick(
        self, now: float, pending: list[JobRow], waiting: dict[int, WaitReason]
    ) -> float | None:
        """Hand every startable PENDING job to Slurm; fill `waiting`; return when a backoff
        ends (the next hand-off due), if any."""
        wake: list[float] = []
        for job in pending:
            why = slurm_wait(job, self.handed.get(job.id), now)
            if why is not None:
                waiting[job.id] = why
                if why.kind == Wait.BACKOFF and why.until is not None:
                    wake.append(why.until)
            elif self._paused.get(job.id, 0.0) > now:
                wake.append(self._paused[job.id])
            elif job.id not in self._handing and self._may_hand(job.owner.uid):
                self._paused.pop(job.id, None)
                assert self._tg is not None, "the scheduler is not running"
                self._handing.add(job.id)
                self._handing_by[job.owner.uid] += 1
                self._tg.start_soon(
                    self._hand_off, job.id, job.owner.uid, name=f"sbatch of job {job.id}"
                )
            # Otherwise it waits for a hand-off to end: each end plans again (`_changed`).
        return min(wake) if wake else None

    def _may_hand(self, uid: int) -> bool:
        return len(self._handing) < HANDOFFS_AT_ONCE and self._handing_by[uid] < HANDOFFS_PER_USER

    async def _hand_off(self, job_id: int, uid: int) -> None:
        try:
            job = self._store.get(job_id)
            if job.state == JobState.PENDING and job.held_by is None:
                await self._submit(job)
        except Exception:  # one job's trouble is never the daemon's
            log.exception("hand-off to Slurm failed; trying again later", job_id=job_id)
            self._paused[job_id] = time.time() + HANDOFF_PAUSE
        finally:
            self._handing.discard(job_id)
            self._handing_by[uid] -= 1
            if not self._handing_by[uid]:
                del self._handing_by[uid]
            self._changed()

    async def _submit(self, job: JobRow) -> None:
        now = time.time()
        if stopped_out_of_time(self._store, job, now):
            return
        number = job.attempt_count + 1
        acct = job_account(job.owner)
        try:
            await self._check_step(job.spec, acct)
            paths = self._dirs.create_attempt(
                job.id, number, acct.uid, acct.gid, monitor_is_owner=True
            )
            if is_gang(job.spec):  # each node's ml root and output (slurm_nodes.py)
                names = [node.name for node in layout(job.spec)]
                self._dirs.create_nodes(paths, names, acct.uid, acct.gid)
            spec = self._resolved(job)
            script = self._script(spec, job.id, number, paths.job_dir, paths.attempt_dir)
            # A container job's step runs the engine as a local monitor does: with the
            # engine's settings from trainqd's environment (where its configuration is).
            settings = {} if spec.image is None else engine_settings(os.environ)
            slurm_id = await self._sbatch(
                script, acct, paths.attempt_dir, time_flags(spec), settings
            )
        except Exception as exc:  # recorded as the attempt's, as the local launcher does
            log.warning("sbatch failed", job_id=job.id, error=str(exc))
            self._store.begin_attempt(job.id, (), (), now)
            self._ends.start_failed(
                job.id, number, now, f"trainq could not hand the job to Slurm: {exc}"
            )
            return
        # Kept before anything else: a restarted trainqd must find the Slurm job. Without
        # the record (a full disk) the Slurm job is let go, and the hand-off tried again.
        try:
            atomic_write_json(
                str(self._dirs.slurm_record_file(job.id, number)), {"slurm_job_id": slurm_id}
            )
        except OSError:
            await self._scancel(job.id, slurm_id)
            raise
        self.handed[job.id] = Handed(job.id, number, slurm_id, started=False, spec=job.spec)
        with contextlib.suppress(DiskFull):  # an event only; the record above is what counts
            self._store.note(job.id, time.time(), f"queued in Slurm as job {slurm_id}")
        log.info("handed to Slurm", job_id=job.id, attempt=number, slurm_job=slurm_id)

    def _resolved(self, job: JobRow) -> JobSpec:
        """The spec the step runs: trainqd's grace, and the runtime left to the job, so its
        monitor's deadline is what a local attempt's would be. The priority is trainqd's
        order alone: one above 0 would take a Slurm administrator (export refuses it)."""
        remaining = remaining_runtime(job)
        grace = stop_grace(job, self._config.default_stop_grace_seconds)
        # Its snapshot, where it has one, in the job directory the nodes share.
        return as_run(job, self._dirs).spec.model_copy(
            update={
                "stop_grace_seconds": float(grace),
                "max_runtime_seconds": None if remaining is None else max(1, math.ceil(remaining)),
                "priority": min(job.spec.priority, 0),
                # Met before the hand-off (the scheduler holds a waiting job back), and its
                # ids are trainq's, not Slurm's.
                "after": [],
            }
        )

    def _script(
        self, spec: JobSpec, job_id: int, number: int, job_dir: Path, attempt_dir: Path
    ) -> str:
        """The exported batch script, for one attempt in trainqd's job directory."""
        return batch_script(
            spec,
            python=self._step_python(),
            engine=self._config.default_engine or "podman",
            partition=self._config.slurm_partition,
            job_dir=str(job_dir),
            spec_file=str(attempt_dir / "spec.json"),
            step_args=["--attempt", str(number), "--job-id", str(job_id)],
        )

    def _step_python(self) -> str:
        return str(self._config.slurm_python or sys.executable)

    async def _check_step(self, spec: JobSpec, acct: Account) -> None:
        """Refuse the hand-off, with the reason, of a job whose step could not run: an
        ordinary user's container job, or one whose owner cannot run the step's
        `python -m trainqd.run` (an interpreter under a private /root, say), where Slurm
        would run a step that dies at once and the attempt would be lost without a word.
        The interpreter is tried as the owner, once per owner and interpreter, where it
        exists here (one that only the cluster's nodes have is the administrator's word)."""
        if spec.image is not None and acct.uid != 0:
            raise RuntimeError(users_container_refusal(acct.user))
        python = self._step_python()
        if (acct.uid, python) in self._python_ok:
            return
        if not await anyio.to_thread.run_sync(os.path.lexists, python):
            return
        root = os.geteuid() == 0
        try:
            done = await run_child(
                [python, "-I", "-c", "import trainqd.run"],
                deadline=self._command_timeout,
                cwd="/",
                env=slurm_environment(),
                user=acct.uid if root else None,
                group=acct.gid if root else None,
                extra_groups=list(acct.groups) if root else None,
            )
        except OSError as exc:
            said = exc.strerror or str(exc)
        else:
            if done.returncode == 0:
                self._python_ok.add((acct.uid, python))
                return
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            said = lines[-1] if lines else f"exit status {done.returncode}"
        raise RuntimeError(
            f"{acct.user} cannot run the Slurm step's {python} -m trainqd.run ({said}); "
            "set slurm_python to an interpreter with trainq installed that every user can run"
        )

    async def _sbatch(
        self,
        script: str,
        acct: Account,
        attempt_dir: Path,
        flags: list[str],
        settings: Mapping[str, str],
    ) -> int:
        """Submit as the job's owner; the Slurm job id. The output goes to the attempt's
        directory (the monitor keeps the trainer's own stdout and stderr there). `settings`
        go into the step's environment as well (sbatch copies its own into the job)."""
        out = str(attempt_dir / "slurm.out")
        root = os.geteuid() == 0  # else trainqd runs as the owner already: nothing to switch
        env = {
            **settings,
            **slurm_environment(),
            "HOME": acct.home,
            "USER": acct.user,
            "LOGNAME": acct.user,
        }
        done = await run_child(
            # Retries are trainq's: a node failure ends the attempt (lost), not a requeue.
            [
                "sbatch",
                "--parsable",
                "--no-requeue",
                f"--output={out}",
                f"--error={out}",
                *flags,  # over the script's own #SBATCH lines
            ],
            deadline=self._command_timeout,
            input=script.encode(),
            cwd=attempt_dir,
            env=env,
            user=acct.uid if root else None,
            group=acct.gid if root else None,
            extra_groups=list(acct.groups) if root else None,
        )
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise RuntimeError(said[-1] if said else f"sbatch exited {done.returncode}")
        first = done.stdout.decode(errors="replace").strip().split(";")[0]
        if not first.isdigit():
            raise RuntimeError(f"sbatch answered {first!r}, not a job id")
        return int(first)

    # -- following the Slurm jobs ---------------------------------------------------------

    async def _follow(self) -> None:
        while True:
            await anyio.sleep(self._config.slurm_poll_seconds)
            if self.handed:
                try:
                    await self.poll()
                except Exception:  # tried again at the next poll
                    log.exception("following Slurm failed")

    async def poll(self) -> None:
        # Only the jobs asked about: one handed over during the squeue is not in its answer.
        asked = list(self.handed.values())
        states = await self._slurm_states([h.slurm_id for h in asked])
        if states is None:
            return
        now = time.time()
        changed = False
        for handed in asked:
            if self.handed.get(handed.job_id) is not handed:
                continue
            state = states.get(handed.slurm_id)  # None: Slurm has forgotten an ended job
            job = self._store.get(handed.job_id)
            if not handed.started:
                if job.state != JobState.PENDING:  # stopped while Slurm still held it
                    self.handed.pop(handed.job_id)
                    await self._scancel(job.id, handed.slurm_id)
                    continue
                if state in QUEUED:
                    if job.held_by is not None or (handed.spec not in (None, job.spec)):
                        # Held, or its spec changed (`trainq update`), while Slurm queued
                        # it: taken back, to be handed over again once it may run, as it is.
                        await self._take_back(handed)
                        changed = True
                    continue
                self._store.begin_attempt(job.id, (), (), now)
                handed.started = True
                changed = True
                log.info("started by Slurm", job_id=job.id, slurm_job=handed.slurm_id)
            if state is None or state in ENDED:
                self.handed.pop(handed.job_id)
                self._ends.record(job.id, handed.number, self._end_of(handed, state))
                changed = True
            elif handed.kill_at is not None and now >= handed.kill_at:
                handed.kill_at = None
                log.warning("stopped step outlived its grace", slurm_job=handed.slurm_id)
                await self._scancel(job.id, handed.slurm_id)
        if changed:
            self._changed()

    async def _take_back(self, handed: Handed) -> None:
        self.handed.pop(handed.job_id)
        # First, so that a restarted trainqd does not follow the cancelled Slurm job.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._dirs.slurm_record_file(handed.job_id, handed.number))
        await self._scancel(handed.job_id, handed.slurm_id)
        log.info("taken back from Slurm", job_id=handed.job_id, slurm_job=handed.slurm_id)

    def _end_of(self, handed: Handed, state: str | None) -> ExitRecord:
        """The monitor's exit record, read as the local back end reads one; without one the
        attempt was lost (its step never ran the monitor, or the node went down)."""
        attempt_dir = self._dirs.attempt_dir(handed.job_id, handed.number)
        record = read_exit_record(attempt_dir, handed.job_id, handed.number)
        if record is not None:
            return record
        how = "was forgotten by Slurm" if state is None else f"ended {state}"
        return ExitRecord(
            handed.job_id,
            handed.number,
            Outcome.LOST,
            None,
            time.time(),
            reason=(
                f"Slurm job {handed.slurm_id} {how} without an exit record"
                f" (see {attempt_dir / 'slurm.out'})"
            )[:REASON_CHARS],
        )

    async def _slurm_states(self, ids: list[int]) -> dict[int, str] | None:
        """Each known job's state; None if Slurm could not be asked. One squeue per few
        thousand ids: the kernel takes at most 128 KiB in one argument (`--jobs=`), and one
        user's queued sweeps can be tens of thousands of Slurm jobs."""
        states: dict[int, str] = {}
        for start in range(0, len(ids), SQUEUE_IDS_AT_ONCE):
            some = await self._squeue(ids[start : start + SQUEUE_IDS_AT_ONCE])
            if some is None:
                return None
            states.update(some)
        return states

    async def _squeue(self, ids: list[int]) -> dict[int, str] | None:
        done = await run_child(
            [
                "squeue",
                "--noheader",
                "--states=all",
                f"--jobs={','.join(map(str, ids))}",
                "--format=%i %T",
            ],
            deadline=self._command_timeout,
            env=slurm_environment(),
        )
        said = done.stderr.decode(errors="replace").strip()
        if done.returncode != 0 and "Invalid job id" not in said:
            log.warning("squeue failed; asking again at the next poll", error=said[-500:])
            return None
        states: dict[int, str] = {}
        for line in done.stdout.decode(errors="replace").splitlines():
            slurm_id, _, state = line.strip().partition(" ")
            if slurm_id.isdigit():
                states[int(slurm_id)] = state.strip()
        return states

    async def _scancel(self, job_id: int, slurm_id: int, *flags: str) -> None:
        """Cancel or signal the Slurm job as the trainq job's owner, never as root: its id is
        what sbatch answered, and sbatch ran as the owner, so the owner could have made it
        name anyone's Slurm job; Slurm lets the owner act on their own jobs alone."""
        acct = job_account(self._store.get(job_id).owner)
        root = os.geteuid() == 0  # else trainqd runs as the owner already: nothing to switch
        done = await run_child(
            ["scancel", *flags, str(slurm_id)],
            deadline=self._command_timeout,
            cwd="/",
            env={**slurm_environment(), "USER": acct.user, "LOGNAME": acct.user},
            user=acct.uid if root else None,
            group=acct.gid if root else None,
            extra_groups=list(acct.groups) if root else None,
        )
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()
            log.warning("scancel failed", slurm_job=slurm_id, flags=flags, error=said[-500:])

    # -- after a restart ------------------------------------------------------------------

    async def take_over(self) -> None:
        """Follow again the Slurm jobs a previous trainqd handed jobs to (in place of the
        local back end's reconcile)."""
        now = time.time()
        for job in self._store.jobs([JobState.PENDING, *ACTIVE]):
            started = job.state != JobState.PENDING
            number = job.attempt_count if started else job.attempt_count + 1
            slurm_id = self._recorded(job.id, number)
            if slurm_id is not None:
                handed = Handed(job.id, number, slurm_id, started)
                if job.state == JobState.STOPPING:  # the stop was relayed before the restart
                    grace = stop_grace(job, self._config.default_stop_grace_seconds)
                    handed.kill_at = now + grace + STOP_MARGIN
                self.handed[job.id] = handed
                log.info("following Slurm job again", job_id=job.id, slurm_job=slurm_id)
            elif started:
                log.error("active job without a Slurm job", job_id=job.id)
                self._ends.record(
                    job.id,
                    number,
                    ExitRecord(
                        job.id,
                        number,
                        Outcome.LOST,
                        None,
                        now,
                        reason="no Slurm job is recorded for it (started by the local back end?)",
                    ),
                )

    def _recorded(self, job_id: int, number: int) -> int | None:
        """The Slurm job id trainqd kept for the attempt (its own file, never the owner's)."""
        try:
            raw = read_json(str(self._dirs.slurm_record_file(job_id, number)))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        value = raw.get("slurm_job_id") if isinstance(raw, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def time_flags(spec: JobSpec) -> list[str]:
    """Slurm's --time with a minute to spare beyond the script's (the runtime plus the
    grace): the monitor enforces the limit itself, from the trainer's start, and Slurm's
    warning signal, from the batch job's start, must not come first."""
    minutes = time_limit_minutes(spec)
    return [] if minutes is None else [f"--time={minutes + 1}"]


def slurm_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """What Slurm's commands need of trainqd's environment (where the cluster's
    configuration is), and nothing else: sbatch copies its environment into the job."""
    env = {"PATH": environ.get("PATH", DEFAULT_PATH)}
    for name in ("SLURM_CONF", "LANG"):
        if name in environ:
            env[name] = environ[name]
    return env


def engine_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The container engine's settings in trainqd's environment (CONTAINERS_CONF,
    DOCKER_HOST, a registry's proxy...), the ones a local monitor gives the engine client."""
    kept = engine.client_environment(dict(environ), {})
    return {key: value for key, value in kept.items() if key not in ("PATH", "HOME")}


def users_container_refusal(user: str) -> str:
    """Why an ordinary user's container job cannot run under this back end."""
    return (
        "with backend = slurm only root's jobs may name an image: the Slurm step runs as"
        f" the job's owner ({user}), and trainq runs a container with the engine as root"
        " (--user for the owner), which the owner cannot do; submit the job as a command"
    )
