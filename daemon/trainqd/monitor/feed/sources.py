"""Which files a Pipe mode channel feeds, and in which order each epoch.

A source is a file, or a directory standing for every regular file under it, the way an S3
prefix stands for every object under it: sorted by relative path, bytewise (S3 lists keys
in UTF-8 byte order), or shuffled per epoch when the channel has a `shuffle_seed`.
Symbolic links to files are followed; links to directories are not descended, so a link
loop or a link to `/` cannot make a channel endless.

Paths are bytes throughout: a file name need not be valid UTF-8 to be fed.
"""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Sequence


class FeedError(Exception):
    """What stops a channel from being fed, as the one line the monitor reports."""


def show(path: bytes) -> str:
    """A path for a one-line report: quoted when it holds a newline or anything unprintable."""
    text = os.fsdecode(path)
    return text if text.isprintable() else ascii(text)


def list_files(source: str) -> list[bytes]:
    """The files of `source`, in relative path order. Raises FeedError."""
    root = os.fsencode(source)
    try:
        mode = os.stat(root).st_mode
    except OSError as exc:
        raise FeedError(f"cannot read {show(root)}: {exc.strerror}") from None
    if stat.S_ISREG(mode):
        return [root]
    if not stat.S_ISDIR(mode):
        raise FeedError(f"{show(root)} is neither a regular file nor a directory")
    relative: list[bytes] = []
    pending = [b""]
    while pending:
        subdir = pending.pop()
        directory = os.path.join(root, subdir) if subdir else root
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except OSError as exc:
            raise FeedError(f"cannot list {show(directory)}: {exc.strerror}") from None
        for entry in entries:
            name = os.path.join(subdir, entry.name) if subdir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(name)
                elif entry.is_file():  # follows links; a dangling one is no file
                    relative.append(name)
            except OSError as exc:
                raise FeedError(f"cannot read {show(entry.path)}: {exc.strerror}") from None
    relative.sort()
    return [os.path.join(root, name) for name in relative]


def epoch_order(files: Sequence[bytes], shuffle_seed: int | None, epoch: int) -> Sequence[bytes]:
    """The order of `files` in `epoch`: as listed, or a shuffle fixed by (seed, epoch)."""
    if shuffle_seed is None:
        return files
    order = list(files)
    # A string seed is hashed with SHA-512, so every run gets the same order; an int seed
    # would lose its sign (Random(-5) is Random(5)).
    rng = random.Random(f"trainq-shuffle:{shuffle_seed}:{epoch}")  # noqa: S311 (not secrets)
    rng.shuffle(order)
    return order
