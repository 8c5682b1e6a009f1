"""The chaos soak's own unix users, made for the run and removed after it.

    tqchaos-ann, tqchaos-ben   ordinary users
    tqchaos-cat                a member of tqchaos-admins, the soak's trainqd's admin group

Accounts of its own, not the multi-user tests' (which other test runs on the machine may be
using at the same moment): the soak checks that no process of its users outlives their jobs,
which only holds if nothing else runs as them. They are made as tests/support/accounts.py
makes its users, and inside its `shared_accounts`, which opens the directories every user
must pass through to run the interpreter and read the repository, and closes them again
when the last one out leaves. One soak runs at a time on a machine (LOCK).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.accounts import Accounts, User, shared_accounts

ADMINS = "tqchaos-admins"
ANN, BEN, CAT = "tqchaos-ann", "tqchaos-ben", "tqchaos-cat"
COMMENT = "trainq chaos soak user (bench/chaos.py)"
LOCK = Path("/run/trainq-chaos-soak.lock")


class Busy(Exception):
    """Another chaos soak runs on this machine."""


def _exists(name: str, group: bool = False) -> bool:
    try:
        (grp.getgrnam if group else pwd.getpwnam)(name)
    except KeyError:
        return False
    return True


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def _create() -> None:
    if not _exists(ADMINS, group=True):
        _run("groupadd", ADMINS)
    for name in (ANN, BEN, CAT):
        if not _exists(name):
            _run("useradd", "--create-home", "--user-group", "--shell", "/bin/sh",
                 "--comment", COMMENT, name)  # fmt: skip
    if CAT not in grp.getgrnam(ADMINS).gr_mem:
        _run("usermod", "--append", "--groups", ADMINS, CAT)


def _remove() -> None:
    for name in (ANN, BEN, CAT):
        if _exists(name):
            # userdel refuses while a process of the user lives: the soak kills them first.
            subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
    if _exists(ADMINS, group=True):
        subprocess.run(["groupdel", ADMINS], capture_output=True, check=False)


@contextlib.contextmanager
def chaos_accounts() -> Iterator[Accounts]:
    """The soak's users (alice, bob and carol of the result are ann, ben and cat)."""
    lock = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Busy("another chaos soak is running on this machine") from None
        with shared_accounts():
            _create()
            try:
                yield Accounts(
                    alice=User.lookup(ANN),
                    bob=User.lookup(BEN),
                    carol=User.lookup(CAT),
                    admins_gid=grp.getgrnam(ADMINS).gr_gid,
                )
            finally:
                _remove()
    finally:
        os.close(lock)
