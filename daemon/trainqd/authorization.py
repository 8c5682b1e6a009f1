"""Every decision of who may do what, in one place (docs/security.md).

Anyone may list and show jobs, but a job's failure reasons, environment values and
hyperparameter values are shown whole to its owner and the admins alone; only a job's owner,
root, or a member of `admin_group` may stop it or read its logs; only root and the admins may
run an image as root. A trainqd that is not root can only run jobs as its own user, so it
refuses everyone else's submissions. The API, admission and the scheduler's parts all ask
`Authorizer`; none decides on its own.
"""

from __future__ import annotations

import grp
import os
import pwd

from trainq.core.errors import Forbidden
from trainqd.identity import account
from trainqd.store import JobOwner, JobRow


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

    def owner_for_submit(self, uid: int) -> JobOwner:
        """Whom a submission by `uid` runs as; Forbidden if this trainqd cannot run it."""
        acct = account(uid)
        if self.daemon_uid not in (0, uid):
            me = pwd.getpwuid(self.daemon_uid).pw_name
            raise Forbidden(
                f"this trainqd runs as {me} and can run only {me}'s jobs; "
                "use the workstation's trainqd service"
            )
        return JobOwner(uid=acct.uid, gid=acct.gid, user=acct.user)

    def is_admin(self, uid: int) -> bool:
        if uid == 0:
            return True
        if self.admin_gid is None:
            return False
        try:
            return self.admin_gid in account(uid).groups
        except Forbidden:
            return False

    def may_manage(self, uid: int, job: JobRow) -> bool:
        """The job's owner and the admins may stop it, read its logs and see it whole."""
        return uid == job.owner.uid or self.is_admin(uid)

    def require_manage(self, uid: int, job: JobRow, action: str = "stop") -> None:
        if self.may_manage(uid, job):
            return
        who = "root" + (f" or members of {self.admin_group}" if self.admin_group else "")
        raise Forbidden(
            f"job {job.id} belongs to {job.owner.user}; only its owner or {who} may {action} it"
        )

    def may_see_details(self, uid: int, job: JobRow) -> bool:
        """Whether `uid` reads the job's failure reasons, environment and hyperparameter
        values whole (views.py hides them from everyone else)."""
        return self.may_manage(uid, job)

    def require_run_as_root(self, uid: int) -> None:
        if not self.is_admin(uid):
            raise Forbidden(
                "run_as_root runs the image as root on this host's files; only root or the "
                "admin group may ask for it"
            )
