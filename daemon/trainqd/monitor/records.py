"""What trainqd and a job's monitor tell each other (standard library only).

    trainqd --Launch (JSON on the monitor's stdin)--> monitor
    trainqd --StopOrder (<job>/attempts/<n>.stop, then SIGTERM)--> monitor
    monitor --MonitorInfo (<job>/attempts/<n>.monitor, written as root)--> trainqd (re-attach)
    monitor --ExitRecord (<attempt dir>/exit.json, atomic)--> trainqd (how the attempt ended;
        the record itself is trainq.core.outcomes')

The launch travels on stdin (a memfd), never as a file in a directory the job's owner can
write: a container job's monitor starts as root and must not read what the owner could swap.
The monitor's pid is told to a later trainqd only through a file beside the stop file, in
trainqd's own directory, which the monitor writes before it drops to the job's owner: a pid
read from where the owner can write would let them name any process for trainqd to watch and
signal. The records the monitor writes in the attempt directory sit where its owner can write,
so the daemon reads them as hostile input: `read_json` reads regular files only, never
blocks and caps the size; the parsers accept only values of the right type within bounds
(docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from trainq.core.outcomes import OUTCOMES, REASON_CHARS, ExitRecord, NodeEnd, Outcome

if TYPE_CHECKING:  # typing costs the monitor's start-up a few ms: annotations only
    from typing import Any, Literal

LAUNCH_VERSION = 1
MAX_RECORD_BYTES = 64 << 10  # an exit record's reason is at most ~24 KiB of JSON

EXIT_RECORD = "exit.json"
MONITOR_INFO_SUFFIX = ".monitor"
DEADLINE_SUFFIX = ".deadline"
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
    # Whether the source is a directory, as trainqd found it when it runs as the owner; None
    # when trainqd is root: root's answer would tell the owner what a path they may not read
    # is, so the monitor finds out with the owner's rights (mlroot.py, mounts.py).
    source_is_dir: bool | None
    # "link": input/data/<name> is a symlink to the source (a single file: a directory holding
    # one link), for subprocess trainers; "mountpoint": an empty directory (or file) that the
    # container engine mounts the source over, read-only (a directory whenever the monitor
    # stages the bind, which then holds a single file's bind itself).
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
    attempt_dir: str  # stdout, stderr, exit.json, monitor.log
    stop_file: str  # where trainqd writes a StopOrder before it sends SIGTERM
    stop_grace_seconds: float
    deadline: float | None = None  # time.time() at which the time limit stops the trainer
    pipe_channels: list[PipeChannel] = field(default_factory=list)
    container: ContainerLaunch | None = None
    # The ml root is laid out by the monitor with the owner's rights (trainqd never writes
    # into a directory its user controls): these files (path relative to ml_root -> text)
    # and these File mode channels. A root monitor also makes a subprocess job's channel
    # sources read-only in the trainer's mount namespace (privileges.make_job_view).
    ml_files: dict[str, str] = field(default_factory=dict)
    file_channels: list[FileChannel] = field(default_factory=list)
    max_processes: int = 0  # RLIMIT_NPROC for the owner's processes here; 0: inherited
    # A job of several nodes (monitor/gang.py): the gang's launch holds one launch per node,
    # each with its `node` name; `peers` (host name -> address) resolve in each node's view;
    # `restart` and `primary` (node names) are the gang's supervision rules.
    nodes: list[Launch] = field(default_factory=list)
    node: str | None = None
    peers: dict[str, str] = field(default_factory=dict)
    restart: str = "job"
    primary: list[str] = field(default_factory=list)
    # restart = "node": the exit statuses (and signals, as N or 128 + N) that are transient,
    # the spec's retry_exit_codes; any other error is permanent and ends the attempt.
    transient_exit_codes: list[int] = field(default_factory=list)
    # Under a root trainqd (netns.py): the gang's bridge, a node's end of its pair on it;
    # empty: the nodes share the host's network, each on a loopback address of its own.
    network: str = ""
    version: int = LAUNCH_VERSION

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Launch:
        raw = json.loads(data)
        if raw.get("version") != LAUNCH_VERSION:
            raise ValueError(f"launch version {raw.get('version')!r} is not {LAUNCH_VERSION}")
        return cls._from_raw(raw)

    @classmethod
    def _from_raw(cls, raw: dict[str, Any]) -> Launch:
        raw["nodes"] = [cls._from_raw(node) for node in raw.get("nodes", [])]
        raw["owner"] = Credentials(**raw["owner"])
        raw["pipe_channels"] = [PipeChannel(**c) for c in raw.get("pipe_channels", [])]
        raw["file_channels"] = [FileChannel(**c) for c in raw.get("file_channels", [])]
        if raw.get("container") is not None:
            raw["container"] = ContainerLaunch(**raw["container"])
        return cls(**raw)


@dataclass(frozen=True)
class StopOrder:
    grace_seconds: float
    reason: Literal["user", "time_limit", "preempt"]
    requested_by: int | None = None  # uid


@dataclass(frozen=True)
class MonitorInfo:
    monitor_pid: int
    monitor_start: int  # /proc/<pid>/stat starttime, in clock ticks since boot
    boot_id: str


def monitor_info_path(attempts_dir: str, attempt: int) -> str:
    """<job>/attempts/<n>.monitor: where the monitor says who it is, beside the stop file."""
    return os.path.join(attempts_dir, f"{attempt}{MONITOR_INFO_SUFFIX}")


def deadline_path(attempts_dir: str, attempt: int) -> str:
    """<job>/attempts/<n>.deadline: a time limit changed while the attempt runs, written by
    trainqd (then SIGHUP) beside the stop file, where the job's owner cannot write."""
    return os.path.join(attempts_dir, f"{attempt}{DEADLINE_SUFFIX}")


