"""Who is asking, and what they may do (DESIGN §7; the workstation issue).

A request is attributed to the uid the kernel reports for the socket's peer (SO_PEERCRED),
never to anything the client claims. Anyone may list and show jobs; only a job's owner,
root, or a member of `admin_group` may stop or change it. A trainqd that is not root can
only run jobs as its own user, so it refuses everyone else's submissions.
"""

from __future__ import annotations

import grp
import os
import pwd
import time
from dataclasses import dataclass

from trainq.core.errors import Forbidden
from trainqd.store import JobRow, Owner


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


def job_account(owner: Owner) -> Account:
    """The owner's account now; a user removed since submitting still runs with the
    uid and gid recorded at submit."""
    try:
        return account(owner.uid)
    except Forbidden:
        return Account(owner.uid, owner.gid, owner.user, "/", "/bin/sh", (owner.gid,))


class Authorizer:
    def __init__(self, admin_group: str | None) -> None:
        self.daemon_uid = os.geteuid()
        self.admin_gid: int | None = None
        if admin_group is not None:
            try:
                self.admin_gid = grp.getgrnam(admin_group).gr_gid
            except KeyError:
                raise ValueError(f"admin_group {admin_group!r} does not exist") from None
        self.admin_group = admin_group

    def owner_for_submit(self, uid: int) -> Owner:
        acct = account(uid)
        if self.daemon_uid not in (0, uid):
            me = pwd.getpwuid(self.daemon_uid).pw_name
            raise Forbidden(
                f"this trainqd runs as {me} and can run only {me}'s jobs; "
                "use the workstation's trainqd service"
            )
        return Owner(uid=acct.uid, gid=acct.gid, user=acct.user)

    def is_admin(self, uid: int) -> bool:
        if uid == 0:
            return True
        if self.admin_gid is None:
            return False
        try:
            return self.admin_gid in account(uid).groups
        except Forbidden:
            return False

    def require_manage(self, uid: int, job: JobRow, action: str = "stop") -> None:
        if uid == job.owner.uid or self.is_admin(uid):
            return
        who = "root" + (f" or members of {self.admin_group}" if self.admin_group else "")
        raise Forbidden(
            f"job {job.id} belongs to {job.owner.user}; only its owner or {who} may {action} it"
        )
