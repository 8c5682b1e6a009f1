"""Run one job without trainqd: `python -m trainqd.run SPEC.json --job-dir DIR`.

The step of an exported Slurm batch script (trainq.core.export.slurm) runs this on the
compute node. It is trainqd's own machinery, minus the queue: each attempt's Launch comes
from `launch.build_launch`, its monitor (`monitor.supervise`) runs in a forked child in the
foreground, and whether an ended attempt runs again is `retry.RetryPolicy`'s answer. So the
trainer finds the same ml root, SM_* variables, File channels and Pipe mode FIFOs as under
trainqd, and a transient crash is retried under the same rules.

The job directory keeps everything across a requeue of the batch job (the same job id):

    DIR/ml/                       the ml root (checkpoints/ and model/ persist)
    DIR/attempts/<n>/             the attempt's stdout, stderr, exit.json, monitor.log
    DIR/attempts/<n>.stop         the stop order written before a stop reaches the monitor

Attempts are numbered on from those on disk, and their exit records are the retry
history: an attempt without one (the node went down under it) counts as lost, as under
trainqd. A SIGTERM (scancel, or Slurm's `--signal` before the time limit) stops the
running attempt with the job's grace and ends the run without a retry.

Under trainqd's Slurm back end (slurm_backend.py) the step runs `--attempt N`: that one
attempt, in trainqd's own job directory, which trainqd prepared (the attempt directory is
the owner's, `attempts/` is trainqd's). trainqd keeps the history, decides retries and
writes the stop order before it signals the step; the trainer's output stays in the attempt
directory, where `trainq logs` reads it.

A job of several nodes runs each attempt as one `srun` step of one task per node, each
`--node RANK` (backends/slurm_nodes.py), and writes the gang's exit record from its nodes'.
A node's own task exits 0 unless the node failed by itself, so that only a failure makes
srun end the other nodes.

Exit status: the last attempt's exit status (128 + N for a death by signal N), 143 when it
was stopped, 1 when it could not start, 2 for an unusable spec.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Literal, TextIO

from trainq.core.nodes import is_gang
from trainq.core.outcomes import Ending, Outcome
from trainq.core.spec import JobSpec, parse_spec
from trainq.core.states import JobState
from trainqd.access import identity
from trainqd.attempts.contract import Assignment
from trainqd.attempts.jobdir import AttemptPaths
from trainqd.attempts.launch import Attempt, LaunchSettings, build_launch, look_up, stop_grace
from trainqd.attempts.launch import write_env_file as write_engine_env_file
from trainqd.backends import slurm_nodes
from trainqd.monitor import supervise
from trainqd.monitor.records import (
    EXIT_RECORD,
    STDERR,
    STDOUT,
    StopOrder,
    parse_exit_record,
    read_json,
    write_exit_record,
    write_record,
)
from trainqd.scheduling.retry import RetryPolicy
from trainqd.store.rows import JobOwner, JobRow

# trainqd's default grace (config.py), for a spec that sets none.
DEFAULT_GRACE = 120.0
STOPPED_STATUS = 128 + signal.SIGTERM
# A SIGTERM this close to the end of the job's time allowance is the time limit's.
TIME_LIMIT_SLACK = 5.0
FOLLOW_INTERVAL = 0.2
_HELD = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


class Run:
    """One job's attempts in one job directory, until one ends for good."""

    def __init__(
        self,
        spec: JobSpec,
        job_dir: Path,
        job_id: int,
        settings: LaunchSettings,
        trainqd_attempt: int | None = None,
        *,
        node: int | None = None,
        copy_output: bool = False,
        spec_file: Path | None = None,
    ):
        self.spec = spec
        self.node = node  # this task is the node of this rank, in attempt trainqd_attempt
        self.copy_output = copy_output
        self.trainqd_attempt = trainqd_attempt
        self.job_dir = job_dir
        self.job_id = job_id
        self.settings = settings
        self.policy = RetryPolicy.for_spec(spec)
        self.account = identity.account(os.getuid())
        self.began = time.monotonic()
        self.stop_signals = 0
        self.monitor_pid: int | None = None  # or srun's, for a step of several nodes
        self.step = False
        self.stop_file: Path | None = None
        self.spec_file = spec_file  # what a step of several nodes gives its tasks
        self.engine = settings.default_engine or "podman"

    # -- the attempts ---------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        if self.node is not None:
            assert self.trainqd_attempt is not None
            ended = self._attempt(self.trainqd_attempt, [])
            return 1 if slurm_nodes.ended_by_itself(ended) else 0
        if self.trainqd_attempt is not None:
            return exit_status(self._attempt(self.trainqd_attempt, []))
        (self.job_dir / "attempts").mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.job_dir / "ml").mkdir(exist_ok=True, mode=0o700)
        while True:
            history = list(self._history())
            number = len(history) + 1
            ended = self._attempt(number, history)
            if self.stop_signals:
                say(f"attempt {number} stopped: {ended.outcome}")
                return STOPPED_STATUS
            decision = self.policy.decide(ended, history)
            why = decision.why if exit_status(ended) else "completed"
            say(f"attempt {number} ended: {describe(ended)}; {why}")
            if not decision.retry:
                return exit_status(ended)
            if decision.delay and self._sleep(decision.delay):
                return STOPPED_STATUS

    def _history(self) -> Iterator[Ending]:
        """Earlier attempts' ends, oldest first (a requeued job's included)."""
        number = 1
        while (self.job_dir / "attempts" / str(number)).is_dir():
            yield read_end(self.job_dir / "attempts" / str(number), self.job_id, number)
            number += 1

    def _attempt(self, number: int, history: list[Ending]) -> Ending:
        paths = AttemptPaths(
            job_dir=self.job_dir,
            ml_root=self.job_dir / "ml",
            attempt_dir=self.job_dir / "attempts" / str(number),
            stop_file=self.job_dir / "attempts" / f"{number}.stop",
        )
        gang = is_gang(self.spec)
        if self.trainqd_attempt is None:  # else trainqd (or the batch step) made it
            paths.attempt_dir.mkdir(mode=0o700)
            if gang:
                slurm_nodes.prepare(self.job_dir, paths.attempt_dir, self.spec)
        job = self._job_row(number, history)
        self.stop_file = paths.stop_file
        if gang and self.node is None:
            return self._gang_attempt(number, paths)
        at = Attempt(
            job=job,
            number=number,
            gpus=assigned_gpus(os.environ),
            account=self.account,
            paths=paths,
            settings=self.settings,
            host=look_up(job, self.settings),
        )
        if self.node is None:
            built = build_launch(at, time.time())
        else:
            try:
                peers = slurm_nodes.peer_addresses(os.environ)
                built = slurm_nodes.node_launch(at, self.node, peers, time.time())
            except slurm_nodes.NoPeers as exc:
                say(f"node {self.node} cannot start: {exc}")
                return Ending(Outcome.START_FAILED, reason=str(exc))
            paths = replace(paths, attempt_dir=Path(built.launch.attempt_dir))
        if built.env_file is not None:
            write_engine_env_file(*built.env_file)
        say(f"attempt {number}: {paths.attempt_dir}")
        # The monitor takes its own handlers for these; until then a stop stays pending.
        signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                run = supervise.run if self.node is None else slurm_nodes.run_node
                status = run(built.launch)
            finally:
                os._exit(status)
        self._started(pid)
        done = threading.Event()
        # Under trainqd the output stays where `trainq logs` reads it, not copied to Slurm's.
        copies = self.trainqd_attempt is None or self.copy_output
        follower = threading.Thread(target=follow, args=(paths.attempt_dir, done), daemon=True)
        if copies:
            follower.start()
        reap(pid)
        done.set()
        if copies:
            follower.join()
        self.monitor_pid = None
        return read_end(paths.attempt_dir, self.job_id, number)

    def _started(self, pid: int) -> None:
        """Track the child, then let stop signals in, passing on one that came while held."""
        self.monitor_pid = pid
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
        if self.stop_signals:
            self._relay_stop()

    def _gang_attempt(self, number: int, paths: AttemptPaths) -> Ending:
        """One step of every node (slurm_nodes.py); the gang's record from theirs."""
        assert self.spec_file is not None
        task = [sys.executable, "-m", "trainqd.run", str(self.spec_file), "--job-dir"]
        task += [str(self.job_dir), "--job-id", str(self.job_id), "--engine", self.engine]
        argv = slurm_nodes.srun_argv(
            self.spec, task, number, copy_output=self.trainqd_attempt is None
        )
        say(f"attempt {number}: {paths.attempt_dir}, {self.spec.node_count} nodes")
        signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            pid = os.posix_spawnp(argv[0], argv, dict(os.environ), setsigmask=())
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
            return Ending(Outcome.START_FAILED, reason=f"cannot run srun: {exc}")
        self.step = True
        self._started(pid)
        reap(pid)
        self.monitor_pid = None
        record = slurm_nodes.gang_record(paths.attempt_dir, self.spec, self.job_id, number)
        write_exit_record(str(paths.attempt_dir / EXIT_RECORD), record)
        return record.ending

    def _job_row(self, number: int, history: list[Ending]) -> JobRow:
        account = self.account
        return JobRow(
            id=self.job_id,
            name=self.spec.name,
            state=JobState.RUNNING,
            priority=self.spec.priority,
            owner=JobOwner(uid=account.uid, gid=account.gid, user=account.user),
            spec=self.spec,
            gpus=(),
            gpu_uuids=(),
            created_at=time.time(),
            started_at=time.time(),
            ended_at=None,
            failure_reason=None,
            stop_reason=None,
            not_before=None,
            # The time limit counts this run's time so far (the scheduler's own limit, Slurm's
            # --time, covers one run of the batch job).
            runtime_used=time.monotonic() - self.began,
            attempt_count=number - 1,
            lost_count=sum(1 for h in history if h.outcome == Outcome.LOST),
        )

    # -- stopping -------------------------------------------------------------------------

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stop_signals += 1
        if self.monitor_pid is not None:
            self._relay_stop()

    def _relay_stop(self) -> None:
        """As trainqd stops an attempt: the stop order first, then SIGTERM to its monitor."""
        assert self.monitor_pid is not None
        # trainqd (or, for a node, the batch step) writes the stop order before it signals us.
        mine = self.trainqd_attempt is None and self.node is None
        if self.stop_file is not None and mine:
            write_record(str(self.stop_file), StopOrder(self._grace(), self._stop_reason()))
        if self.step:  # srun ends a step on SIGTERM: Slurm signals its tasks instead
            slurm_nodes.stop_step(os.environ)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.monitor_pid, signal.SIGTERM)

    def _grace(self) -> float:
        job = self._job_row(1, [])
        return stop_grace(job, self.settings.default_stop_grace_seconds)

    def _stop_reason(self) -> Literal["user", "time_limit"]:
        limit = self.spec.max_runtime_seconds
        elapsed = time.monotonic() - self.began
        if limit is not None and elapsed >= limit - self._grace() - TIME_LIMIT_SLACK:
            return "time_limit"
        return "user"

    def _sleep(self, seconds: float) -> bool:
        """Wait out a retry's backoff; True when a stop came meanwhile."""
        end = time.monotonic() + seconds
        while not self.stop_signals and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
        return bool(self.stop_signals)


