"""Everything a monitor does before its trainer runs, in the order that keeps it safe.

subprocess runtime (the monitor becomes the owner; all the job's processes are theirs):
    subreaper -> private mount namespace: read-only data, /opt/ml, /etc/hosts
    -> only the job's GPUs (root only: an eBPF device program on the attempt's cgroup v2,
    a devices cgroup v1) -> owner's credentials, for good
    -> ml root -> [feeder] -> stdout/stderr (pipes the monitor relays: timeline.py)
    -> cwd -> trainer
container runtime (the monitor stays root: the engine needs it):
    ml root, in a child running as the owner -> binds for the engine (mounts.py; channels
    opened by a child running as the owner) -> [feeder, as the owner]
    -> stdout/stderr, chowned to the owner -> engine client

Everything the monitor will run after it drops its privileges is imported before: the owner
need not be able to read the Python installation trainqd runs from.

A container job's monitor is no subreaper: podman's conmon double-forks away from the
client and must outlive it to collect the container's exit; the engine, not the monitor,
owns the container's processes, and `ENGINE rm -f` ends whatever is left of them.

Whatever prevents the start becomes StartFailed with a one-line reason for the record.
"""

from __future__ import annotations

import os
import resource
import stat

from trainqd.monitor import children, device_filter, devices, libc, mounts
from trainqd.monitor.log import log
from trainqd.monitor.mlroot import prepare_ml_root
from trainqd.monitor.owner import drop_to, is_root
from trainqd.monitor.privileges import (
    SAGEMAKER_ROOT,
    ViewUnavailable,
    make_job_view,
    sagemaker_host,
    without_namespace,
)
from trainqd.monitor.process import spawn
from trainqd.monitor.profile import mark
from trainqd.monitor.records import STDERR, STDOUT, Launch
from trainqd.monitor.timeline import TIMELINE, Relay


class StartFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Prepared:
    """A monitor ready to start its trainer: the owner's side is set up."""

    def __init__(self, launch: Launch, children_drop: bool) -> None:
        self.launch = launch
        # Whether forked children must drop to the owner themselves (a root monitor).
        self.children_drop = children_drop
        self.stdout_fd = -1
        self.stderr_fd = -1
        self.relay: Relay | None = None
        # A subprocess job: whether its trainer finds the ml root at /opt/ml (exit record).
        self.opt_ml: bool | None = None

    def start_feeder(self) -> children.Feeder:
        owner = self.launch.owner if self.children_drop else None
        return children.start_feeder(self.launch, owner)

    def start_trainer(self) -> int:
        """Open the output files and start the trainer in a process group of its own."""
        launch = self.launch
        # The trainer writes into pipes; the monitor relays them to the files, stamped. The
        # timeline comes first: a reader that finds stdout without it has an older attempt.
        timeline_fd = _open_output(launch, TIMELINE, os.O_WRONLY)
        self.stdout_fd = _open_output(launch, STDOUT, os.O_WRONLY)
        # Readable too: the record's reason may be the tail of what the trainer wrote.
        self.stderr_fd = _open_output(launch, STDERR, os.O_RDWR)
        self.relay = Relay(self.stdout_fd, self.stderr_fd, timeline_fd)
        mark("outputs opened")
        trainer_stdout, trainer_stderr = self.relay.trainer_ends
        program = launch.argv[0] if launch.argv else ""
        try:
            os.chdir(launch.cwd)
        except OSError as exc:
            raise StartFailed(
                f"cannot start {program!r}: working directory {launch.cwd}: {exc.strerror}"
            ) from None
        try:
            pid = spawn(
                launch.argv,
                launch.env,
                stdout=trainer_stdout,
                stderr=trainer_stderr,
                own_group=True,
            )
        except OSError as exc:
            raise StartFailed(f"cannot start {program!r}: {exc.strerror}") from None
        except ValueError as exc:  # a NUL or "=" where the kernel cannot take one
            raise StartFailed(f"cannot start {program!r}: {exc}") from None
        finally:
            self.relay.started()
        mark("trainer spawned")
        return pid


def prepare(launch: Launch) -> Prepared:
    if launch.runtime == "container":
        if launch.container is None:
            raise StartFailed("a container launch that names no engine")
        return _prepare_container(launch)
    return _prepare_subprocess(launch)


