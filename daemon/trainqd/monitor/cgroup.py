"""Each attempt in a cgroup of its own, so that every process of a job ends with it.

A process can leave its parent's tree (double fork, setsid), its session, its group and the
environment it inherited, but not its cgroup: moving a process needs write access to the
cgroup.procs file of the common ancestor of both cgroups, and every cgroup here is root's.
So the kill that ends an attempt (`cgroup.kill`) reaches whatever its processes did, even
after its monitor was killed (trainqd kills the cgroup of a lost attempt before the job runs
again). Where the monitor keeps running, its tree kill (procfs.py) ends the job first, with
SIGTERM and a grace; the cgroup is the final SIGKILL and its proof that nothing is left.

Where the v2 tree is (from the mount table, not a fixed path: /sys/fs/cgroup on a pure v2
host, /sys/fs/cgroup/unified on a hybrid one) and where the attempt's cgroup lives:

    <v2 mount>/<trainqd's cgroup>/trainq-<instance>/job-<id>-<attempt>

<trainqd's cgroup> is the one trainqd's fork server runs in (forkserver.py);
<instance> is a digest of the jobs directory, so two trainqds in one cgroup (a personal one
and a service, or tests) never share a name. No controller is enabled on the way down:
cgroup.kill, cgroup.procs and cgroup.events need none, and without controllers a cgroup may
hold processes beside child cgroups.

Only root may make and enter these cgroups. Without root or a writable v2 tree, jobs are
followed by their process tree alone (see docs/security.md).

Standard library only: the monitor imports this; trainqd uses it too (leftovers, start-up).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time

MOUNTINFO = "/proc/self/mountinfo"
SELF_CGROUP = "/proc/self/cgroup"
SUBTREE_PREFIX = "trainq-"
ATTEMPT_PREFIX = "job-"
# The fork server's scratch cgroup for its probe (forkserver.py), removed at once.
PROBE_PREFIX = "probe-"
_POLL_FIRST, _POLL_MAX = 0.002, 0.05


class Unavailable(Exception):
    """No cgroup for jobs here: the reason, in a few words."""


def _unescape(field: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash in octal (\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError as exc:
        raise Unavailable(f"cannot read {path}: {exc.strerror}") from None


def v2_mount() -> tuple[str, str]:
    """(mount point, root within the hierarchy) of the first cgroup2 mount."""
    for line in _lines(MOUNTINFO):
        before, sep, after = line.partition(" - ")
        fields = before.split()
        if sep and after.split(" ", 1)[0] == "cgroup2" and len(fields) >= 5:
            return _unescape(fields[4]), _unescape(fields[3])
    raise Unavailable("no cgroup v2 tree is mounted")


def own_cgroup() -> str:
    """This process's cgroup in the v2 hierarchy ("0::/path" in /proc/self/cgroup)."""
    for line in _lines(SELF_CGROUP):
        if line.startswith("0::/"):
            return line[3:]
    raise Unavailable("this process has no cgroup v2 membership")


def own_cgroup_dir() -> str:
    """The directory of this process's cgroup, under the v2 mount."""
    mount, root = v2_mount()
    path = own_cgroup()
    if root != "/":
        if path != root and not path.startswith(root + "/"):
            raise Unavailable(f"this process's cgroup {path} is outside the mounted v2 tree")
        path = path[len(root) :] or "/"
    return os.path.normpath(mount + path)


def subtree_name(jobs_dir: str) -> str:
    digest = hashlib.sha256(os.path.normpath(os.path.abspath(jobs_dir)).encode()).hexdigest()
    return SUBTREE_PREFIX + digest[:12]


def jobs_dir_of(ml_root: str) -> str:
    """<state>/jobs, from a job's ml root <state>/jobs/<id>/ml or a node's,
    <state>/jobs/<id>/nodes/<host> (jobdir.py's layout; a job's id is never "nodes")."""
    parent = os.path.dirname(os.path.normpath(ml_root))
    if os.path.basename(parent) == "nodes":
        parent = os.path.dirname(parent)
    return os.path.dirname(parent)


