"""Whose rights a job runs with: a root monitor becomes the job's owner (here `nobody`)
for good, and File mode sources are read-only for the trainer alone."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.monitor import (
    NOBODY,
    attempt_of,
    give_to,
    run_as_nobody,
    trainer,
)
from trainqd.monitor.records import EXIT_RECORD, MONITOR_LOG, STDERR, STDOUT, FileChannel

pytestmark = pytest.mark.multiuser
NOBODY_IDS = "65534 65534 65534 65534 65534 65534 65534"  # res uid, res gid, groups


def channel(source: Path) -> FileChannel:
    """A File mode channel of a subprocess job on the directory `source`."""
    return FileChannel(name="train", source=str(source), source_is_dir=True, view="link")


def ids_of(pid: int) -> tuple[list[str], list[str]]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split()[1:] for line in status}
    return fields["Uid"], fields["Gid"]


def test_a_job_of_nobody_runs_entirely_as_nobody() -> None:
    with attempt_of(trainer("monitor_whoami.py"), owner=NOBODY) as a:
        give_to(a, NOBODY)
        record = a.start().wait()
        assert record.outcome == "exited", a.stderr()
        assert a.data("whoami").read_text() == NOBODY_IDS
        for path in (
            a.data("mine"),
            a.dir / STDOUT,
            a.dir / STDERR,
            a.dir / EXIT_RECORD,
            a.dir / MONITOR_LOG,
            a.ml_root / "model",
        ):
            info = path.stat()
            assert (info.st_uid, info.st_gid) == (65534, 65534), path
        assert (a.dir / STDOUT).stat().st_mode & 0o777 == 0o600  # the owner's alone


def test_the_monitor_itself_drops_to_the_owner_for_good() -> None:
    with attempt_of(trainer("monitor_checkpointer.py"), owner=NOBODY) as a:
        give_to(a, NOBODY)
        trainer_pid = int(a.start().wait_data("ready"))
        for pid in (a.pid, trainer_pid):
            uids, gids = ids_of(pid)
            assert uids == ["65534"] * 4  # real, effective, saved, filesystem
            assert gids == ["65534"] * 4
        a.stop(grace=10)
        record = a.wait()
        assert record.outcome == "stopped"
        assert (a.ml_root / "checkpoints" / "ckpt").stat().st_uid == 65534


def test_a_readonly_path_is_read_only_for_the_trainer_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o777)
    data.chmod(0o777)
    with attempt_of(trainer("monitor_whoami.py", str(data)), file_channels=[channel(data)]) as a:
        record = a.start().wait()
        assert record.outcome == "exited", a.stderr()
        assert a.data("write-0").read_text() == "EROFS"
        assert a.data("mine").exists()  # the ml root stays writable
    # Outside the job's namespace the same path is writable, and no mount leaked out.
    (data / "written-by-the-host").write_text("x")
    assert str(data) not in Path("/proc/self/mountinfo").read_text()


def test_without_root_the_view_is_skipped_with_a_warning() -> None:
    """A personal trainqd (not root): the monitor cannot drop or make a namespace."""
    with attempt_of([], owner=NOBODY) as a:
        data = a.root / "data"
        data.mkdir()
        give_to(a, NOBODY)
        os.chown(data, 65534, 65534)
        argv = trainer("monitor_whoami.py", str(data))
        a.launch = replace(a.launch, argv=argv, file_channels=[channel(data)])
        done = run_as_nobody(a.launch.to_json())
        assert done.returncode == 0, done.stderr.decode()
        record = a.record()
        assert record is not None
        assert record.outcome == "exited"
        assert a.data("write-0").read_text() == "ok"
        # No drop happened: the ids are those the daemon ran with (no supplementary groups).
        assert a.data("whoami").read_text() == NOBODY_IDS.rsplit(" ", 1)[0]
        warnings = [line for line in a.monitor_log().splitlines() if "warning" in line]
        assert len(warnings) == 1
        assert "no read-only view" in warnings[0]
