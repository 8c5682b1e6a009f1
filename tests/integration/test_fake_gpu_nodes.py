"""The device nodes a root trainqd makes for simulated GPUs (trainqd/gpus/fake_nodes.py) on a
state directory too full to record them (a tmpfs mounted for the test)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from trainqd.gpus.fake_nodes import make_nodes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def test_nodes_that_cannot_be_recorded_are_not_made(tmp_path: Path) -> None:
    """A full disk under the state dir: trainqd runs without nodes rather than make some it
    could not tell as its own after a crash."""
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(state)], check=True)
    try:
        with contextlib.suppress(OSError), (state / "filler").open("wb") as filler:
            while True:
                filler.write(b"x" * 4096)
                filler.flush()
        record = state / "record.json"
        nodes = make_nodes(tmp_path / "dev", [0, 1], record)
        assert nodes.unrecorded is not None
        assert nodes.unrecorded.startswith(f"cannot record them in {record}: "), nodes
        assert (nodes.owned, nodes.foreign) == ([], [])
        assert not (tmp_path / "dev").exists()
        (tmp_path / "dev").mkdir()
        nodes = make_nodes(tmp_path / "dev", [0, 1], record)
        assert nodes.unrecorded is not None
        assert list((tmp_path / "dev").iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)
