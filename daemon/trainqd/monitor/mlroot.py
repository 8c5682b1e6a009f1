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
    path = os.path.join(data_dir, channel.name)
    _remove(path)
    base = os.path.basename(channel.source.rstrip("/"))
    if channel.view == "link":
        if channel.source_is_dir:
            os.symlink(channel.source, path)
        else:
            os.mkdir(path)
            os.symlink(channel.source, os.path.join(path, base))
    else:
        os.mkdir(path)
        if not channel.source_is_dir:
            # The engine mounts a single file onto a file.
            with open(os.path.join(path, base), "x"):
                pass


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