def read_deadline(path: str) -> tuple[bool, float | None]:
    """(whether the file says anything, the deadline it says: None for no limit)."""
    try:
        raw = read_json(path)
    except (OSError, ValueError):
        return False, None
    if not isinstance(raw, dict) or "deadline" not in raw:
        return False, None
    value = raw["deadline"]
    if value is None:
        return True, None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False, None
    return True, float(value)


def atomic_write_json(path: str, obj: Any, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write `path` so that a reader sees the old file or the whole new one, never a part.

    The temporary file is created exclusively and without following links, so a
    directory shared with a less trusted user cannot redirect the write. `durable`: on
    disk (fsync of the file and of its directory) before this returns; without it the
    rename is as atomic for every reader, but a crash of the machine may lose the file.
    """
    data = json.dumps(obj, separators=(",", ":")).encode()
    _atomic_write_bytes(path, data, mode, durable=durable)


def _atomic_write_bytes(path: str, data: bytes, mode: int, *, durable: bool = True) -> None:
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{os.urandom(6).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if durable:
                os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_up_to(fd: int, limit: int) -> bytes:
    """At most `limit` bytes from `fd`: a file its owner may have made huge is never read whole."""
    chunks = []
    while limit > 0:
        chunk = os.read(fd, limit)
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def read_json(path: str) -> Any | None:
    """Parse a small JSON record; None when it is absent. Whatever else is there (a link, a
    FIFO, a device, a huge or deeply nested file) is refused with ValueError, without
    blocking: the file may sit in a directory a job's owner controls."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = read_up_to(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is larger than {MAX_RECORD_BYTES} bytes")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply") from None


# Bounds of what a record may say: anything else is not what a monitor writes. They keep
# every value storable in SQLite and representable in JSON (no overflow, no NaN or inf).
_ID_MAX = (1 << 63) - 1
_PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT
_EXIT_CODE_RANGE = (-(1 << 31), (1 << 31) - 1)
_SIGNAL_RANGE = (1, 64)
_FUTURE_SLACK = 86400.0  # a record's times may run ahead of trainqd's clock by a day at most
_SHORT_TEXT = 256
_NODES_MAX = 64  # trainq.core.spec.MAX_NODES
_NODE_NAME = 32
_RESTARTS_MAX = 1000


def _int(raw: dict[str, Any], key: str, low: int, high: int, required: bool = False) -> Any:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{key} is not an integer within {low}..{high}")
    return value


def _time(raw: dict[str, Any], key: str, required: bool = False) -> Any:
    value = raw.get(key)
    if value is None and not required:
        return None
    latest = time.time() + _FUTURE_SLACK
    # The range first: it compares an integer of any size exactly, where isfinite would
    # overflow converting it to a float.
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 <= value <= latest
        or not math.isfinite(value)
    ):
        raise ValueError(f"{key} is not a time between the epoch and tomorrow")
    return float(value)


def _flag(raw: dict[str, Any], key: str) -> bool | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{key} is not true or false")
    return value


def _text(raw: dict[str, Any], key: str, limit: int) -> Any:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value[:limit]


def _outcome(raw: dict[str, Any]) -> Outcome:
    outcome = raw.get("outcome")
    if not isinstance(outcome, str) or outcome not in OUTCOMES:
        raise ValueError("its outcome is not one trainq knows")
    return Outcome(outcome)


