"""A job of several nodes under Slurm (the exported script's step, and so trainqd's Slurm
back end): each attempt is one `srun` step with one task per node.

    the batch step (first node)   python -m trainqd.run SPEC --job-dir DIR
        each attempt              srun --nodes=N --ntasks-per-node=1 --kill-on-bad-exit=1
                                      python -m trainqd.run SPEC ... --attempt A --node RANK
        task RANK (= SLURM_PROCID) that node's monitor: algo-<RANK + 1>, its group's command,
                                  its ml root DIR/nodes/algo-<RANK + 1>, its output in
                                  DIR/attempts/A/nodes/algo-<RANK + 1>/ (`trainq logs --node`)
        after the step            the gang's exit record DIR/attempts/A/exit.json, from its
                                  nodes' records

Each node is laid out by trainqd.attempts.nodes as under a local trainqd, with its peers'
addresses from Slurm: the step's nodes in order (`scontrol show hostnames`), each at its
NodeAddr, so algo-i resolves (the monitor binds a hosts file in the node's mount namespace)
to the host task i-1 runs on and MASTER_ADDR is the first task's. Ranks share a host when
Slurm places them so (the test's local Slurm runs several slurmd on one host).

A node that fails makes srun end the step (`--kill-on-bad-exit`: SIGTERM to every other
task, SIGKILL after Slurm's KillWait), so the attempt ends as that node did and is retried
whole (restart = "job"). A node that ended because it was stopped exits 0, so only a failure
ends the others. A stop reaches the step as `scancel --signal=TERM` of the job (every step but
the batch one): srun itself takes SIGTERM as a kill of the step, not a signal to relay.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import psutil

from trainq.core.nodes import Node, layout
from trainq.core.outcomes import REASON_CHARS, Ending, ExitRecord, NodeEnd, Outcome
from trainq.core.spec import JobSpec
from trainqd.attempts.contract import Assignment
from trainqd.attempts.launch import Attempt, BuiltLaunch
from trainqd.attempts.nodes import build_node
from trainqd.monitor.log import log
from trainqd.monitor.records import EXIT_RECORD, Launch, parse_exit_record, read_json
from trainqd.monitor.supervise import TrainerSupervisor

SCONTROL_TIMEOUT = 30.0
# What a node ends as when the gang, not the node itself, ended it.
STOPPED = frozenset({Outcome.STOPPED, Outcome.INTERRUPTED, Outcome.TIMED_OUT})


class NoPeers(Exception):
    """Slurm did not say where the step's nodes are."""


def srun_argv(spec: JobSpec, task: list[str], attempt: int, copy_output: bool = False) -> list[str]:
    """The step of one attempt: `task` (python -m trainqd.run SPEC --job-dir DIR ...) on every
    node, each told its rank by Slurm."""
    count = spec.node_count
    argv = [
        "srun",
        f"--nodes={count}",
        f"--ntasks={count}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--job-name=attempt-{attempt}",
    ]
    if copy_output:
        argv.append("--label")  # each line of the job's output says its task
    own = [*task, "--attempt", str(attempt)]
    if copy_output:
        own.append("--copy-output")
    # The rank is the task's, known only in the task: the shell reads it there.
    return [*argv, "/bin/sh", "-c", 'exec "$0" "$@" --node "$SLURM_PROCID"', *own]


def peer_addresses(environ: Mapping[str, str]) -> list[str]:
    """Each task's host address, in rank order (one task per node, in the step's order)."""
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise NoPeers("no SLURM_STEP_NODELIST: not a task of a Slurm step")
    names = _scontrol(environ, "show", "hostnames", nodelist).split()
    shown = _scontrol(environ, "show", "node", "-o", ",".join(names))
    addresses: dict[str, str] = {}
    for line in shown.splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split())
        if fields.get("NodeName"):
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return [_resolve(addresses.get(name, name)) for name in names]


