"""The device nodes a root trainqd makes for simulated GPUs (trainqd/gpus/fake_nodes.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainqd.gpus.fake import FakeGpuBackend
from trainqd.gpus.fake_nodes import NVIDIA_MAJOR, NodeError, make_nodes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def host_node(path: Path, minor: int) -> None:
    """A node as a driver (or anyone but trainq) makes it."""
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))


def test_the_backend_makes_its_nodes_and_removes_them_on_close(tmp_path: Path) -> None:
    backend = FakeGpuBackend.with_count(2)
    directory, record = tmp_path / "dev", tmp_path / "record.json"
    old_umask = os.umask(0o077)  # a strict umask does not narrow the nodes' mode
    try:
        assert backend.make_device_nodes(directory, record).foreign == []
    finally:
        os.umask(old_umask)
    found = {path.name: path.lstat() for path in directory.iterdir()}
    assert sorted(found) == ["nvidia0", "nvidia1", "nvidiactl"]
    for name, minor in [("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)]:
        assert stat.S_ISCHR(found[name].st_mode)
        assert found[name].st_rdev == os.makedev(NVIDIA_MAJOR, minor)
        assert stat.S_IMODE(found[name].st_mode) == 0o666
        assert found[name].st_uid == 0
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    backend.close()
    assert not directory.exists()
    assert not record.exists()


def test_nodes_already_there_are_kept_and_anything_else_is_refused(tmp_path: Path) -> None:
    record, no_driver = tmp_path / "record.json", tmp_path / "no-driver"
    host_node(tmp_path / "nvidia0", 0)
    made = make_nodes(tmp_path, [0], record, driver=no_driver)
    assert made.owned == [tmp_path / "nvidiactl"]  # nvidia0 was the host's: not ours to remove
    assert made.foreign == [tmp_path / "nvidia0"]
    made.remove()
    assert (tmp_path / "nvidia0").exists()
    (tmp_path / "nvidiactl").symlink_to("/etc/passwd")
    with pytest.raises(NodeError, match="nvidiactl is there and is not the device 195:255"):
        make_nodes(tmp_path, [0, 1], record, driver=no_driver)
    assert not (tmp_path / "nvidia1").exists()  # nothing half made is left behind
    assert (tmp_path / "nvidiactl").is_symlink()
    assert stat.S_IMODE(Path("/etc/passwd").stat().st_mode) == 0o644


def test_the_nodes_of_a_killed_trainqd_are_the_next_ones_to_remove(tmp_path: Path) -> None:
    """A trainqd killed with SIGKILL never removes its nodes; the next one knows them for
    its own by the record, and removes them, and a half-made one, at its clean stop, while
    a node the host made meanwhile in place of one of them stays."""
    directory, record = tmp_path / "dev", tmp_path / "record.json"
    FakeGpuBackend.with_count(3).make_device_nodes(directory, record)  # never closed
    os.unlink(directory / "nvidia2")
    host_node(directory / "nvidia2", 2)  # the host's now
    host_node(directory / ".trainq-nvidia3", 3)  # killed while making it
    again = FakeGpuBackend.with_count(4)
    assert again.make_device_nodes(directory, record).foreign == [directory / "nvidia2"]
    assert (directory / "nvidia3").exists()
    assert not (directory / ".trainq-nvidia3").exists()
    again.close()
    assert sorted(path.name for path in directory.iterdir()) == ["nvidia2"]
    assert not record.exists()


def test_a_node_trainq_did_not_make_is_refused_where_a_driver_is_loaded(tmp_path: Path) -> None:
    """With a driver loaded, /dev/nvidia0 opens a real GPU: simulated GPUs in that directory
    would hand it to jobs as someone else's, so trainqd refuses to start."""
    directory, record, driver = tmp_path / "dev", tmp_path / "record.json", tmp_path / "driver"
    directory.mkdir()
    driver.mkdir()
    host_node(directory / "nvidia0", 0)
    with pytest.raises(NodeError, match=r"nvidia0: not made by trainq, and an NVIDIA driver"):
        make_nodes(directory, [0, 1], record, driver=driver)
    assert sorted(path.name for path in directory.iterdir()) == ["nvidia0"]
    assert not record.exists()


def test_nodes_a_previous_configuration_made_are_removed_at_start(tmp_path: Path) -> None:
    """Fewer GPUs, or another directory, than the trainqd killed before: what it made and
    this one does not make again goes at once."""
    record = tmp_path / "record.json"
    FakeGpuBackend.with_count(3).make_device_nodes(tmp_path / "old", record)  # never closed
    FakeGpuBackend.with_count(2).make_device_nodes(tmp_path / "dev", record)  # never closed
    assert not (tmp_path / "old").exists()
    again = FakeGpuBackend.with_count(1)
    again.make_device_nodes(tmp_path / "dev", record)
    assert sorted(path.name for path in (tmp_path / "dev").iterdir()) == ["nvidia0", "nvidiactl"]
    again.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_a_record_that_is_not_one_is_a_refusal_in_one_line(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    record.write_text('{"/dev/nvidia0": "not numbers"}')
    with pytest.raises(NodeError, match=r"is not a record of trainq's device nodes") as refused:
        make_nodes(tmp_path / "dev", [0], record)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "dev").exists()
