"""What trainqd and a job's monitor tell each other (standard library only).

    trainqd --Launch (JSON on the monitor's stdin)--> monitor
    trainqd --StopRequest (<job>/attempts/<n>.stop, then SIGTERM)--> monitor
    monitor --MonitorInfo (<attempt dir>/monitor.json)--> trainqd   (re-attach, leftovers)
    monitor --ExitRecord (<attempt dir>/exit.json, atomic)--> trainqd (how the attempt ended)

The launch travels on stdin (a memfd), never as a file in a directory the job's owner can
write: a container job's monitor starts as root and must not read what the owner could swap.
Records the monitor writes sit in a directory its owner controls, so the daemon reads them
as untrusted input (`read_json` caps the size and refuses links; the parsers check types).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing costs the monitor's start-up a few ms: annotations only
    from typing import Any, Literal

LAUNCH_VERSION = 1
MAX_RECORD_BYTES = 1 << 20
REASON_CHARS = 1024  # SageMaker returns the first 1024 characters of the failure file

OUTCOMES = (
    "exited",
    "signaled",
    "stopped",
    "timed_out",
    "interrupted",
    "start_failed",
    "engine_error",
    "feeder_failed",
    "oom_killed",
    "lost",
)

EXIT_RECORD = "exit.json"
MONITOR_INFO = "monitor.json"
STDOUT = "stdout"
STDERR = "stderr"
MONITOR_LOG = "monitor.log"


@dataclass(frozen=True)
class Credentials:
    uid: int
    gid: int
    groups: list[int]
    user: str
    home: str


@dataclass(frozen=True)
class PipeChannel:
    name: str
    source: str
    record_wrapper: Literal["None", "RecordIO"] = "None"
    compression: Literal["None", "Gzip"] = "None"
    shuffle_seed: int | None = None
    epochs: int | None = None


@dataclass(frozen=True)
class FileChannel:
    """A File (or FastFile) mode channel, as the monitor lays it out in the ml root."""

    name: str
    source: str
    source_is_dir: bool
    # "link": input/data/<name> is a symlink to the source (a single file: a directory holding
    # one link), for subprocess trainers; "mountpoint": an empty directory (or file) that the
    # container engine mounts the source over, read-only.
    view: Literal["link", "mountpoint"]


@dataclass(frozen=True)
class ContainerLaunch:
    engine: Literal["docker", "podman"]
    engine_path: str  # absolute path of the engine's CLI
    name: str  # the container's name; `ENGINE stop/kill/inspect/rm NAME` use it


@dataclass(frozen=True)
class Launch:
    """Everything a monitor needs to run one attempt of one job."""

    job_id: int
    attempt: int
    runtime: Literal["subprocess", "container"]
    # subprocess: the trainer's command; container: the whole `ENGINE run ... IMAGE train`.
    argv: list[str]
    # subprocess: the trainer's whole environment; container: the engine client's environment
    # (the trainer's own goes in an --env-file named in argv).
    env: dict[str, str]
    cwd: str
    owner: Credentials  # the trainer (subprocess) and the feeder always run as this user
    ml_root: str
    attempt_dir: str  # stdout, stderr, monitor.json, exit.json, monitor.log
    stop_file: str  # where trainqd writes a StopRequest before it sends SIGTERM
    stop_grace_seconds: float
    deadline: float | None = None  # time.time() at which the time limit stops the trainer
    pipe_channels: list[PipeChannel] = field(default_factory=list)
    # Host paths bound read-only onto themselves in the trainer's private mount namespace
    # (File mode channel sources of a subprocess job, when the monitor starts as root).
    readonly_paths: list[str] = field(default_factory=list)
    container: ContainerLaunch | None = None
    # The ml root is laid out by the monitor with the owner's rights (trainqd never writes
    # into a directory its user controls): these files (path relative to ml_root -> text)
    # and these File mode channels.
    ml_files: dict[str, str] = field(default_factory=dict)
    file_channels: list[FileChannel] = field(default_factory=list)
    version: int = LAUNCH_VERSION

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Launch:
        raw = json.loads(data)
        if raw.get("version") != LAUNCH_VERSION:
            raise ValueError(f"launch version {raw.get('version')!r} is not {LAUNCH_VERSION}")
        raw["owner"] = Credentials(**raw["owner"])
        raw["pipe_channels"] = [PipeChannel(**c) for c in raw.get("pipe_channels", [])]
        raw["file_channels"] = [FileChannel(**c) for c in raw.get("file_channels", [])]
        if raw.get("container") is not None:
            raw["container"] = ContainerLaunch(**raw["container"])
        return cls(**raw)


@dataclass(frozen=True)
class StopRequest:
    grace_seconds: float
    reason: Literal["user", "time_limit"]
    requested_by: int | None = None  # uid


@dataclass(frozen=True)
class MonitorInfo:
    monitor_pid: int
    monitor_start: int  # /proc/<pid>/stat starttime, in clock ticks since boot
    boot_id: str
    trainer_pid: int | None = None
    trainer_pgid: int | None = None


@dataclass(frozen=True)
class ExitRecord:
    job_id: int
    attempt: int
    outcome: str  # one of OUTCOMES
    started_at: float | None
    ended_at: float
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None  # failure file's first 1024 chars, stderr's tail, or what failed
    stop_reason: str | None = None


def atomic_write_json(path: str, obj: Any, mode: int = 0o644) -> None:
    """Write `path` so that a reader sees the old file or the whole new one, never a part.

    The temporary file is created exclusively and without following links, so a
    directory shared with a less trusted user cannot redirect the write.
    """
    directory = os.path.dirname(path) or "."
    data = json.dumps(obj, separators=(",", ":")).encode()
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{os.urandom(6).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_json(path: str) -> Any | None:
    """Parse a small JSON record; None when it is absent. Links and huge files are refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is larger than {MAX_RECORD_BYTES} bytes")
    return json.loads(data)


def _opt(raw: dict[str, Any], key: str, typ: type | tuple[type, ...]) -> Any:
    value = raw.get(key)
    if value is not None and (not isinstance(value, typ) or isinstance(value, bool)):
        raise ValueError(f"{key} has the wrong type")
    return value


def parse_exit_record(raw: Any) -> ExitRecord:
    if not isinstance(raw, dict):
        raise ValueError("an exit record must be an object")
    outcome = raw.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    reason = _opt(raw, "reason", str)
    return ExitRecord(
        job_id=int(raw["job_id"]),
        attempt=int(raw["attempt"]),
        outcome=outcome,
        started_at=_opt(raw, "started_at", (int, float)),
        ended_at=float(raw["ended_at"]),
        exit_code=_opt(raw, "exit_code", int),
        signal=_opt(raw, "signal", int),
        reason=None if reason is None else reason[: REASON_CHARS * 4],
        stop_reason=_opt(raw, "stop_reason", str),
    )


def parse_monitor_info(raw: Any) -> MonitorInfo:
    if not isinstance(raw, dict):
        raise ValueError("monitor info must be an object")
    return MonitorInfo(
        monitor_pid=int(raw["monitor_pid"]),
        monitor_start=int(raw["monitor_start"]),
        boot_id=str(raw["boot_id"]),
        trainer_pid=_opt(raw, "trainer_pid", int),
        trainer_pgid=_opt(raw, "trainer_pgid", int),
    )


def write_record(path: str, record: ExitRecord | MonitorInfo | StopRequest) -> None:
    atomic_write_json(path, asdict(record))
