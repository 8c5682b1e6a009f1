"""The step of a job of several nodes under Slurm (trainqd.backends.slurm_nodes): srun's
command line, and the gang's end from its nodes' exit records; tests/slurm runs both."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from trainq.core.outcomes import Ending, ExitRecord, NodeEnd, Outcome
from trainq.core.spec import parse_spec
from trainqd.backends import slurm_nodes

SPEC = parse_spec({"command": ["python3", "train.py"], "instance_count": 3})


def write_node(attempt_dir: Path, host: str, record: ExitRecord) -> None:
    where = attempt_dir / "nodes" / host
    where.mkdir(parents=True)
    (where / "exit.json").write_text(json.dumps(asdict(record)))


def test_one_srun_step_of_one_task_per_node_each_told_its_rank() -> None:
    task = ["python3", "-m", "trainqd.run", "spec.json", "--job-dir", "/jobs/7"]
    argv = slurm_nodes.srun_argv(SPEC, task, attempt=2)
    assert argv[:5] == [
        "srun",
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
    ]
    shell = argv.index("/bin/sh")
    assert argv[shell : shell + 3] == ["/bin/sh", "-c", 'exec "$0" "$@" --node "$SLURM_PROCID"']
    assert argv[shell + 3 :] == [*task, "--attempt", "2"]
    copied = slurm_nodes.srun_argv(SPEC, task, attempt=2, copy_output=True)
    assert "--label" in copied
    assert copied[-1] == "--copy-output"


def test_the_gang_ends_as_the_node_that_failed_by_itself(tmp_path: Path) -> None:
    write_node(tmp_path, "algo-1", ExitRecord(7, 1, Outcome.INTERRUPTED, 10.0, 30.0, signal=15))
    write_node(
        tmp_path, "algo-2", ExitRecord(7, 1, Outcome.EXITED, 11.0, 20.0, exit_code=3, reason="boom")
    )
    write_node(tmp_path, "algo-3", ExitRecord(7, 1, Outcome.EXITED, 12.0, 25.0, exit_code=0))
    record = slurm_nodes.gang_record(tmp_path, SPEC, 7, 1)
    assert (record.outcome, record.exit_code, record.reason) == ("exited", 3, "algo-2: boom")
    assert (record.started_at, record.ended_at) == (10.0, 30.0)


def test_the_gang_completes_when_every_node_exited_0(tmp_path: Path) -> None:
    for host in ("algo-1", "algo-2", "algo-3"):
        write_node(tmp_path, host, ExitRecord(7, 1, Outcome.EXITED, 10.0, 20.0, exit_code=0))
    record = slurm_nodes.gang_record(tmp_path, SPEC, 7, 1)
    assert (record.outcome, record.exit_code) == ("exited", 0)


def test_a_stopped_gang_is_stopped_and_a_node_without_a_record_is_lost(tmp_path: Path) -> None:
    for host in ("algo-1", "algo-2", "algo-3"):
        write_node(tmp_path / "a", host, ExitRecord(7, 1, Outcome.STOPPED, 10.0, 20.0, signal=15))
    assert slurm_nodes.gang_record(tmp_path / "a", SPEC, 7, 1).outcome == "stopped"
    write_node(tmp_path / "b", "algo-1", ExitRecord(7, 1, Outcome.EXITED, 10.0, 20.0, exit_code=0))
    write_node(tmp_path / "b", "algo-3", ExitRecord(7, 1, Outcome.EXITED, 10.0, 20.0, exit_code=0))
    lost = slurm_nodes.gang_record(tmp_path / "b", SPEC, 7, 1)
    assert lost.outcome == "lost"
    assert (lost.reason or "").startswith("algo-2: no exit record")


def test_a_record_of_another_attempt_counts_as_none(tmp_path: Path) -> None:
    for host in ("algo-1", "algo-2", "algo-3"):
        write_node(tmp_path, host, ExitRecord(7, 2, Outcome.EXITED, 10.0, 20.0, exit_code=0))
    assert slurm_nodes.gang_record(tmp_path, SPEC, 7, 1).outcome == "lost"


def test_only_a_node_that_failed_by_itself_ends_the_others() -> None:
    assert slurm_nodes.ended_by_itself(Ending(Outcome.EXITED, 1))
    assert slurm_nodes.ended_by_itself(Ending(Outcome.SIGNALED, signal=9))
    assert not slurm_nodes.ended_by_itself(Ending(Outcome.EXITED, 0))
    assert not slurm_nodes.ended_by_itself(Ending(Outcome.STOPPED, signal=15))
    assert not slurm_nodes.ended_by_itself(Ending(Outcome.INTERRUPTED, signal=15))


def test_a_nodes_interface_is_the_one_holding_its_address() -> None:
    assert slurm_nodes.interface_of("127.0.0.1") == "lo"
    assert slurm_nodes.interface_of("127.3.4.5") == "lo"  # all of 127/8 is the loopback's
    assert slurm_nodes.interface_of("192.0.2.1") == ""  # TEST-NET-1: no interface has it


def test_the_gangs_record_keeps_each_nodes_end(tmp_path: Path) -> None:
    # algo-2 failed by itself; srun's SIGTERM ended algo-1 (with the gang, not the host);
    # algo-3 left no record.
    write_node(tmp_path, "algo-1", ExitRecord(7, 1, Outcome.INTERRUPTED, 10.0, 30.0, signal=15))
    write_node(tmp_path, "algo-2", ExitRecord(7, 1, Outcome.EXITED, 11.0, 20.0, exit_code=3))
    record = slurm_nodes.gang_record(tmp_path, SPEC, 7, 1)
    assert record.nodes == (
        NodeEnd("algo-1", Outcome.STOPPED, signal=15),
        NodeEnd("algo-2", Outcome.EXITED, exit_code=3),
        NodeEnd("algo-3", Outcome.LOST),
    )
