"""One attempt of a job of several nodes: a monitor over one monitor per node.

trainqd sees one monitor per attempt, as for any job (its pid, its stop file, its exit
record, its cgroup), so stops, time limits, preemption, retries, a restart of trainqd and
the backstop for a frozen monitor act on the gang as on any attempt. This monitor stays
root (as a container job's does) and runs no code of the job:

    enter the attempt's cgroup, subreaper, reserve the exit record's space
    fork one node monitor per node (`NodeSupervisor`: a TrainerSupervisor of that node's
        launch, in a cgroup of its node's own inside the attempt's, its own mount namespace,
        ml root, GPUs and output files), all at once, before any of them is waited for
    watch: each node monitor's pidfd, signals (through a wakeup pipe)
        SIGTERM  -> the same to every node monitor: each reads the attempt's stop file
        SIGHUP   -> the same to every node monitor: each re-reads the deadline file
        a node ended unsuccessfully (restart = "job") -> SIGTERM to the others (their
                    launch's grace): the attempt ends as that node did
        a node ended unsuccessfully (restart = "node") -> that node starts again in place,
                    up to NODE_RESTARTS times, then as restart = "job"
        every node of the primary groups exited 0 -> SIGTERM to the others: the job is done
        grace over (a node monitor that does not end) -> SIGKILL to every process below
    end: kill what is left below, the cgroup, write exit.json

Each node monitor hands its exit record back on a pipe (and writes it in its own directory,
where `trainq show` reads it); what comes back on the pipe is parsed as any record is.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from dataclasses import asdict, replace

from trainq.core.outcomes import Ending, ExitRecord, NodeEnd, Outcome
from trainqd.monitor import cgroup, container, enginewall, libc, netns, procfs
from trainqd.monitor import log as monitor_log
from trainqd.monitor.log import log
from trainqd.monitor.outcome import Stop
from trainqd.monitor.process import describe_status
from trainqd.monitor.records import (
    EXIT_RECORD,
    MAX_RECORD_BYTES,
    Launch,
    parse_exit_record,
    write_exit_record,
)
from trainqd.monitor.supervise import (
    LEFTOVER_GRACE,
    Phase,
    TrainerSupervisor,
)

# restart = "node": a node is started again in place this many times (AI Platform's rule),
# then its next failure ends the attempt as restart = "job" would.
NODE_RESTARTS = 5
# A node monitor gets this long past its grace to end its trainer and write its record:
# more than an honest one takes (a container's engine stop, kill and client backstops and
# the leftovers' grace, about 15 s), well within trainqd's own end_margin_seconds (90 s).
NODE_BACKSTOP = 2 * container.BACKSTOP_SECONDS + 2 * LEFTOVER_GRACE + 16.0
ENGINE_NETWORK_TIMEOUT = 60.0
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGINT}


def clean(record: ExitRecord) -> bool:
    return record.outcome == "exited" and record.exit_code == 0


class NodeSupervisor(TrainerSupervisor):
    """One node's monitor: a TrainerSupervisor whose cgroup is its node's, inside the
    gang's, and whose record also goes back to the gang on `report_fd`."""

    def __init__(self, launch: Launch, report_fd: int, sync: tuple[int, int] | None) -> None:
        super().__init__(launch)
        self.report_fd = report_fd
        self.sync = sync  # (the gang's "go", our "ready"): a network namespace to join

    def _attempt(self) -> Ending:
        problem = self._join_network() if self.sync is not None else None
        if problem is not None:
            log(problem)
            self._enter(Phase.ENDING)
            return Ending(Outcome.START_FAILED, reason=f"no network for the node: {problem}")
        return super()._attempt()

    def _join_network(self) -> str | None:
        """A network namespace of the node's own, which the gang plugs into its bridge
        (netns.py); then its address, from the peers' list."""
        assert self.sync is not None
        assert self.launch.node is not None
        go_fd, ready_fd = self.sync
        try:
            # Its host name too, as a SageMaker host has: gethostname() is algo-i.
            libc.unshare(libc.CLONE_NEWNET | libc.CLONE_NEWUTS)
            import socket  # noqa: PLC0415 (a node's monitor only)

            socket.sethostname(self.launch.node)
        except OSError as exc:
            os.close(ready_fd)  # the gang reads the end: nothing to plug
            return f"no network namespace ({exc.strerror})"
        os.write(ready_fd, b"r")
        os.close(ready_fd)
        said = os.read(go_fd, 1)
        os.close(go_fd)
        if said != b"g":
            return "the gang could not plug it into the job's bridge (its monitor.log says why)"
        return netns.configure(self.launch.peers[self.launch.node])

    def _enter_cgroup(self) -> None:
        assert self.launch.node is not None
        try:
            cgroup.enter_node(self.launch.node)
        except cgroup.Unavailable as exc:
            log(f"no cgroup of the node's own ({exc}): its devices are the gang's")

    def _write_monitor_info(self) -> None:
        """trainqd follows the gang's monitor alone."""

    def _record(self, ending: Ending) -> None:
        record = self._exit_record(ending)
        data = json.dumps(asdict(record), separators=(",", ":")).encode()
        with contextlib.suppress(OSError):
            os.write(self.report_fd, data[:MAX_RECORD_BYTES])
        os.close(self.report_fd)
        try:
            write_exit_record(os.path.join(self.launch.attempt_dir, EXIT_RECORD), record)
        except OSError as exc:  # the gang has it: only `trainq show` misses it
            log(f"cannot write the node's exit record: {exc}")
        log(f"exit record: {ending.outcome}")


