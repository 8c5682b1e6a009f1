"""One attempt from start to exit record: the monitor's main line.

    set up (subreaper, read-only view, owner's credentials, ml root, feeder, output files)
    start the trainer (its own process group; a container job's trainer is the engine client)
    watch: the trainer's pidfd, signals (through a wakeup pipe) and timers in one selector
        SIGTERM  -> the stop request in the stop file (grace, user or time limit)
        SIGHUP   -> the time limit changed (`trainq update --max-runtime`): re-read it
        deadline -> the same stop, as the time limit
        feeder fails -> the same stop, as the feeder's failure
        grace over   -> SIGKILL to the group and every descendant (container: the engine's
                        own stop, then `ENGINE kill`, then the client)
    end: kill what is left of the tree, write exit.json, remove the container

The attempt goes through explicit phases, each entered through `_enter`, which refuses any
step `_ENTERED_FROM` does not allow: PREPARING, then RUNNING, then STOPPING if a stop began,
then ENDING (from any of those three: the trainer is gone or never started), then ENDED.

Nothing here may end the monitor while a trainer runs: `run` turns any internal error into
a killed tree and a record that says what failed.
"""

from __future__ import annotations

import contextlib
import enum
import os
import select
import signal
import time
from typing import TYPE_CHECKING

from trainq.core.outcomes import Ending, ExitRecord, Outcome
from trainqd.monitor import cgroup, container, mounts, procfs
from trainqd.monitor.children import Feeder, poll_report, read_report
from trainqd.monitor.log import log, log_exception
from trainqd.monitor.outcome import (
    Stop,
    conclude,
    not_started,
    output_tail,
    read_stop_request,
)
from trainqd.monitor.owner import is_root
from trainqd.monitor.process import describe_status, spawn_beside
from trainqd.monitor.profile import mark
from trainqd.monitor.records import (
    EXIT_RECORD,
    Launch,
    MonitorInfo,
    deadline_path,
    monitor_info_path,
    read_deadline,
    reserve_record_space,
    write_exit_record,
    write_record,
)
from trainqd.monitor.setup import Prepared, StartFailed, prepare

if TYPE_CHECKING:
    from types import FrameType

    from trainqd.monitor.outcome import StopCause

# After the trainer's end, what is left of its tree gets SIGTERM and this long to go
# before SIGKILL; then this long to vanish (a process in uninterruptible sleep, e.g. a GPU
# context being torn down, may take a while) before the record is written regardless.
LEFTOVER_GRACE = 2.0
KILL_WAIT = 30.0
# Wall-clock timers are re-read at least this often, so a clock step cannot postpone the
# time limit for long.
WALL_CLOCK_RECHECK = 60.0


class Phase(enum.Enum):
    PREPARING = "preparing"  # set-up: cgroup, ml root, feeder; no trainer yet
    RUNNING = "running"  # the trainer runs, watched
    STOPPING = "stopping"  # a stop began (user, time limit, feeder): its grace runs
    ENDING = "ending"  # the trainer is gone or never started: clean up, write the record
    ENDED = "ended"  # the exit record is written (or could not be)


# The phases each phase may be entered from; any other step is a bug, and `run` ends the
# attempt as lost rather than carry on in a state nobody planned for.
_ENTERED_FROM: dict[Phase, frozenset[Phase]] = {
    Phase.RUNNING: frozenset({Phase.PREPARING}),
    Phase.STOPPING: frozenset({Phase.RUNNING}),
    Phase.ENDING: frozenset({Phase.PREPARING, Phase.RUNNING, Phase.STOPPING}),
    Phase.ENDED: frozenset({Phase.ENDING}),
}


class PhaseError(RuntimeError):
    pass


