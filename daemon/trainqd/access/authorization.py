"""Every decision of who may do what, in one place (docs/security.md).

Anyone may list and show jobs, but a job's failure reasons, environment values and
hyperparameter values are shown whole to its owner and the admins alone (with
`private_data`, also its name, command or image, directory, channels and the names of its
hyperparameters and environment: `Sight`); only a job's owner,
root, or a member of `admin_group` may stop it, read its logs, hold it, release it, change it
while it waits or remove it once it has ended; a hold an admin placed is released by an admin
alone; only root and the admins may run an image as root, drain or resume GPUs, or boost a
job above other users' work. A trainqd that is not root can only run jobs as its own user, so it
refuses everyone else's submissions. The API, admission and the scheduler's parts all ask
`Authorizer`; none decides on its own.
"""

from __future__ import annotations

import enum
import grp
import os
import pwd

from trainq.core.errors import Forbidden
from trainqd.access.identity import account
from trainqd.planning.classes import JobClass
from trainqd.store import JobOwner, JobRow


class Sight(enum.Enum):
    """How much of a job a caller sees; views.py applies it."""

    WHOLE = enum.auto()  # its owner and the admins
    SHARED = enum.auto()  # others: no failure reasons, environment or hyperparameter values
    PRIVATE = enum.auto()  # others under `private_data`: nothing of what the job runs either


class Authorizer:
    def __init__(self, admin_group: str | None, *, private_data: bool = False) -> None:
        self.daemon_uid = os.geteuid()
        self.private_data = private_data
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

    def _admins(self) -> str:
        return "root" + (f" or members of {self.admin_group}" if self.admin_group else "")

    def require_manage(self, uid: int, job: JobRow, action: str = "stop") -> None:
        if self.may_manage(uid, job):
            return
        raise Forbidden(
            f"job {job.id} belongs to {job.owner.user}; "
            f"only its owner or {self._admins()} may {action} it"
        )

    def require_release(self, uid: int, job: JobRow) -> None:
        """The owner may release their own hold; a hold placed by anyone else (an admin, as
        only the owner and the admins may hold) is an admin's to release."""
        self.require_manage(uid, job, "release")
        if job.held_by in (None, job.owner.user) or self.is_admin(uid):
            return
        raise Forbidden(
            f"job {job.id} was held by {job.held_by}, an admin; only {self._admins()} "
            "may release it"
        )

    def require_admin(self, uid: int, action: str) -> None:
        """Acts on the whole workstation (draining GPUs, raising a job above other users'
        work) are the admins' alone."""
        if not self.is_admin(uid):
            raise Forbidden(f"only {self._admins()} may {action}")

    def may_see_details(self, uid: int, job: JobRow) -> bool:
        """Whether `uid` reads the job's failure reasons, environment and hyperparameter
        values whole (views.py hides them from everyone else)."""
        return self.may_manage(uid, job)

    def sight(self, uid: int, job: JobRow) -> Sight:
        """How much of the job `uid` sees in every answer that carries it."""
        if self.may_see_details(uid, job):
            return Sight.WHOLE
        return Sight.PRIVATE if self.private_data else Sight.SHARED

    def require_run_as_root(self, uid: int) -> None:
        if not self.is_admin(uid):
            raise Forbidden(
                "run_as_root runs the image as root on this host's files; only root or the "
                "admin group may ask for it"
            )

    def require_class(self, uid: int, name: str, job_class: JobClass) -> None:
        """A class with `users` or `groups` is theirs (and the admins') alone."""
        if not job_class.restricted or self.is_admin(uid):
            return
        acct = account(uid)
        if acct.user in (job_class.users or ()) or str(uid) in (job_class.users or ()):
            return
        for group in job_class.groups or ():
            try:
                gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
            except KeyError:
                continue
            if gid in acct.groups:
                return
        who = ", ".join([*(job_class.users or ()), *(f"group {g}" for g in job_class.groups or ())])
        raise Forbidden(f"class {name!r} is for {who or 'nobody'}; {acct.user} may not use it")