def _node_ends(raw: Any) -> tuple[NodeEnd, ...]:
    """A gang's record: each node's end (none in other records, and in older ones)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > _NODES_MAX:
        raise ValueError(f"nodes is not a list of at most {_NODES_MAX}")
    ends = []
    for node in raw:
        if not isinstance(node, dict):
            raise ValueError("a node's end is not an object")
        name = node.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= _NODE_NAME:
            raise ValueError("a node's name is not a short string")
        ends.append(
            NodeEnd(
                name=name,
                outcome=_outcome(node),
                exit_code=_int(node, "exit_code", *_EXIT_CODE_RANGE),
                signal=_int(node, "signal", *_SIGNAL_RANGE),
                restarts=_int(node, "restarts", 0, _RESTARTS_MAX, required=True),
            )
        )
    return tuple(ends)


def parse_exit_record(
    raw: Any, job_id: int | None = None, attempt: int | None = None
) -> ExitRecord:
    """An exit record from untrusted JSON; ValueError unless every field is what a monitor
    writes (and, given `job_id` and `attempt`, about that attempt)."""
    if not isinstance(raw, dict):
        raise ValueError("an exit record must be an object")
    record = ExitRecord(
        job_id=_int(raw, "job_id", 1, _ID_MAX, required=True),
        attempt=_int(raw, "attempt", 1, _ID_MAX, required=True),
        outcome=_outcome(raw),
        started_at=_time(raw, "started_at"),
        ended_at=_time(raw, "ended_at", required=True),
        exit_code=_int(raw, "exit_code", *_EXIT_CODE_RANGE),
        signal=_int(raw, "signal", *_SIGNAL_RANGE),
        reason=_text(raw, "reason", REASON_CHARS * 4),
        opt_ml=_flag(raw, "opt_ml"),
        nodes=_node_ends(raw.get("nodes")),
    )
    if job_id is not None and (record.job_id, record.attempt) != (job_id, attempt):
        raise ValueError(f"it is about job {record.job_id} attempt {record.attempt}")
    return record


def parse_monitor_info(raw: Any) -> MonitorInfo:
    if not isinstance(raw, dict):
        raise ValueError("monitor info must be an object")
    boot_id = raw.get("boot_id")
    if not isinstance(boot_id, str) or len(boot_id) > _SHORT_TEXT:
        raise ValueError("boot_id is not a short string")
    return MonitorInfo(
        monitor_pid=_int(raw, "monitor_pid", 1, _PID_MAX, required=True),
        monitor_start=_int(raw, "monitor_start", 0, _ID_MAX, required=True),
        boot_id=boot_id,
    )


# Space for the exit record, taken when the attempt starts: a disk filled meanwhile (by the
# trainer itself, perhaps) cannot then keep the monitor from saying how the attempt ended.
# Without a record trainqd would have to take the attempt for lost and might run it again.
EXIT_RESERVE = ".exit.reserve"
RESERVE_BYTES = MAX_RECORD_BYTES
_FULL = (errno.ENOSPC, errno.EDQUOT)
_RETRY_FIRST, _RETRY_MAX = 0.5, 10.0


def reserve_record_space(attempt_dir: str) -> None:
    """Allocate RESERVE_BYTES for the exit record (written out, so the blocks are the file's
    on any filesystem, tmpfs included); OSError if the disk cannot spare them now.

    Not fsynced: write(2) itself takes the space (tmpfs gives the pages; ext4 and XFS
    reserve the blocks of delayed allocation, and say ENOSPC here, not at writeback), and
    the record is later written over these very blocks. After a crash of the machine the
    reserve is of no use to anyone (the monitor is gone, and the attempt is taken as lost),
    so nothing about it must reach the disk; the record itself is fsynced, file and
    directory."""
    path = os.path.join(attempt_dir, EXIT_RESERVE)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        zeros = memoryview(bytes(RESERVE_BYTES))
        while zeros:
            zeros = zeros[os.write(fd, zeros) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def _write_into_reserve(path: str, data: bytes, mode: int) -> bool:
    """Write `data` over the reserved blocks and rename them to `path`: no new space is
    needed, and none is given back (the rest is padded with blanks, which JSON ignores) for
    someone else to take before trainqd records the end. False if there is no usable
    reserve (absent, not a plain file, too small)."""
    directory = os.path.dirname(path) or "."
    reserve = os.path.join(directory, EXIT_RESERVE)
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(reserve, flags)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not len(data) <= info.st_size <= RESERVE_BYTES:
            return False
        os.pwrite(fd, data.ljust(info.st_size), 0)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(reserve, path)
    _fsync_dir(directory)
    return True


def write_exit_record(path: str, record: ExitRecord, pause: Any = time.sleep) -> None:
    """Write the exit record durably, into the reserved space when there is one. A full
    disk is waited out (retried with a growing pause) rather than given up: an attempt
    whose end is not recorded would be taken for lost and could run again."""
    data = json.dumps(asdict(record), separators=(",", ":")).encode()
    delay = _RETRY_FIRST
    while True:
        try:
            if not _write_into_reserve(path, data, 0o644):
                _atomic_write_bytes(path, data, 0o644)
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
        else:
            return
        pause(delay)
        delay = min(delay * 2, _RETRY_MAX)


def write_record(
    path: str, record: ExitRecord | MonitorInfo | StopOrder, *, durable: bool = True
) -> None:
    atomic_write_json(path, asdict(record), durable=durable)