class TrainerSupervisor:
    """The monitor of one attempt; `run` is all there is to call."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.phase = Phase.PREPARING
        self.me = os.getpid()
        self.engine = launch.container if launch.runtime == "container" else None
        self.prepared: Prepared | None = None
        self.feeder: Feeder | None = None
        self.feeder_reason: str | None = None
        self.trainer_pid: int | None = None
        self.started_at: float | None = None
        self.status: int | None = None
        self.ended_at: float | None = None
        self.stop: Stop | None = None
        self.stop_began = 0.0
        self.kill_at: float | None = None  # monotonic; subprocess: SIGKILL the tree then
        self.engine_kill_at: float | None = None  # container: `ENGINE kill` then
        self.client_kill_at: float | None = None  # container: SIGKILL the client then
        self.helpers: dict[int, str] = {}
        self.cgroup: cgroup.AttemptCgroup | None = None
        self.stop_signals = 0
        # The time limit: the launch's, until trainqd moves it (SIGHUP, the deadline file).
        self.deadline = launch.deadline
        self.deadline_signals = 0
        self.wake_fd = -1
        self.selector: select.epoll | None = None

    def _enter(self, phase: Phase) -> None:
        if self.phase not in _ENTERED_FROM[phase]:
            raise PhaseError(f"the monitor cannot go from {self.phase.value} to {phase.value}")
        self.phase = phase

    # -- the whole attempt -------------------------------------------------------------

    def run(self) -> int:
        """Run the attempt; 0 once its exit record is written, 1 after an internal error."""
        status = 0
        try:
            ending = self._attempt()
        except BaseException as exc:  # never leave a trainer unsupervised
            log("monitor error")
            log_exception(exc)
            if self.phase is not Phase.ENDING:
                self.phase = Phase.ENDING  # from anywhere: the error ends the attempt
            self._kill_everything()
            # Lost, as when a monitor vanishes: the attempt did not fail on its own.
            ending = Ending(Outcome.LOST, reason=f"monitor error: {type(exc).__name__}: {exc}")
            status = 1
        if self.engine is not None and is_root():
            # The engine's binds of the ml root and channels (mounts.py): the container holds
            # its own copies, so they go now, whatever became of the container;
            # before the record, so that a monitor killed meanwhile leaves an attempt that
            # trainqd's clean-up of lost attempts releases.
            for problem in mounts.release(self.launch.attempt_dir):
                log(problem)
        try:
            self._record(ending)
        except Exception as exc:
            log(f"cannot write the exit record: {exc}")
            status = 1
        mark("exit record written")
        self._enter(Phase.ENDED)
        # trainqd learns of the end when this process exits: the container's removal must
        # not hold that back, so a child of its own does it (the name is this attempt's
        # alone, so nothing waits on it).
        if self.engine is not None and os.fork() == 0:
            try:
                os.setsid()
                failed = container.remove(self.engine, self.launch.env)
                if failed:
                    log(failed)
            finally:
                os._exit(0)
        return status

    def _attempt(self) -> Ending:
        self._catch_signals()
        self._enter_cgroup()
        mark("cgroup entered")
        # Before prepare(): a subprocess job's monitor drops to its owner there, and after
        # that it could no longer write in trainqd's directory.
        self._write_monitor_info()
        try:
            mark("monitor info written")
            self.prepared = prepare(self.launch)
            self._reserve_record_space()
            mark("record space reserved")
            if self.launch.pipe_channels:
                self.feeder = self.prepared.start_feeder()
            early = self._stopped_before_start()
            if early is not None:
                self._enter(Phase.ENDING)
                self._end_tree()
                return early
            self.trainer_pid = self.prepared.start_trainer()
        except StartFailed as exc:
            log(exc.reason)
            self._enter(Phase.ENDING)
            self._end_tree()
            return Ending(Outcome.START_FAILED, reason=exc.reason)
        self._enter(Phase.RUNNING)
        self.started_at = time.time()
        pidfd = os.pidfd_open(self.trainer_pid)
        log(f"trainer started: pid {self.trainer_pid}")
        self._watch(pidfd)
        os.close(pidfd)
        assert self.status is not None
        log(f"trainer {describe_status(self.status)}")
        self._enter(Phase.ENDING)
        mark("trainer reaped")
        self._end_tree()
        mark("tree ended")
        assert self.prepared is not None
        if self.prepared.relay is not None:  # the output left in the pipes, before the tail
            self.prepared.relay.finish()
        return self._conclude(self.status)

    # -- signals and the loop ----------------------------------------------------------

    def _catch_signals(self) -> None:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.wake_fd = read_fd
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGCHLD, _wake_only)
        # The monitor has a session of its own; a terminal's ^C is not for jobs. A hangup
        # cannot come from a terminal either: trainqd sends it when the time limit moved.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, self._on_deadline_signal)
        # Monitors start with these blocked (spawn.py; a forked one inherits the fork server's
        # mask), so none was lost before now.
        signal.pthread_sigmask(signal.SIG_SETMASK, ())

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signals += 1

    def _on_deadline_signal(self, signum: int, frame: FrameType | None) -> None:
        self.deadline_signals += 1

    def _reread_deadline(self) -> None:
        """The deadline trainqd wrote when the job's time limit changed, if it wrote one."""
        self.deadline_signals = 0
        path = deadline_path(os.path.dirname(self.launch.stop_file), self.launch.attempt)
        said, deadline = read_deadline(path)
        if said and deadline != self.deadline:
            self.deadline = deadline
            when = "none" if deadline is None else f"in {deadline - time.time():.0f} s"
            log(f"time limit changed: it falls due {when}")

    def _watch(self, pidfd: int) -> None:
        with select.epoll() as selector:
            self.selector = selector
            selector.register(self.wake_fd, select.EPOLLIN)
            selector.register(pidfd, select.EPOLLIN)
            if self.feeder is not None:
                selector.register(self.feeder.report_fd, select.EPOLLIN)
            relay = self.prepared.relay if self.prepared is not None else None
            for fd in relay.open_ends() if relay is not None else ():
                selector.register(fd, select.EPOLLIN)
            while True:
                if relay is not None:
                    relay.pump()  # an ended pipe is closed, and epoll forgets it
                self._reap()
                # Before the trainer's end: a trainer that ended after its feeder failed
                # ended because of it.
                self._check_feeder()
                if self.status is not None:
                    return
                if self.stop_signals:
                    self.stop_signals = 0
                    self._stop_requested()
                if self.deadline_signals:
                    self._reread_deadline()
                self._check_timers()
                timeout = self._next_timeout()
                selector.poll(-1 if timeout is None else timeout)
                self._drain_wakeups()

    def _drain_wakeups(self) -> None:
        """Empty the pipe signals wake the loop through (set_wakeup_fd) once its poll returns."""
        _drain(self.wake_fd)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.trainer_pid:
                self.status, self.ended_at = status, time.time()
            elif self.feeder is not None and pid == self.feeder.pid:
                self.feeder.status = status
            elif pid in self.helpers:
                what = self.helpers.pop(pid)
                if status != 0:
                    log(f"{what} {describe_status(status)}")

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        times = [t - now for t in (self.kill_at, self.engine_kill_at, self.client_kill_at) if t]
        if self.deadline is not None and self.phase is Phase.RUNNING:
            times.append(min(self.deadline - time.time(), WALL_CLOCK_RECHECK))
        return max(0.0, min(times)) if times else None

    # -- stopping ------------------------------------------------------------------------

    def _read_stop_request(self) -> tuple[float, StopCause]:
        return read_stop_request(self.launch.stop_file, self.launch.stop_grace_seconds)

    def _stop_requested(self) -> None:
        grace, cause = self._read_stop_request()
        self._begin_stop(cause, grace)

    def _begin_stop(self, cause: StopCause, grace: float) -> None:
        """Stop the trainer within `grace` seconds; a later, shorter request shortens the
        grace left, a longer one never lengthens it. The first cause is the one recorded."""
        now = time.monotonic()
        if self.phase is Phase.RUNNING:
            log(f"stopping ({cause}), grace {grace:g} s")
            self.stop, self.stop_began = Stop(cause, grace), now
            self._enter(Phase.STOPPING)
        elif self.stop is not None and self.kill_at is not None and now + grace < self.kill_at:
            log(f"grace shortened to {grace:g} s")
            self.stop = Stop(self.stop.cause, now + grace - self.stop_began)
        else:
            return
        self.kill_at = now + grace
        if self.engine is None:
            assert self.trainer_pid is not None
            if grace > 0:
                procfs.signal_group(self.trainer_pid, signal.SIGTERM)
        else:
            self._helper(container.stop_argv(self.engine, grace), "engine stop")
            self.engine_kill_at = self.kill_at + container.BACKSTOP_SECONDS

    def _check_timers(self) -> None:
        now = time.monotonic()
        deadline = self.deadline
        if deadline is not None and self.phase is Phase.RUNNING and time.time() >= deadline:
            self._begin_stop("time_limit", self.launch.stop_grace_seconds)
        if self.engine is None:
            if self.kill_at is not None and now >= self.kill_at:
                self.kill_at = None
                self._force()
            return
        if self.engine_kill_at is not None and now >= self.engine_kill_at:
            log("the engine did not stop the container in time: killing it")
            self.engine_kill_at = None
            self._helper(container.kill_argv(self.engine), "engine kill")
            self.client_kill_at = now + container.BACKSTOP_SECONDS
        if self.client_kill_at is not None and now >= self.client_kill_at:
            self.client_kill_at = None
            self._force()

    def _force(self) -> None:
        assert self.stop is not None
        assert self.trainer_pid is not None
        log("grace over: SIGKILL to the trainer's tree")
        self.stop = Stop(self.stop.cause, self.stop.grace, forced=True)
        # The trainer is not reaped before the loop ends, so its group number is still its.
        procfs.signal_group(self.trainer_pid, signal.SIGKILL)
        if self.engine is None:
            # Orphans of the trainer are the monitor's children now (subreaper). The feeder
            # is spared: it ends after the trainer, with SIGTERM, removing its FIFOs.
            spared = () if self.feeder is None else (self.feeder.pid,)
            pidfds = procfs.signal_tree(self.me, signal.SIGKILL, exclude=spared)
        else:
            pidfds = procfs.signal_tree(self.trainer_pid, signal.SIGKILL)
        for pidfd in pidfds:
            os.close(pidfd)

    def _check_feeder(self) -> None:
        """A failure as soon as the feeder reports it: it stays alive after its report,
        holding the failed epoch's FIFO open, so the reader never sees a clean end."""
        feeder = self.feeder
        if feeder is None or feeder.handled:
            return
        if feeder.status is None:
            ended, said = poll_report(feeder.report_fd)
            if ended and self.selector is not None:
                # Nothing to say and about to exit: wait for its status instead of a pipe
                # that would stay readable.
                with contextlib.suppress(OSError):
                    self.selector.unregister(feeder.report_fd)
            if said is None:
                return
            os.close(feeder.report_fd)
        else:
            said = read_report(feeder.report_fd)
            if feeder.status == 0 and said is None:
                feeder.handled = True
                log("feeder done: every channel offered all its epochs")
                return
        feeder.handled = True
        self.feeder_reason = said or f"the feeder {describe_status(feeder.status or 0)}"
        log(f"feeder failed: {self.feeder_reason}")
        self._begin_stop("feeder", self.launch.stop_grace_seconds)

    def _helper(self, argv: list[str], what: str) -> None:
        """Run an engine command beside the loop, never waiting for it."""
        try:
            pid = spawn_beside(argv, self.launch.env)
        except (OSError, ValueError) as exc:
            log(f"cannot run {what}: {exc}")
            return
        self.helpers[pid] = what

    # -- the end ---------------------------------------------------------------------------

    def _stopped_before_start(self) -> Ending | None:
        """A stop or a time limit that came before the trainer could start."""
        # trainqd writes the stop file before it signals, so the file alone also counts: no
        # stop is lost, whatever became of its signal before the handlers were in place.
        if self.stop_signals or os.path.exists(self.launch.stop_file):
            self.stop_signals = 0
            _, reason = self._read_stop_request()
            return not_started(reason)
        self._reread_deadline()  # a change made before the handlers were in place
        deadline = self.deadline
        if deadline is not None and time.time() >= deadline:
            return not_started("time_limit")
        return None

    def _end_tree(self) -> None:
        """No process of the job outlives it: SIGTERM, a short wait, SIGKILL; then the
        attempt's cgroup, for whatever left the tree."""
        # As subreaper the monitor is the ancestor of all that is left of the job: with no
        # child at all there is nothing to look for (and a scan of /proc costs ms).
        if procfs.has_children():
            groups = () if self.trainer_pid is None else (self.trainer_pid,)
            survivors = procfs.kill_tree(
                self.me, term_wait=LEFTOVER_GRACE, kill_wait=KILL_WAIT, pgids=groups
            )
            self._reap()
            if survivors:
                log(f"processes that would not die: {survivors}")
            mark("tree killed")
        # A container's engine may still be tidying up after the client (podman's conmon):
        # it gets a moment before the kill.
        self._end_cgroup(drain=LEFTOVER_GRACE if self.engine is not None else 0.0)

    def _enter_cgroup(self) -> None:
        """Into the attempt's own cgroup before anything of the job starts (cgroup.py)."""
        try:
            self.cgroup = cgroup.AttemptCgroup.enter(
                self.launch.ml_root, self.launch.job_id, self.launch.attempt
            )
        except cgroup.Unavailable as exc:
            # trainqd said so once at its start when it cannot have cgroups at all.
            log(f"no cgroup of its own ({exc}): the process tree alone is followed")

    def _end_cgroup(self, drain: float) -> None:
        if self.cgroup is None:
            return
        attempt_cgroup, self.cgroup = self.cgroup, None
        survivors = attempt_cgroup.end(drain=drain, kill_wait=KILL_WAIT)
        self._reap()
        if survivors is None:
            log("cannot leave the attempt's cgroup: trainqd kills it after the monitor")
        elif survivors:
            log(f"processes in the attempt's cgroup that would not die: {survivors}")

    def _kill_everything(self) -> None:
        try:
            groups = () if self.trainer_pid is None else (self.trainer_pid,)
            procfs.kill_tree(self.me, term_wait=0, kill_wait=KILL_WAIT, pgids=groups)
            self._reap()
            self._end_cgroup(drain=0.0)
        except BaseException as exc:
            log(f"cannot clean up: {exc}")

    def _conclude(self, status: int) -> Ending:
        assert self.prepared is not None
        ml_root, stderr_fd = self.launch.ml_root, self.prepared.stderr_fd
        ending = conclude(status, self.stop, ml_root, stderr_fd)
        if ending.outcome == Outcome.FEEDER_FAILED:
            return Ending(ending.outcome, ending.exit_code, ending.signal, self.feeder_reason)
        code = ending.exit_code
        if self.engine is not None and self.stop is None and code in container.INSPECTED_STATUSES:
            assert code is not None
            state = container.inspect(self.engine, self.launch.env)
            settled = container.resolve_exit(
                self.engine.engine, code, state, output_tail(stderr_fd)
            )
            if settled is not None:
                return settled
        return ending

    def _write_monitor_info(self) -> None:
        info = MonitorInfo(
            monitor_pid=self.me,
            monitor_start=procfs.start_ticks(self.me) or 0,
            boot_id=procfs.boot_id(),
        )
        # Beside the stop file, in trainqd's directory, which the job's owner cannot write:
        # a later trainqd watches and signals the pid it finds there. Not fsynced: it only
        # matters while this boot lasts (a crash of the machine ends the monitor, and the
        # record names its boot), and the page cache outlives any process.
        path = monitor_info_path(os.path.dirname(self.launch.stop_file), self.launch.attempt)
        try:
            write_record(path, info, durable=False)
        except OSError as exc:  # only a later trainqd needs it: the job goes on
            log(f"warning: cannot write {path}: {exc}")

    def _exit_record(self, ending: Ending) -> ExitRecord:
        """The attempt's exit record, as this monitor saw it end."""
        return ExitRecord(
            job_id=self.launch.job_id,
            attempt=self.launch.attempt,
            outcome=ending.outcome,
            started_at=self.started_at,
            ended_at=self.ended_at or time.time(),
            exit_code=ending.exit_code,
            signal=ending.signal,
            reason=ending.reason,
            opt_ml=self.prepared.opt_ml if self.prepared is not None else None,
        )

    def _record(self, ending: Ending) -> None:
        record = self._exit_record(ending)
        write_exit_record(os.path.join(self.launch.attempt_dir, EXIT_RECORD), record)
        log(f"exit record: {ending.outcome}")

    def _reserve_record_space(self) -> None:
        """No trainer starts unless its exit record is sure to fit (records.py says why)."""
        try:
            reserve_record_space(self.launch.attempt_dir)
        except OSError as exc:
            raise StartFailed(f"no room for the attempt's exit record: {exc.strerror}") from None


def _wake_only(signum: int, frame: FrameType | None) -> None:
    """A handler that does nothing: its signal only has to wake the selector."""


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass


def run(launch: Launch) -> int:
    return TrainerSupervisor(launch).run()