def _scontrol(environ: Mapping[str, str], *args: str) -> str:
    try:
        done = subprocess.run(
            ["scontrol", *args],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoPeers(f"scontrol {args[0]} {args[1]}: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise NoPeers(f"scontrol {args[0]} {args[1]}: {said[-1] if said else done.returncode}")
    return done.stdout


def _resolve(host: str) -> str:
    """An address for the hosts file (which takes no names)."""
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        raise NoPeers(f"{host} does not resolve: {exc}") from None
    return str(found[0][4][0])


def interface_of(address: str) -> str:
    """The local interface holding `address` ("lo" for loopback ones); "" if none does."""
    if ipaddress.ip_address(address).is_loopback:
        return "lo"
    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address == address for entry in addresses):
            return name
    return ""


def node_launch(at: Attempt, rank: int, peers: list[str], now: float) -> BuiltLaunch:
    """The launch of the node of rank `rank`, in the gang's attempt `at` (whose GPUs are the
    ones Slurm gave this task: the node takes as many as its group asks)."""
    nodes = layout(at.job.spec)
    if not 0 <= rank < len(nodes) or len(peers) != len(nodes):
        raise NoPeers(f"task {rank} of a step of {len(peers)} for a job of {len(nodes)} nodes")
    node = nodes[rank]
    gpus = Assignment(at.gpus.indices[: node.gpus], at.gpus.uuids[: node.gpus])
    by_name = {n.name: address for n, address in zip(nodes, peers, strict=True)}
    built = build_node(
        at,
        now,
        node,
        nodes,
        gpus=gpus,
        ml_root=node_root(at.paths.job_dir, node),
        peers=by_name,
        interface=interface_of(peers[rank]),
    )
    return replace(built, launch=replace(built.launch, peers=by_name))


def node_root(job_dir: Path, node: Node) -> Path:
    return job_dir / "nodes" / node.name


class NodeMonitor(TrainerSupervisor):
    """A node's monitor in a Slurm task. Several nodes of one attempt may share a host, so
    it takes nothing that is the attempt's alone there: no cgroup of the attempt's (Slurm's
    step contains the node's processes), no monitor record beside the stop file (the batch
    step follows the node, through srun)."""

    def _enter_cgroup(self) -> None:
        log("the node's processes are contained by its Slurm step")

    def _write_monitor_info(self) -> None:
        pass


def run_node(launch: Launch) -> int:
    return NodeMonitor(launch).run()


def prepare(job_dir: Path, attempt_dir: Path, spec: JobSpec) -> None:
    """Each node's ml root (kept across attempts) and directory in the attempt, made by the
    batch step where trainqd has not made them."""
    for node in layout(spec):
        (job_dir / "nodes" / node.name).mkdir(parents=True, exist_ok=True, mode=0o700)
        (attempt_dir / "nodes" / node.name).mkdir(parents=True, exist_ok=True, mode=0o700)


def ended_by_itself(ending: Ending) -> bool:
    """A node's exit status for srun: whether it should end the others (it failed on its
    own, rather than completing or being stopped with the gang)."""
    clean = ending.outcome == Outcome.EXITED and ending.exit_code == 0
    return not clean and ending.outcome not in STOPPED


def gang_record(attempt_dir: Path, spec: JobSpec, job_id: int, attempt: int) -> ExitRecord:
    """The attempt's end from its nodes' records: as the node that failed first (by its own
    doing, not stopped with the gang); else as the first that did not exit 0; else 0. With
    each node's end (`trainq show` lists them)."""
    records = _node_records(attempt_dir, spec, job_id, attempt)
    record, failed = _gang_end(records, job_id, attempt)
    ends = []
    for name, node in records:
        if node is None:
            ends.append(NodeEnd(name, Outcome.LOST))
            continue
        outcome = node.outcome
        # srun ended it when another failed: it was stopped, not the host shutting down.
        if failed is not None and name != failed and outcome == Outcome.INTERRUPTED:
            outcome = Outcome.STOPPED
        ends.append(NodeEnd(name, outcome, node.exit_code, node.signal))
    return replace(record, nodes=tuple(ends))


def _node_records(
    attempt_dir: Path, spec: JobSpec, job_id: int, attempt: int
) -> list[tuple[str, ExitRecord | None]]:
    records: list[tuple[str, ExitRecord | None]] = []
    for node in layout(spec):
        where = attempt_dir / "nodes" / node.name / EXIT_RECORD
        try:
            records.append((node.name, parse_exit_record(read_json(str(where)), job_id, attempt)))
        except (OSError, ValueError):
            records.append((node.name, None))
    return records


def _gang_end(
    records: list[tuple[str, ExitRecord | None]], job_id: int, attempt: int
) -> tuple[ExitRecord, str | None]:
    """The gang's end, and the node that failed by itself and so ended it, if one did."""
    present = [r for _, r in records if r is not None]
    started = min((r.started_at for r in present if r.started_at), default=None)
    ended = max((r.ended_at for r in present), default=time.time())
    failed = sorted(
        ((r.ended_at, name, r) for name, r in records if r and ended_by_itself(r.ending)),
        key=lambda item: item[0],
    )
    if failed:
        _, name, first = failed[0]
        return _as_node(job_id, attempt, started, ended, name=name, node=first), name
    for name, record in records:
        if record is None:
            why = f"{name}: no exit record (its task never ran, or its host went down)"
            return ExitRecord(job_id, attempt, Outcome.LOST, started, ended, reason=why), None
        if not (record.outcome == Outcome.EXITED and record.exit_code == 0):
            return _as_node(job_id, attempt, started, ended, name=name, node=record), None
    return ExitRecord(job_id, attempt, Outcome.EXITED, started, ended, exit_code=0), None


def _as_node(
    job_id: int, attempt: int, started: float | None, ended: float, *, name: str, node: ExitRecord
) -> ExitRecord:
    reason = f"{name}: {node.reason}" if node.reason else name
    return ExitRecord(
        job_id,
        attempt,
        node.outcome,
        started,
        ended,
        exit_code=node.exit_code,
        signal=node.signal,
        reason=reason[:REASON_CHARS],
    )


def stop_step(environ: Mapping[str, str]) -> None:
    """SIGTERM to every task of the job's steps (not to the batch step: us)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return
    # Should this fail, Slurm's own end of the job (its time limit, scancel) ends the step.
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            ["scancel", "--signal=TERM", job],
            env=dict(environ),
            capture_output=True,
            timeout=SCONTROL_TIMEOUT,
            check=False,
        )
