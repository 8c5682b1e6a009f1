"""Who a uid is: the account a job runs as (docs/architecture.md, docs/security.md).

A request is attributed to the uid the kernel reports for the socket's peer (SO_PEERCRED),
never to anything the client claims. What that uid may do is decided in authorization.py.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass

from trainq.core.errors import Forbidden
from trainqd.store import JobOwner


@dataclass(frozen=True)
class Account:
    """A user as jobs run: credentials and the login basics a trainer expects."""

    uid: int
    gid: int
    user: str
    home: str
    shell: str
    groups: tuple[int, ...]


# Accounts change rarely and are read on every submission (the group list alone walks the
# group database): looked up at most once per uid in this many seconds.
ACCOUNT_FRESH = 10.0
_accounts: dict[int, tuple[float, Account]] = {}


def account(uid: int) -> Account:
    now = time.monotonic()
    cached = _accounts.get(uid)
    if cached is not None and now - cached[0] < ACCOUNT_FRESH:
        return cached[1]
    found = _lookup(uid)
    _accounts[uid] = (now, found)
    return found


def _lookup(uid: int) -> Account:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        raise Forbidden(
            f"uid {uid} has no account on this host; trainq runs jobs as their submitter"
        ) from None
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    return Account(
        uid=uid,
        gid=entry.pw_gid,
        user=entry.pw_name,
        home=entry.pw_dir or "/",
        shell=entry.pw_shell,
        groups=groups,
    )


def job_account(owner: JobOwner) -> Account:
    """The owner's account now; a user removed since submitting still runs with the
    uid and gid recorded at submit."""
    try:
        return account(owner.uid)
    except Forbidden:
        return Account(owner.uid, owner.gid, owner.user, "/", "/bin/sh", (owner.gid,))