def reap(pid: int) -> None:
    """Wait for the child to end, whatever signals arrive meanwhile."""
    while True:
        try:
            os.waitpid(pid, 0)
        except InterruptedError:  # pragma: no cover (PEP 475 retries for us)
            continue
        return


def read_end(attempt_dir: Path, job_id: int, number: int) -> Ending:
    """How an attempt ended, from its exit record; lost without one."""
    try:
        record = parse_exit_record(read_json(str(attempt_dir / EXIT_RECORD)), job_id, number)
    except (OSError, ValueError):
        return Ending(Outcome.LOST, reason="no exit record")
    return record.ending


def assigned_gpus(environ: dict[str, str] | os._Environ[str]) -> Assignment:
    """The GPUs the resource manager gave this job: Slurm's SLURM_JOB_GPUS (its gres
    indices on the node), else CUDA_VISIBLE_DEVICES as it set it."""
    text = environ.get("SLURM_JOB_GPUS") or environ.get("CUDA_VISIBLE_DEVICES") or ""
    indices = tuple(int(part) for part in text.split(",") if part.strip().isdigit())
    # No UUIDs from the resource manager: NVIDIA's variables take indices as well.
    return Assignment(indices, tuple(str(i) for i in indices))


def describe(ended: Ending) -> str:
    if ended.outcome == Outcome.EXITED:
        return f"exit status {ended.exit_code}"
    if ended.outcome == Outcome.SIGNALED:
        return f"killed by signal {ended.signal}"
    return ended.outcome + (f" ({ended.reason})" if ended.reason else "")


