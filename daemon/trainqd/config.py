"""trainqd's configuration: embedded defaults, then the TOML file, then flags.

An unknown key or a bad value is a `ConfigError` whose message is the one line trainqd prints
before it exits: an administrator fixing /etc/trainq/trainqd.toml needs the key and the
problem, not a traceback.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainq.core.paths import SYSTEM_CONFIG, default_daemon_socket, default_state_dir
from trainq.core.spec import describe_validation_error
from trainqd.planning.classes import JobClass
from trainqd.planning.classes import check_name as check_class_name
from trainqd.planning.records import DEFAULT_CLASS

GPU_SPEC_RE = re.compile(r"^(auto|nvml|none|fake:[1-9][0-9]*|fake:/.+)$")
# Linux's capabilities (capabilities(7)), the names `--cap-add` takes with or without CAP_.
CAPABILITIES = frozenset(
    {
        "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
        "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
        "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
        "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
        "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
        "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
        "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
    }
)  # fmt: skip


def listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` of a TCP listener (an IPv6 host in brackets: `[::1]:9835`)."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT such as 127.0.0.1:9835")
    return host, int(port)


class ConfigError(Exception):
    """A configuration trainqd refuses to start with; the message is one line."""


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    socket: Path = Field(default_factory=default_daemon_socket)
    state_dir: Path = Field(default_factory=default_state_dir)
    gpus: str = "auto"
    cpu_slots: Annotated[int, Field(ge=1, le=4096)] = Field(
        default_factory=lambda: os.cpu_count() or 1
    )
    socket_mode: str = "0666"
    socket_group: str | None = None
    admin_group: str | None = None
    # Other users see that a job exists, whose it is, its state and resources, but not what
    # it runs: name, command or image, directory, channels, hyperparameters and environment
    # (as Slurm's PrivateData=jobs; views.py). Its owner and the admins see it whole.
    private_data: bool = False
    default_stop_grace_seconds: Annotated[float, Field(ge=0, le=86400)] = 120.0
    # How long past a stop's grace (a user's, an admin's, an idle stop, a preemption, the
    # time limit) trainqd waits for an attempt's monitor to end it; a monitor still there
    # then (frozen by the job's owner, say) is treated as lost and trainqd ends the attempt
    # itself (watcher.py). The longest a frozen monitor can keep a job's GPUs past its grace;
    # more than an honest monitor's own clean-up takes at worst (about 75 s: monitor/supervise.py).
    end_margin_seconds: Annotated[float, Field(gt=0, le=3600)] = 90.0
    default_engine: Literal["docker", "podman"] | None = None
    max_running_jobs_per_user: Annotated[int, Field(ge=0)] = 0
    max_gpus_per_user: Annotated[int, Field(ge=0)] = 0
    # The most jobs one request may submit (the list form of POST /v1/jobs, a sweep).
    max_jobs_per_submit: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    # The most unfinished jobs (queued, running, stopping) one user may have: each is kept in
    # trainqd's memory and weighed on every scheduling pass, so one user's million queued jobs
    # would slow every request of everyone's. 0 = no limit.
    max_unfinished_jobs_per_user: Annotated[int, Field(ge=0)] = 50_000
    # -- budgets, not just counts (daemon/trainqd/access/budgets.py, docs/security.md) --
    # Channels one job may name: each is a bind mount of a container job, in a mount table
    # the whole host shares.
    max_channels_per_job: Annotated[int, Field(ge=1, le=100_000)] = 64
    # The most one spec may take as stored (its JSON), and the most the specs of one user's
    # unfinished jobs may take together: they live in trainqd's memory and in every listing.
    max_spec_bytes: Annotated[int, Field(ge=4096, le=1 << 30)] = 256 * 1024
    max_unfinished_spec_bytes_per_user: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    # Events (GET /v1/events) are kept for this many days and at most this many (0: no
    # bound of that kind), each job's latest one always while the job is kept.
    event_retention_days: Annotated[float, Field(ge=0, le=36500)] = 30.0
    max_events: Annotated[int, Field(ge=0)] = 1_000_000
    # How often GPUs are re-read while jobs wait: a process trainq did not start may leave a GPU
    # at any time, and NVML offers no event for that.
    gpu_rescan_seconds: Annotated[float, Field(gt=0, le=3600)] = 5.0
    # Where a root trainqd makes device nodes (nvidiaN, 195:N) for `fake:` GPUs, so that a
    # job's GPU confinement can be seen at work; unset: <state_dir>/dev. /dev is allowed.
    fake_gpu_device_dir: Path | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # -- watching GPU use (daemon/trainqd/scheduling/sampling.py) --
    gpu_sample_seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0
    gpu_sample_history: Annotated[int, Field(ge=1, le=100000)] = 360  # samples kept per attempt
    # A running job whose GPUs all stay under this utilization for this long is flagged idle.
    idle_utilization_percent: Annotated[float, Field(ge=0, le=100)] = 5.0
    idle_after_seconds: Annotated[float, Field(gt=0)] = 1800.0
    # What else happens to an idle job: "flag" only (ls, show, top, metrics, an event),
    # "notify" (a warning in trainqd's log too), or "stop" it once it has been idle
    # `idle_stop_after_seconds` more.
    idle_action: Literal["flag", "notify", "stop"] = "flag"
    idle_stop_after_seconds: Annotated[float, Field(ge=0)] = 3600.0
    # A TCP address ("127.0.0.1:9835") serving only GET /metrics to scrapers; off when unset.
    metrics_listen: str | None = None
    # -- the trust boundary (docs/security.md) --
    # Capabilities a container job keeps; every other one is dropped (`--cap-drop=all`).
    container_capabilities: list[str] = Field(default_factory=list)
    # Image references users may run: fnmatch patterns over the whole reference. Registry
    # references and local images only: transports such as oci-archive:, dir: or
    # docker-archive: are refused unless a pattern names them.
    allowed_images: list[str] = Field(default_factory=lambda: ["*"])
    # The API's connections: a global cap that one user cannot fill (each uid gets at most
    # `max_connections_per_user` of it), streams (`logs -f`, events) per uid, and how long an
    # idle keep-alive connection is kept.
    max_connections: Annotated[int, Field(ge=8, le=65536)] = 1024
    max_connections_per_user: Annotated[int, Field(ge=1, le=65536)] = 64
    max_streams_per_user: Annotated[int, Field(ge=1, le=65536)] = 16
    idle_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # How long a client may take to send a whole request (and a new connection its first
    # one): a request dribbled in byte by byte is cut off with a 408.
    request_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0
    # How long the submit-time check of a job's paths (run as the submitter) may take; past it
    # the check is killed and the submission refused with one line.
    path_check_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # -- where jobs run (daemon/trainqd/backends/slurm.py) --
    # "local": on this host, under trainq's monitors. "slurm": every job is handed to Slurm
    # (sbatch as its owner) and followed with squeue every `slurm_poll_seconds`; the
    # state dir must then be on a filesystem the cluster's nodes share.
    backend: Literal["local", "slurm"] = "local"
    slurm_poll_seconds: Annotated[float, Field(gt=0, le=3600)] = 5.0
    slurm_partition: str | None = None  # sbatch --partition; unset: the cluster's default
    # The Python with trainq that the nodes run each step with, as the job's owner (unset:
    # trainqd's own, which users must then be able to run).
    slurm_python: Path | None = None
    # How long one sbatch, squeue or scancel (or the step's interpreter check) may take before
    # it is killed, its process group too, and counted as failed.
    slurm_command_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    # How many processes (threads included) one user's jobs may have at once: a fork bomb in
    # a job then ends at this cap instead of taking every pid from trainqd and the other
    # users. The kernel's RLIMIT_NPROC for subprocess jobs (it counts all of the user's
    # processes, so a user with many of their own may start none), podman's and docker's
    # --pids-limit per container. "auto" is an eighth of the kernel's pid_max, at least 1024;
    # 0 leaves only the kernel's limits.
    max_processes_per_user: Literal["auto"] | Annotated[int, Field(ge=0, le=4194304)] = "auto"
    # -- told when a job ends (daemon/trainqd/scheduling/notifications.py) --
    # A sendmail-compatible command (`["/usr/sbin/sendmail", "-t"]`: the message, headers
    # first, on its stdin) for jobs submitted with `--mail`; unset: no mail, and such jobs
    # are refused. Run as the job's owner, as a job's own `--notify` command is, each for at
    # most `notify_timeout_seconds` (then killed), its output discarded.
    mail_command: Annotated[list[str], Field(min_length=1)] | None = None
    notify_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    # -- a trainer's source copied at submit (daemon/trainqd/attempts/snapshots.py) --
    snapshot_max_bytes: Annotated[int, Field(ge=0)] = 100 * 1024 * 1024
    snapshot_max_files: Annotated[int, Field(ge=0)] = 10_000
    # Ended jobs older than this many days are removed, directory and rows, as `trainq rm`
    # removes one (daemon/trainqd/scheduling/retention.py); 0 keeps them forever.
    retention_days: Annotated[float, Field(ge=0, le=36500)] = 0.0
    # -- sharing: fair share, classes, preemption (docs/architecture.md, "Sharing") --
    # Users' recent GPU (and CPU-slot) time orders their waiting jobs against each other's,
    # halved every this many days; 0 turns fair share off (boost, weight, priority, submit).
    fair_share_half_life_days: Annotated[float, Field(ge=0, le=3650)] = 7.0
    # The class of a job that names none; with no [classes.NAME] tables, the one class.
    default_class: str = DEFAULT_CLASS
    classes: dict[str, JobClass] = Field(default_factory=dict)
    # A waiting job of a class that may preempt takes GPUs from preemptible jobs only when
    # nothing frees enough of them within this many seconds (or it cannot be foreseen)...
    preempt_after_seconds: Annotated[float, Field(ge=0, le=365 * 86400)] = 300.0
    # ...and never from an attempt that has run less than this.
    min_runtime_before_preemption_seconds: Annotated[float, Field(ge=0, le=365 * 86400)] = 600.0
    # With fair share, such a job may also preempt preemptible jobs of its own class rank,
    # of users who would still hold at least as many GPUs as its owner then.
    preempt_for_fair_share: bool = False

    @field_validator("classes")
    @classmethod
    def _class_names(cls, value: dict[str, JobClass]) -> dict[str, JobClass]:
        for name in value:
            check_class_name(name)
        return value

    @model_validator(mode="after")
    def _default_class(self) -> Config:
        check_class_name(self.default_class)
        if self.classes and self.default_class not in self.classes:
            raise ValueError(
                f"default_class {self.default_class!r} is not one of the classes "
                f"({', '.join(sorted(self.classes))})"
            )
        return self

    @property
    def job_classes(self) -> dict[str, JobClass]:
        """The configured classes, or the one implicit class."""
        return self.classes or {self.default_class: JobClass()}

    def process_cap(self) -> int:
        """max_processes_per_user as a number (0: no cap of trainq's)."""
        if self.max_processes_per_user != "auto":
            return self.max_processes_per_user
        try:
            with open("/proc/sys/kernel/pid_max") as f:
                pid_max = int(f.read())
        except (OSError, ValueError):
            pid_max = 32768  # the kernel's own default
        return max(1024, pid_max // 8)

    @field_validator("container_capabilities")
    @classmethod
    def _capabilities(cls, value: list[str]) -> list[str]:
        # Passed to `--cap-add`, one by one: never "ALL", which would undo `--cap-drop=all`.
        for name in value:
            if name.removeprefix("CAP_") not in CAPABILITIES:
                raise ValueError(f"{name!r} is not a capability name such as CAP_SYS_PTRACE")
        return value

    @field_validator("metrics_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is not None:
            listen_address(value)
        return value

    @field_validator("socket", "state_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError(f"{value} must be an absolute path")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: str) -> str:
        if not GPU_SPEC_RE.match(value):
            raise ValueError(f"{value!r} is not one of auto, nvml, none, fake:N, fake:/file.json")
        return value

    @field_validator("socket_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if not re.fullmatch(r"0?[0-7]{3}", value):
            raise ValueError(f'{value!r} is not an octal mode such as "0660"')
        return value

    @property
    def socket_mode_bits(self) -> int:
        return int(self.socket_mode, 8)

    @field_validator("fake_gpu_device_dir", "slurm_python")
    @classmethod
    def _absolute_or_unset(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError(f"{value} is not an absolute path")
        return value

    @property
    def gpu_device_dir(self) -> Path:
        return self.fake_gpu_device_dir or self.state_dir / "dev"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"

    @property
    def database(self) -> Path:
        return self.state_dir / "trainq.db"


def read_config_file(path: Path, *, explicit: bool) -> dict[str, Any]:
    """The file's keys; an absent default file means the embedded defaults."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such file") from None
        return {}
    except PermissionError:
        raise ConfigError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return data


def check_groups(config: Config, where: str) -> None:
    """Groups named by the configuration must exist on this host."""
    for key in ("socket_group", "admin_group"):
        name = getattr(config, key)
        if name is None or name.isdigit():
            continue
        try:
            grp.getgrnam(name)
        except KeyError:
            raise ConfigError(f"{where}: {key}: group {name!r} does not exist") from None
    for class_name, job_class in config.classes.items():
        for group in job_class.groups or ():
            if not group.isdigit() and not _group_exists(group):
                raise ConfigError(
                    f"{where}: classes.{class_name}.groups: group {group!r} does not exist"
                )
        for user in job_class.users or ():
            if not user.isdigit() and not _user_exists(user):
                raise ConfigError(
                    f"{where}: classes.{class_name}.users: user {user!r} does not exist"
                )


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def load_config(config_file: Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults, then the file (/etc/trainq/trainqd.toml unless given), then the flags."""
    path = config_file or SYSTEM_CONFIG
    data = read_config_file(path, explicit=config_file is not None)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    # The file alone first, so a bad key is blamed on the file and not on the command line.
    for what, candidate in ((str(path), data), ("command line", {**data, **flags})):
        try:
            config = Config.model_validate(candidate)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc, what)) from None
    check_groups(config, str(path) if data else "command line")
    return config