class NodeRun:
    """A node monitor the gang started: its process and, once it ended, its record."""

    def __init__(self, launch: Launch, pid: int, pidfd: int, report_fd: int) -> None:
        self.launch = launch
        self.pid = pid
        self.pidfd = pidfd
        self.report_fd = report_fd
        self.record: ExitRecord | None = None
        self.status: int | None = None
        self.restarts = 0

    @property
    def name(self) -> str:
        assert self.launch.node is not None
        return self.launch.node


class GangSupervisor(TrainerSupervisor):
    """The monitor of one attempt of a job of several nodes; `run` is all there is to call."""

    def __init__(self, launch: Launch) -> None:
        super().__init__(launch)
        self.runs: dict[int, NodeRun] = {}  # by pid, the live ones
        self.ended: list[NodeRun] = []  # in the order they ended
        self.failure: NodeRun | None = None
        self.done_by_primary = False
        self.backstop_at: float | None = None

    def _attempt(self) -> Ending:
        self._catch_signals()
        try:
            libc.set_child_subreaper()
        except OSError as exc:
            log(f"warning: not a subreaper ({exc.strerror}): orphans cannot be followed")
        self._enter_cgroup()
        self._write_monitor_info()
        self._reserve_record_space()
        early = self._stopped_before_start()
        if early is not None:
            self._enter(Phase.ENDING)
            self._end_tree()
            return early
        if self.launch.container is not None:
            problem = self._engine_network("create")
            if problem is None:
                problem = self._engine_firewall()
            if problem is not None:
                log(problem)
                self._enter(Phase.ENDING)
                self._end_tree()
                return Ending(Outcome.START_FAILED, reason=f"no network for the job: {problem}")
        if self.launch.network:
            problem = netns.make_bridge(self.launch.network)
            if problem is not None:
                log(problem)
                self._enter(Phase.ENDING)
                self._end_tree()
                return Ending(Outcome.START_FAILED, reason=f"no network for the job: {problem}")
        self.started_at = time.time()
        # Forked all at once, then plugged in: the nodes make their namespaces meanwhile.
        forked = [self._fork(node, restarts=0) for node in self.launch.nodes]
        for run, sync in forked:
            self._plug(run, sync)
        log(f"{len(self.launch.nodes)} nodes started")
        self._enter(Phase.RUNNING)
        self._watch_nodes()
        self._enter(Phase.ENDING)
        self._end_tree()
        if self.launch.network and not netns.remove(self.launch.network):
            log(f"the job's bridge {self.launch.network} was gone already")
        if self.launch.container is not None:
            problem = self._engine_network("remove")
            if problem is not None:
                log(problem)
            enginewall.remove(self.launch.container.name)
        return self._conclude_gang()

    def _engine_network(self, what: str) -> str | None:
        """A container gang's network of the engine's (no route out: `--internal`), whose
        DNS names each node's container by its host name; None, or what went wrong."""
        engine = self.launch.container
        assert engine is not None
        import subprocess  # noqa: PLC0415 (container gangs only)

        if what == "create":
            argv = [engine.engine_path, "network", "create", "--internal", engine.name]
            if engine.engine == "docker":  # a bridge of a known name (enginewall.py)
                argv[-1:-1] = ["--opt", f"com.docker.network.bridge.name={self._bridge()}"]
        else:
            argv = [engine.engine_path, "network", "rm", "--force", engine.name]
        try:
            done = container.run_bounded(argv, self.launch.env, ENGINE_NETWORK_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"cannot {what} the network {engine.name}: {exc}"
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            return (
                f"cannot {what} the network {engine.name}: {said[-1] if said else done.returncode}"
            )
        return None

    def _engine_firewall(self) -> str | None:
        """Under a root trainqd, the host's other users kept off the engine's network
        (enginewall.py); None, or what went wrong (the network is removed then)."""
        engine = self.launch.container
        assert engine is not None
        if os.geteuid() != 0:
            return None  # a personal engine's networks are in its own network namespace
        import subprocess  # noqa: PLC0415 (container gangs only)

        argv = [engine.engine_path, "network", "inspect", engine.name]
        problem = None
        try:
            done = container.run_bounded(argv, self.launch.env, ENGINE_NETWORK_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problem = f"network inspect failed: {exc}"
        else:
            if done.returncode != 0:
                problem = f"network inspect exited {done.returncode}"
        if problem is None:
            try:
                inspected = done.stdout.decode("utf-8", "replace")
                enginewall.add(engine.name, inspected, self._bridge())
            except enginewall.Unavailable as exc:
                problem = str(exc)
        if problem is None:
            return None
        self._engine_network("remove")
        return f"cannot keep the host's users off the network {engine.name}: {problem}"

    def _bridge(self) -> str | None:
        """The engine network's bridge when trainq names it (docker's CLI), else None."""
        engine = self.launch.container
        assert engine is not None
        return enginewall.docker_bridge(engine.name) if engine.engine == "docker" else None

    # -- the nodes ---------------------------------------------------------------------

    def _start(self, node: Launch, restarts: int) -> NodeRun:
        run, sync = self._fork(node, restarts)
        self._plug(run, sync)
        return run

    def _fork(self, node: Launch, restarts: int) -> tuple[NodeRun, tuple[int, int] | None]:
        """A node's monitor, forked; its "ready" and "go" pipes when it has a network
        namespace to be plugged into the bridge (`_plug`)."""
        if restarts:
            env = dict(node.env, TRAINQ_NODE_RESTARTS=str(restarts))
            node = replace(node, env=env)
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        go_read, go_write = os.pipe2(os.O_CLOEXEC) if node.network else (-1, -1)
        ready_read, ready_write = os.pipe2(os.O_CLOEXEC) if node.network else (-1, -1)
        # Blocked across the fork: the child takes no signal before its own handlers are in
        # place (it unblocks them then: supervise.py), and none is lost meanwhile.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the node's monitor, from here to os._exit
                status = 1
                try:
                    for fd in (read_fd, go_write, ready_read):
                        if fd >= 0:
                            os.close(fd)
                    signal.set_wakeup_fd(-1)
                    os.close(self.wake_fd)
                    monitor_log.prefix = f"{node.node}: "
                    sync = (go_read, ready_write) if node.network else None
                    status = NodeSupervisor(node, write_fd, sync).run()
                finally:
                    os._exit(status)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        os.close(write_fd)
        run = NodeRun(node, pid, os.pidfd_open(pid), read_fd)
        run.restarts = restarts
        self.runs[pid] = run
        log(f"{node.node}: monitor {pid} started")
        if not node.network:
            return run, None
        os.close(go_read)
        os.close(ready_write)
        return run, (ready_read, go_write)

    def _plug(self, run: NodeRun, sync: tuple[int, int] | None) -> None:
        """Plug the node's namespace into the bridge once it has made it; "go" either way
        (a node not plugged ends as start_failed, and its end the others')."""
        if sync is None:
            return
        ready_fd, go_fd = sync
        try:
            ready = os.read(ready_fd, 1) == b"r"
            network = run.launch.network
            problem = netns.plug(self.launch.network, network, run.pid) if ready else None
            if problem is not None:
                log(f"{run.name}: {problem}")
            with contextlib.suppress(OSError):
                os.write(go_fd, b"g" if ready and problem is None else b"x")
        finally:
            os.close(ready_fd)
            os.close(go_fd)

    def _watch_nodes(self) -> None:
        with select.epoll() as selector:
            self.selector = selector
            selector.register(self.wake_fd, select.EPOLLIN)
            for run in self.runs.values():
                selector.register(run.pidfd, select.EPOLLIN)
            while self.runs:
                for run in self._reap_nodes():
                    self._node_ended(run, selector)
                if not self.runs:
                    return
                if self.stop_signals:
                    self.stop_signals = 0
                    self._stop_requested()
                if self.deadline_signals:
                    self.deadline_signals = 0
                    self._signal_nodes(signal.SIGHUP)
                if self.backstop_at is not None and time.monotonic() >= self.backstop_at:
                    self.backstop_at = None
                    log("a node's monitor outlived its grace: SIGKILL to every process below")
                    for pidfd in procfs.signal_tree(self.me, signal.SIGKILL):
                        os.close(pidfd)
                timeout = None
                if self.backstop_at is not None:
                    timeout = max(0.0, self.backstop_at - time.monotonic())
                selector.poll(-1 if timeout is None else timeout)
                self._drain_wakeups()

    def _reap_nodes(self) -> list[NodeRun]:
        ended = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            run = self.runs.pop(pid, None)
            if run is None:
                continue  # an orphan of a node's tree, reparented here
            run.status = status
            run.record = self._read_record(run)
            os.close(run.report_fd)
            ended.append(run)
        return ended

    def _read_record(self, run: NodeRun) -> ExitRecord | None:
        try:
            data = os.read(run.report_fd, MAX_RECORD_BYTES)
            return parse_exit_record(json.loads(data), self.launch.job_id, self.launch.attempt)
        except (OSError, ValueError) as exc:
            assert run.status is not None
            log(f"{run.name}: no usable record ({exc}); its monitor {describe_status(run.status)}")
            return None

    def _node_ended(self, run: NodeRun, selector: select.epoll) -> None:
        with contextlib.suppress(OSError):
            selector.unregister(run.pidfd)
        os.close(run.pidfd)
        record = run.record
        log(f"{run.name}: ended, {record.outcome if record else 'lost'}")
        ok = record is not None and clean(record)
        if self.stop is not None or self.failure is not None or self.done_by_primary:
            self.ended.append(run)
            return
        if not ok and self._restarts_in_place(run, record):
            again = self._start(run.launch, run.restarts + 1)
            selector.register(again.pidfd, select.EPOLLIN)
            return
        self.ended.append(run)
        if not ok:
            self.failure = run
            log(f"{run.name} failed: stopping the other nodes")
            self._signal_nodes(signal.SIGTERM)
            self._arm_backstop(self.launch.stop_grace_seconds)
        elif self._primary_done():
            self.done_by_primary = True
            log("every primary node exited 0: stopping the other nodes")
            self._signal_nodes(signal.SIGTERM)
            self._arm_backstop(self.launch.stop_grace_seconds)

    def _restarts_in_place(self, run: NodeRun, record: ExitRecord | None) -> bool:
        """restart = "node": a node that ended with a transient error (the job's
        retry_exit_codes) starts again, up to NODE_RESTARTS times; a permanent error, a node
        that could not start, was killed for memory or was lost ends the attempt."""
        if self.launch.restart != "node" or record is None or run.restarts >= NODE_RESTARTS:
            return False
        codes = self.launch.transient_exit_codes
        if record.outcome == "signaled" and record.signal is not None:
            return record.signal in codes or 128 + record.signal in codes
        return record.outcome == "exited" and record.exit_code in codes

    def _primary_done(self) -> bool:
        primary = set(self.launch.primary)
        if not primary:
            return False
        done = {run.name for run in self.ended if run.record is not None and clean(run.record)}
        return primary <= done

    def _signal_nodes(self, sig: int) -> None:
        for run in self.runs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.pid, sig)

    def _arm_backstop(self, grace: float) -> None:
        at = time.monotonic() + grace + NODE_BACKSTOP
        if self.backstop_at is None or at < self.backstop_at:
            self.backstop_at = at

    def _stop_requested(self) -> None:
        """trainqd's stop (or a shutdown's SIGTERM): every node monitor reads the same stop
        file and stops its trainer with its grace."""
        grace, cause = self._read_stop_request()
        if self.stop is None:
            log(f"stopping ({cause}), grace {grace:g} s")
            self.stop = Stop(cause, grace)
            self._enter(Phase.STOPPING)
        self._signal_nodes(signal.SIGTERM)
        self._arm_backstop(grace)

    # -- the end -----------------------------------------------------------------------

    def _kill_everything(self) -> None:
        super()._kill_everything()
        if self.launch.network:
            netns.remove(self.launch.network)
        if self.launch.container is not None:
            self._engine_network("remove")
            enginewall.remove(self.launch.container.name)

    def _conclude_gang(self) -> Ending:
        """The attempt ends as its failing node did; else as the first node that did not
        exit 0 (a stop, a time limit: each node's own record says so); else exited 0."""
        self.ended_at = max((r.record.ended_at for r in self.ended if r.record), default=None)
        if self.failure is not None:
            return _node_ending(self.failure)
        if self.done_by_primary:
            return Ending(Outcome.EXITED, 0)
        for run in self.ended:
            if run.record is None or not clean(run.record):
                return _node_ending(run)
        return Ending(Outcome.EXITED, 0)

    def _exit_record(self, ending: Ending) -> ExitRecord:
        return replace(super()._exit_record(ending), nodes=self._node_ends())

    def _node_ends(self) -> tuple[NodeEnd, ...]:
        """Each node's end, its last run's (`trainq show` lists them), in rank order. A node
        this monitor stopped (a sibling failed, or the primary groups were done) saw only a
        SIGTERM without a stop order, which it takes for the host's shutdown: stopped."""
        last = {run.name: run for run in self.ended}
        stopped_here = self.stop is None and (self.failure is not None or self.done_by_primary)
        ends = []
        for node in self.launch.nodes:
            run = last.get(node.node or "")
            if run is None:  # never started: the attempt ended before it
                continue
            record = run.record
            if record is None:
                ends.append(NodeEnd(run.name, Outcome.LOST, restarts=run.restarts))
            else:
                outcome, code, sig = record.outcome, record.exit_code, record.signal
                if stopped_here and run is not self.failure and outcome == Outcome.INTERRUPTED:
                    outcome = Outcome.STOPPED
                ends.append(NodeEnd(run.name, outcome, code, sig, run.restarts))
        return tuple(ends)

    def _record(self, ending: Ending) -> None:
        if ending.outcome == "start_failed" and not any(
            run.record and run.record.started_at for run in self.ended
        ):
            self.started_at = None
        super()._record(ending)


def _node_ending(run: NodeRun) -> Ending:
    record = run.record
    if record is None:
        status = describe_status(run.status or 0)
        return Ending(Outcome.LOST, reason=f"{run.name}: its monitor {status} without a record")
    reason = f"{run.name}: {record.reason}" if record.reason else run.name
    return Ending(record.outcome, record.exit_code, record.signal, reason)


def run(launch: Launch) -> int:
    return GangSupervisor(launch).run()
