"""Copy one trial's checkpoints over another's, as their owner (standard library only).

Population based training (tuner.py) resumes a worse trial from a better one's checkpoints.
Both ml roots are the owner's: trainqd never writes inside them itself, so the copy runs in a
short-lived child that drops to the owner first (as `pathcheck` does), and whatever links
the owner planted reach only what the owner could reach anyway. A personal trainqd, or a
root-owned job, copies in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import sys


def copy_checkpoints(source: str, target: str) -> None:
    """Empty `target`, then copy `source`'s files into it (links copied as links)."""
    with os.scandir(target) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)


def main() -> None:
    message = json.loads(sys.stdin.buffer.read())
    if os.getuid() == 0 and message["uid"] != 0:
        os.setgroups(message["groups"])
        os.setresgid(message["gid"], message["gid"], message["gid"])
        os.setresuid(message["uid"], message["uid"], message["uid"])
    copy_checkpoints(message["source"], message["target"])


if __name__ == "__main__":
    main()