def attempt_name(job_id: int, attempt: int) -> str:
    return f"{ATTEMPT_PREFIX}{job_id}-{attempt}"


def subtree(jobs_dir: str, home: str | None = None) -> str:
    """The cgroup that holds the attempts of the trainqd whose jobs are in `jobs_dir`."""
    return os.path.join(home or own_cgroup_dir(), subtree_name(jobs_dir))


def attempt_path(ml_root: str, job_id: int, attempt: int, home: str | None = None) -> str:
    return os.path.join(subtree(jobs_dir_of(ml_root), home), attempt_name(job_id, attempt))


# -- one cgroup ----------------------------------------------------------------------------


def populated(path: str) -> bool:
    """Whether a process is left in the cgroup or below (False once it is gone)."""
    try:
        with open(os.path.join(path, "cgroup.events"), encoding="ascii") as f:
            return "populated 1" in f.read()
    except FileNotFoundError:
        return False


def wait_empty(path: str, timeout: float) -> bool:
    """Wait until no process is left in the cgroup; whether that happened in time."""
    deadline = time.monotonic() + timeout
    delay = _POLL_FIRST
    while populated(path):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_MAX)
    return True


def members(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
            return [int(line) for line in f.read().split()]
    except FileNotFoundError:
        return []


def kill(path: str, timeout: float) -> list[int]:
    """SIGKILL every process in the cgroup and below, and wait for them to be gone; the
    pids left after `timeout` (a process stuck in the kernel), normally none."""
    if not os.path.isdir(path):
        return []
    try:
        with open(os.path.join(path, "cgroup.kill"), "w", encoding="ascii") as f:
            f.write("1")
    except FileNotFoundError:  # before Linux 5.14: one by one, until none is left
        _kill_members(path, timeout)
    if wait_empty(path, timeout):
        return []
    return members(path)


def _kill_members(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = members(path)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(_POLL_FIRST)


def remove(path: str) -> bool:
    """Remove an empty attempt cgroup, and its trainqd's subtree if no other attempt is
    left in it (a monitor about to make its cgroup there tries again); whether the
    attempt's is gone."""
    with contextlib.suppress(OSError):  # a job of several nodes: a cgroup per node inside
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    with contextlib.suppress(OSError):  # busy while other attempts run: kept
        os.rmdir(os.path.dirname(path))
    return True


# -- the monitor's side --------------------------------------------------------------------

NODE_PREFIX = "algo-"


def enter_node(node: str) -> None:
    """Move the calling process (a node's monitor, root, in its gang's attempt cgroup) into
    a cgroup of the node's own inside it, so its device program is the node's (devices.py);
    the attempt's cgroup.kill still reaches it."""
    if os.geteuid() != 0:
        raise Unavailable("the monitor does not run as root")
    here = own_cgroup_dir()
    if not os.path.basename(here).startswith(ATTEMPT_PREFIX):
        raise Unavailable("the gang is not in an attempt's cgroup")
    path = os.path.join(here, node)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as f:
            f.write("0")
    except OSError as exc:
        raise Unavailable(f"cannot use {path}: {exc.strerror or exc}") from None


def _make(path: str, tries: int = 3, fresh: bool = False) -> None:
    for left in reversed(range(tries)):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path)
        except FileExistsError:
            # An earlier launch of this very attempt died before its monitor ran: emptied.
            kill(path, 5.0)
            if not fresh:
                return
            # And made anew: the kernel kills a child cloned into a cgroup that was ever
            # killed (it compares the kill counts of the parent's and the child's cgroups).
            os.rmdir(path)
            continue
        except FileNotFoundError:  # the subtree was removed meanwhile, being empty
            if not left:
                raise
            continue
        return


def make_attempt(ml_root: str, job_id: int, attempt: int, home: str | None = None) -> str:
    """Make the attempt's cgroup (as root), for a monitor to be born in (forkserver.py)."""
    if os.geteuid() != 0:
        raise Unavailable("not root")
    path = attempt_path(ml_root, job_id, attempt, home)
    try:
        _make(path, fresh=True)
    except OSError as exc:
        raise Unavailable(f"cannot make {path}: {exc.strerror or exc}") from None
    return path


def _born_home(here: str, ml_root: str, job_id: int, attempt: int) -> str | None:
    """The home cgroup, if `here` (the caller's cgroup) is already the attempt's own: its
    monitor was born in it (cgroupfork.py)."""
    subtree_dir = os.path.dirname(here)
    if os.path.basename(here) == attempt_name(job_id, attempt) and os.path.basename(
        subtree_dir
    ) == subtree_name(jobs_dir_of(ml_root)):
        return os.path.dirname(subtree_dir)
    return None


class AttemptCgroup:
    """The cgroup a monitor was born in, or moved itself into, before it started anything
    of the job, so that every child inherits it. The monitor keeps two descriptors opened
    while it was root, because a subprocess job's monitor runs on as the job's owner, who
    may write to neither file (the kernel checks the rights of whoever opened them): its
    home cgroup's cgroup.procs, to leave before the kill, and the attempt's cgroup.kill."""

    def __init__(self, path: str, home_procs_fd: int, kill_fd: int) -> None:
        self.path = path
        self._home_procs_fd = home_procs_fd
        self._kill_fd = kill_fd

    @classmethod
    def enter(cls, ml_root: str, job_id: int, attempt: int) -> AttemptCgroup:
        """Make the attempt's cgroup and move the calling process into it (as root), unless
        the process was born in it."""
        if os.geteuid() != 0:
            raise Unavailable("the monitor does not run as root")
        here = own_cgroup_dir()
        born_home = _born_home(here, ml_root, job_id, attempt)
        home = born_home or here
        path = attempt_path(ml_root, job_id, attempt, home)
        home_fd = kill_fd = -1
        try:
            if born_home is None:
                _make(path)
            home_fd = os.open(os.path.join(home, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            with contextlib.suppress(FileNotFoundError):  # no cgroup.kill before Linux 5.14
                kill_fd = os.open(os.path.join(path, "cgroup.kill"), os.O_WRONLY | os.O_CLOEXEC)
            if born_home is None:
                with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as f:
                    f.write("0")  # "0": the writer itself
        except OSError as exc:
            for fd in (home_fd, kill_fd):
                if fd >= 0:
                    os.close(fd)
            if born_home is None:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise Unavailable(f"cannot use {path}: {exc.strerror or exc}") from None
        return cls(path, home_fd, kill_fd)

    def end(self, drain: float, kill_wait: float) -> list[int] | None:
        """Leave the cgroup, give what is left `drain` seconds to end on its own, kill the
        rest and wait up to `kill_wait` seconds for it; the pids that would not die, or
        None if the monitor could not leave (trainqd kills the cgroup once it has ended)."""
        if drain <= 0 and members(self.path) == [os.getpid()]:
            # Nothing of the job is left, and only root can move a process in: leaving would
            # be the attempt's second migration, which waits out an RCU grace period (ms, on
            # the dispatch path). trainqd removes the cgroup once this process has exited.
            self.close()
            return []
        try:
            os.write(self._home_procs_fd, b"0")
        except OSError:
            self.close()
            return None
        try:
            if drain > 0 and wait_empty(self.path, drain):
                return []
            if self._kill_fd >= 0:
                os.write(self._kill_fd, b"1")
            else:
                _kill_members(self.path, kill_wait)
            if wait_empty(self.path, kill_wait):
                return []
            return members(self.path)
        finally:
            self.close()
            # A container job's monitor is root and tidies up; an owner's cannot (the
            # directory is root's), and trainqd removes it when the monitor has ended.
            remove(self.path)

    def close(self) -> None:
        for fd in (self._home_procs_fd, self._kill_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._home_procs_fd = self._kill_fd = -1
