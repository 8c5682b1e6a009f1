"""`build_launch` is a pure function: what it needs of the host comes in `HostFacts`, and
the engine's env file comes back to be written by the caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.access.identity import Account
from trainqd.attempts.contract import Assignment
from trainqd.attempts.engine import Engine
from trainqd.attempts.jobdir import AttemptPaths
from trainqd.attempts.launch import Attempt, HostFacts, LaunchSettings, build_launch, stop_grace
from trainqd.store import JobOwner, JobRow

ALICE = Account(1000, 1000, "alice", "/home/alice", "/bin/sh", (1000,))
SETTINGS = LaunchSettings(
    default_stop_grace_seconds=30.0, default_engine=None, real_gpus=False, instance="t"
)


def job(**spec: object) -> JobRow:
    return JobRow(
        id=7, name=None, state=JobState.PENDING, priority=0,
        owner=JobOwner(1000, 1000, "alice"),
        spec=JobSpec.model_validate({"command": ["train"], **spec}),
        gpus=(), gpu_uuids=(), created_at=1.0, started_at=None, ended_at=None,
        failure_reason=None, stop_reason=None, not_before=None, runtime_used=30.0,
        attempt_count=0, lost_count=0,
    )  # fmt: skip


def attempt(row: JobRow, root: Path, host: HostFacts) -> Attempt:
    paths = AttemptPaths(root, root / "ml", root / "attempts" / "1", root / "attempts" / "1.stop")
    return Attempt(row, 1, Assignment((), ()), ALICE, paths, SETTINGS, host)


def facts(engine: Engine | None = None, dirs: frozenset[str] = frozenset()) -> HostFacts:
    return HostFacts(as_root=False, engine=engine, dir_sources=dirs, daemon_environment={})


def test_a_container_launch_writes_nothing_and_looks_nothing_up(tmp_path: Path) -> None:
    """The engine path and the channel's kind come from the facts, not from the host: an
    engine that does not exist and a "directory" that is not one are taken as given."""
    row = job(
        command=None,
        image="docker.io/library/python:3.12",
        channels={"train": {"source": "/nowhere/data"}},
    )
    engine = Engine("podman", "/nowhere/bin/podman")
    built = build_launch(attempt(row, tmp_path, facts(engine, frozenset({"/nowhere/data"}))), 5.0)
    assert built.launch.argv[0] == "/nowhere/bin/podman"
    assert built.env_file is not None
    path, text = built.env_file
    assert path == str(tmp_path / "attempts" / "1" / "env")
    assert "SM_CHANNELS" in text
    assert [c.source_is_dir for c in built.launch.file_channels] == [True]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_subprocess_launch_has_the_time_limit_and_grace_it_was_given(tmp_path: Path) -> None:
    row = job(max_runtime_seconds=100, stop_grace_seconds=5.0)
    built = build_launch(attempt(row, tmp_path, facts()), 1000.0)
    assert built.env_file is None
    assert built.launch.deadline == pytest.approx(1000.0 + 100 - 30.0)
    assert built.launch.stop_grace_seconds == 5.0 == stop_grace(row, 30.0)
    assert stop_grace(job(), 30.0) == 30.0


def test_a_root_trainqd_leaves_what_a_channel_is_to_the_owners_rights(tmp_path: Path) -> None:
    """Root looks at no channel path: the monitor finds out as the owner, and a container
    gets each staged channel as a directory whatever its source."""
    row = job(
        command=None,
        image="docker.io/library/python:3.12",
        channels={"train": {"source": "/data/weights.bin"}},
    )
    root = HostFacts(
        as_root=True, engine=Engine("podman", "/usr/bin/podman"), dir_sources=frozenset(),
        daemon_environment={},
    )  # fmt: skip
    built = build_launch(attempt(row, tmp_path, root), 5.0)
    assert [c.source_is_dir for c in built.launch.file_channels] == [None]
    mounts = [arg for arg in built.launch.argv if "target=/opt/ml/input/data/" in arg]
    assert len(mounts) == 1
    assert '"target=/opt/ml/input/data/train"' in mounts[0]
    assert "weights.bin" not in mounts[0]
    # As the owner (a personal trainqd), the file is mounted onto a file inside it.
    mine = build_launch(attempt(row, tmp_path, facts(root.engine)), 5.0)
    (own,) = [arg for arg in mine.launch.argv if "target=/opt/ml/input/data/" in arg]
    assert "/opt/ml/input/data/train/weights.bin" in own
