"""Lay out a job's ml root for one attempt, with the job owner's rights (docs/architecture.md).

    input/config/{hyperparameters,inputdataconfig,resourceconfig}.json
    input/data/<channel>          File mode: a view of the source; Pipe mode: FIFOs (feeder)
    model/  output/data/  output/intermediate/  checkpoints/  code/

The monitor calls `prepare_ml_root` after it has become the owner (a container job's root
monitor calls it in a child that dropped to the owner first). Nothing here runs as root, so
whatever the owner did to the tree between attempts (links, renamed directories) can only
ever affect the owner's own files. What earlier attempts left in model/, checkpoints/ and
output/data/ stays: that is how a retried trainer resumes.
"""

from __future__ import annotations

import os
import shutil
import stat

from trainq.core.layout import ML_DIRS
from trainqd.monitor.records import FileChannel, Launch


def _remove(path: str) -> None:
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)  # never follows links: a view's targets are left alone


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _file_channel(data_dir: str, channel: FileChannel) -> None:
    """Runs as the owner: what the source is, when trainqd left it open, is what the owner
    finds (`_is_dir`)."""
    path = os.path.join(data_dir, channel.name)
    _remove(path)
    base = os.path.basename(channel.source.rstrip("/"))
    if channel.view == "link":
        if _is_dir(channel):
            os.symlink(channel.source, path)
        else:
            os.mkdir(path)
            os.symlink(channel.source, os.path.join(path, base))
    else:
        os.mkdir(path)
        # Staged (source_is_dir None) the engine mounts a directory onto it; unstaged, a
        # single file onto a file.
        if channel.source_is_dir is False:
            with open(os.path.join(path, base), "x"):
                pass


def _is_dir(channel: FileChannel) -> bool:
    """Asked with the owner's rights. A source the owner cannot reach is laid out as a
    file whatever it is, so the layout tells them nothing; the trainer then meets the
    kernel's refusal when it reads, as with data closed to it after submit."""
    if channel.source_is_dir is not None:
        return channel.source_is_dir
    try:
        return stat.S_ISDIR(os.stat(channel.source).st_mode)
    except OSError:
        return False


def prepare_ml_root(launch: Launch) -> None:
    root = launch.ml_root
    for rel in ML_DIRS:
        # The owner's alone, like the ml root itself (jobdir.py says why).
        os.makedirs(os.path.join(root, rel), mode=0o700, exist_ok=True)
    # The failure file speaks for the attempt that wrote it; a retry starts without one.
    _remove(os.path.join(root, "output", "failure"))
    for rel, text in launch.ml_files.items():
        _write(os.path.join(root, rel), text)
    data_dir = os.path.join(root, "input", "data")
    for channel in launch.file_channels:
        _file_channel(data_dir, channel)