def _prepare_subprocess(launch: Launch) -> Prepared:
    try:
        libc.set_child_subreaper()
    except OSError as exc:  # never seen on Linux >= 3.4; orphans would then escape to init
        log(f"warning: not a subreaper ({exc.strerror}): orphans cannot be followed")
    _make_job_view(launch)
    mark("job view made")
    if is_root():
        _confine_devices(launch)
        mark("devices confined")
    device_filter.forget()  # what the fork server loaded for others, before the drop
    if launch.pipe_channels:
        children.load_feeder()
    owner = launch.owner
    try:
        if is_root() and launch.max_processes:
            # Set while still root, for the monitor and all it starts once it is the owner:
            # the kernel counts every process of the owner's against it at each fork.
            cap = launch.max_processes
            resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
        drop_to(owner.uid, owner.gid, owner.groups)
    except OSError as exc:
        raise StartFailed(f"cannot run as user {owner.user}: {exc}") from None
    mark("privileges dropped")
    try:
        prepare_ml_root(launch)
    except Exception as exc:
        raise StartFailed(f"cannot prepare the ml root: {exc}") from None
    mark("ml root prepared")
    prepared = Prepared(launch, children_drop=False)
    prepared.opt_ml = _ml_root_at_opt_ml(launch.ml_root)
    return prepared


def _ml_root_at_opt_ml(ml_root: str) -> bool:
    """Whether /opt/ml is the ml root, as the trainer will see it (asked as the owner, in the
    trainer's mount namespace): however the view was made, or failed to be, this is what
    the job finds."""
    try:
        return os.path.samestat(os.stat(SAGEMAKER_ROOT), os.stat(ml_root))
    except OSError:
        return False


def _make_job_view(launch: Launch) -> None:
    host = sagemaker_host(launch.ml_files)
    readonly = launch.file_channels if is_root() else []  # read-only views need root
    try:
        if is_root():
            problems = make_job_view(
                launch.owner, readonly, launch.ml_root, host, peers=launch.peers
            )
        else:
            # A personal trainqd's job: /opt/ml and the host name in a user namespace where
            # the kernel allows one. Its data is the owner's own and stays writable.
            problems = make_job_view(
                launch.owner, [], launch.ml_root, host, unprivileged=True, peers=launch.peers
            )
            if launch.file_channels:
                problems.append("no read-only view of the data without root (it stays writable)")
    except ViewUnavailable as exc:
        # The trainer finds its ml root through SAGEMAKER_BASE_DIR and SM_* only.
        problems = [without_namespace(exc, readonly)]
    for problem in problems:
        log(f"warning: {problem}")


def _confine_devices(launch: Launch) -> None:
    try:
        minors = devices.job_minors(launch.env)
        problem = devices.confine(launch.job_id, launch.attempt, minors, launch.ml_root)
    except (OSError, LookupError, ValueError) as exc:
        problem = f"cannot confine the job to its GPUs: {exc}"
    if problem is not None:
        log(f"warning: {problem}")


def _prepare_container(launch: Launch) -> Prepared:
    device_filter.forget()  # a container's engine confines its devices itself
    said = children.prepare_as_owner(launch, launch.owner)
    if said is not None:
        raise StartFailed(f"cannot prepare the ml root: {said}")
    if is_root():
        try:
            mounts.stage(launch)
        except mounts.StagingFailed as exc:
            raise StartFailed(f"cannot mount the job's files: {exc}") from None
        except OSError as exc:
            raise StartFailed(f"cannot mount the job's files: {exc}") from None
    return Prepared(launch, children_drop=is_root())


def _open_output(launch: Launch, name: str, access: int) -> int:
    path = os.path.join(launch.attempt_dir, name)
    flags = access | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise StartFailed(f"cannot create {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StartFailed(f"cannot use {path}: not a regular file")
    # O_NONBLOCK only kept a planted FIFO from blocking the open; the trainer gets a plain
    # descriptor.
    os.set_blocking(fd, True)
    if is_root():
        os.fchown(fd, launch.owner.uid, launch.owner.gid)
    return fd