def exit_status(ended: Ending) -> int:
    if ended.outcome == Outcome.EXITED and ended.exit_code is not None:
        return ended.exit_code & 0xFF
    if ended.outcome == Outcome.SIGNALED and ended.signal is not None:
        return 128 + ended.signal
    if ended.outcome in (Outcome.STOPPED, Outcome.TIMED_OUT, Outcome.INTERRUPTED):
        return STOPPED_STATUS
    return 1


def follow(attempt_dir: Path, done: threading.Event) -> None:
    """Copy the trainer's stdout and stderr to ours as they grow (Slurm's output files)."""
    sinks: list[tuple[str, TextIO]] = [(STDOUT, sys.stdout), (STDERR, sys.stderr)]
    offsets = dict.fromkeys((name for name, _ in sinks), 0)
    while True:
        last = done.is_set()
        for name, sink in sinks:
            try:
                with open(attempt_dir / name, "rb") as f:
                    f.seek(offsets[name])
                    data = f.read()
            except OSError:
                continue
            if data:
                offsets[name] += len(data)
                sink.buffer.write(data)
                sink.flush()
        if last:
            return
        done.wait(FOLLOW_INTERVAL)


def say(line: str) -> None:
    sys.stderr.write(f"trainqd.run: {line}\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainqd.run", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("spec", help="the job spec, as JSON")
    parser.add_argument("--job-dir", required=True, help="where the ml root and attempts live")
    parser.add_argument("--job-id", type=int, help="default: $SLURM_JOB_ID")
    parser.add_argument("--engine", choices=("podman", "docker"), default="podman")
    parser.add_argument(
        "--attempt", type=int, help="run only this attempt, in a job directory trainqd prepared"
    )
    parser.add_argument(
        "--node", type=int, help="a job of several nodes: run the node of this rank (its task)"
    )
    parser.add_argument(
        "--copy-output", action="store_true", help="copy the trainer's output to ours"
    )
    args = parser.parse_args(argv)
    if args.node is not None and args.attempt is None:
        parser.error("--node runs one node of an attempt: name it with --attempt")
    try:
        spec = parse_spec(json.loads(Path(args.spec).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        say(f"cannot use {args.spec}: {exc}")
        return 2
    job_id = args.job_id or int(os.environ.get("SLURM_JOB_ID", "0") or 0) or os.getpid()
    settings = LaunchSettings(
        default_stop_grace_seconds=DEFAULT_GRACE,
        default_engine=args.engine,
        real_gpus=False,
        instance="run",
    )
    return Run(
        spec,
        Path(args.job_dir).absolute(),
        job_id,
        settings,
        args.attempt,
        node=args.node,
        copy_output=args.copy_output,
        spec_file=Path(args.spec).absolute(),
    ).run()


if __name__ == "__main__":
    sys.exit(main())
