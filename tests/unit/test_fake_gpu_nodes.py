"""The device nodes a root trainqd makes for simulated GPUs (trainqd/gpus/fake_nodes.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainqd.gpus.fake import FakeGpuBackend
from trainqd.gpus.fake_nodes import NVIDIA_MAJOR, NodeError, make_nodes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def test_the_backend_makes_its_nodes_and_removes_them_on_close(tmp_path: Path) -> None:
    backend = FakeGpuBackend.with_count(2)
    directory = tmp_path / "dev"
    old_umask = os.umask(0o077)  # a strict umask does not narrow the nodes' mode
    try:
        backend.make_device_nodes(directory)
    finally:
        os.umask(old_umask)
    found = {path.name: path.lstat() for path in directory.iterdir()}
    assert sorted(found) == ["nvidia0", "nvidia1", "nvidiactl"]
    for name, minor in [("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)]:
        assert stat.S_ISCHR(found[name].st_mode)
        assert found[name].st_rdev == os.makedev(NVIDIA_MAJOR, minor)
        assert stat.S_IMODE(found[name].st_mode) == 0o666
        assert found[name].st_uid == 0
    backend.close()
    assert not directory.exists()


def test_nodes_already_there_are_kept_and_anything_else_is_refused(tmp_path: Path) -> None:
    os.mknod(tmp_path / "nvidia0", 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, 0))
    made = make_nodes(tmp_path, [0])
    assert made == [tmp_path / "nvidiactl"]  # nvidia0 was the host's: not ours to remove
    (tmp_path / "nvidiactl").unlink()
    (tmp_path / "nvidiactl").symlink_to("/etc/passwd")
    with pytest.raises(NodeError, match="nvidiactl is there and is not the device 195:255"):
        make_nodes(tmp_path, [0, 1])
    assert not (tmp_path / "nvidia1").exists()  # nothing half made is left behind
    assert (tmp_path / "nvidiactl").is_symlink()
    assert stat.S_IMODE(Path("/etc/passwd").stat().st_mode) == 0o644
