"""Device nodes for simulated GPUs, so that confining a job to its GPUs can be seen working.

NVIDIA's driver makes /dev/nvidiaN, a character device of major 195 and minor N, for each
GPU, and /dev/nvidiactl (195:255), the control node every CUDA program opens; all mode 0666,
owned by root. A root trainqd with `fake:` GPUs makes the same nodes in a directory of the
admin's choice (`fake_gpu_device_dir`), with the GPU's index as its minor, as the devices
cgroup of a job (monitor/devices.py) numbers simulated GPUs. With no driver behind them,
opening one fails with ENXIO where the job may use it and EPERM where its cgroup denies it.

What trainq made is known by a record in trainqd's state dir (RECORD_NAME, root's alone):
each node's (and the directory's) path, filesystem, inode and, for a node, the time of its
last change, written before the node takes its name. A node is made under a temporary name,
recorded, linked to its own name (which fails rather than replace anything), the temporary
name removed, and its time of change recorded. So a trainqd killed at any point leaves
nothing the next one cannot tell as its own (a killed trainqd's temporary names are
removed): it takes the recorded nodes over and removes them at its clean shutdown. Only a
directory made in the instant before its record was written stays behind, empty. A node
that is there as the same device but not in the record (a host with the driver's own
nodes) is kept and left behind; while an NVIDIA driver is loaded, such a node opens a real
GPU, so trainqd refuses to start rather than hand it to jobs as a simulated one. Anything
else there is refused, never replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from trainqd.monitor.records import atomic_write_json

NVIDIA_MAJOR = 195
CONTROL_MINOR = 255
NODE_MODE = 0o666
RECORD_NAME = "fake-gpu-nodes.json"
DRIVER = Path("/proc/driver/nvidia")  # there while an NVIDIA driver is loaded
_TEMPORARY = ".trainq-"  # a node's name while it is being made: .trainq-nvidia0


class NodeError(Exception):
    """The nodes cannot be made; the message is one line."""


class Unrecorded(Exception):
    """The record cannot be written (a full disk, say): no node is made that it would not
    name."""


def node_names(minors: Iterable[int]) -> list[tuple[str, int]]:
    """(file name, minor) of each GPU's node and of the control node."""
    return [*((f"nvidia{minor}", minor) for minor in minors), ("nvidiactl", CONTROL_MINOR)]


@dataclass
class Record:
    """What trainq made, in `file`: path -> [st_dev, st_ino, st_ctime_ns]. An inode number
    is soon reused once its file is gone, so a node's time of last change is kept too; it
    is None for the directory (its entries change it) and while a node is being made."""

    file: Path
    made: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)

    @classmethod
    def load(cls, file: Path) -> Record:
        try:
            raw = json.loads(file.read_text())
            made = {
                str(path): (int(dev), int(ino), None if ctime is None else int(ctime))
                for path, (dev, ino, ctime) in raw.items()
            }
        except FileNotFoundError:
            made = {}
        except (OSError, ValueError, TypeError) as exc:
            raise NodeError(
                f"{file} is not a record of trainq's device nodes ({exc}): remove it, and "
                "any nodes trainq made that it named are left behind"
            ) from None
        return cls(file, made)

    def owns(self, path: Path, status: os.stat_result) -> bool:
        entry = self.made.get(str(path))
        if entry is None or entry[:2] != (status.st_dev, status.st_ino):
            return False
        return entry[2] is None or entry[2] == status.st_ctime_ns

    def add(self, path: Path, status: os.stat_result, *, changes: bool = False) -> None:
        """`changes`: the inode is a directory or still being made: its ctime will change.
        Unrecorded if the record cannot be written."""
        ctime = None if changes else status.st_ctime_ns
        self.made[str(path)] = (status.st_dev, status.st_ino, ctime)
        try:
            self._save()
        except OSError as exc:
            raise Unrecorded(f"cannot record them in {self.file}: {exc.strerror or exc}") from None

    def drop(self, path: Path) -> None:
        """Forget `path`. A record that cannot be written keeps naming it, which does no
        harm: whatever is made there later has another inode or time of change."""
        if self.made.pop(str(path), None) is not None:
            with contextlib.suppress(OSError):
                self._save()

    def _save(self) -> None:
        if self.made:
            atomic_write_json(str(self.file), self.made, mode=0o600)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()


@dataclass
class Nodes:
    """The outcome of `make_nodes`: what trainq owns there (nodes first, the directory
    last, the order to remove them in), the nodes it found and did not make, and why it
    made none, if it could not record them."""

    record: Record
    owned: list[Path] = field(default_factory=list)
    foreign: list[Path] = field(default_factory=list)
    unrecorded: str | None = None

    def remove(self) -> None:
        """Remove what trainq made and is still what it made; a path someone replaced
        meanwhile is left alone, and the record forgets it either way."""
        for path in self.owned:
            with contextlib.suppress(OSError):
                status = path.lstat()
                if self.record.owns(path, status):
                    if stat.S_ISDIR(status.st_mode):
                        path.rmdir()  # only if empty: never what someone else put there
                    else:
                        path.unlink()
            self.record.drop(path)
        self.owned = []


def make_nodes(
    directory: Path, minors: Iterable[int], record_file: Path, driver: Path = DRIVER
) -> Nodes:
    """Make the nodes in `directory` (made too if missing), taking over those a previous
    trainqd made (`record_file`). NodeError if one cannot be made, if something else has a
    node's name, or if a node trainq did not make would open a real GPU. If the record
    cannot be written, none: trainqd then runs without them (`Nodes.unrecorded` says why)
    rather than make nodes it could not tell as its own after a crash."""
    names = node_names(minors)
    nodes = Nodes(Record.load(record_file))
    try:
        _remove_stale(nodes.record, {directory, *(directory / name for name, _ in names)})
        _take_directory(directory, nodes)
        _remove_half_made(directory)
        for name, minor in names:
            _make_node(directory / name, os.makedev(NVIDIA_MAJOR, minor), nodes)
    except Unrecorded as exc:
        nodes.remove()
        return Nodes(nodes.record, unrecorded=str(exc))
    except OSError as exc:
        nodes.remove()
        raise NodeError(f"cannot make the simulated GPUs' device nodes: {exc}") from None
    except NodeError:
        nodes.remove()
        raise
    if nodes.foreign and driver.exists():
        shadowed = ", ".join(str(path) for path in nodes.foreign)
        nodes.remove()
        raise NodeError(
            f"{shadowed}: not made by trainq, and an NVIDIA driver is loaded: jobs given "
            "simulated GPUs would open real ones (choose another fake_gpu_device_dir)"
        )
    return nodes


def _take_directory(directory: Path, nodes: Nodes) -> None:
    try:
        directory.mkdir(mode=0o755)
    except FileExistsError:
        if nodes.record.owns(directory, directory.lstat()):
            nodes.owned.append(directory)
        return
    try:
        nodes.record.add(directory, directory.lstat(), changes=True)
    except Unrecorded:
        with contextlib.suppress(OSError):
            directory.rmdir()
        raise
    nodes.owned.append(directory)


def _remove_stale(record: Record, wanted: set[Path]) -> None:
    """Remove what a previous trainqd made that this one does not make again (it had more
    GPUs, or another directory): nodes before their directory."""
    stale = [Path(path) for path in record.made if Path(path) not in wanted]
    Nodes(record, owned=sorted(stale, key=lambda path: len(path.parts), reverse=True)).remove()


def _remove_half_made(directory: Path) -> None:
    """Remove the temporary names a killed trainqd left: nodes it had begun to make (root's
    character devices of the NVIDIA major)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if not entry.name.startswith(_TEMPORARY):
                continue
            status = entry.stat(follow_symlinks=False)
            if (
                stat.S_ISCHR(status.st_mode)
                and os.major(status.st_rdev) == NVIDIA_MAJOR
                and status.st_uid == 0
            ):
                os.unlink(entry.path)


def _make_node(path: Path, device: int, nodes: Nodes) -> None:
    try:
        status = path.lstat()
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISCHR(status.st_mode) or status.st_rdev != device:
            raise NodeError(
                f"{path} is there and is not the device {os.major(device)}:{os.minor(device)}"
            )
        if nodes.record.owns(path, status):
            nodes.owned.insert(0, path)
        else:
            nodes.record.drop(path)  # the node trainq made was replaced while it was away
            nodes.foreign.append(path)
        return
    temporary = path.with_name(_TEMPORARY + path.name)
    _mknod(temporary, device)
    try:
        nodes.record.add(path, temporary.lstat(), changes=True)
        os.link(temporary, path)  # EEXIST rather than replace what appeared meanwhile
    except BaseException:
        nodes.record.drop(path)
        raise
    finally:
        temporary.unlink()
    nodes.owned.insert(0, path)
    with contextlib.suppress(Unrecorded):  # as recorded, without its time, it is still ours
        nodes.record.add(path, path.lstat())  # its last change made: the ctime is its own now


def _mknod(path: Path, device: int) -> None:
    # The mode is set by mknod itself, with the umask cleared for the call (trainqd is still
    # single-threaded at start-up): a chmod afterwards would follow a link that a user who
    # can write in the directory had put there meanwhile. Made by root, the node is root's.
    umask = os.umask(0)
    try:
        os.mknod(path, NODE_MODE | stat.S_IFCHR, device)
    finally:
        os.umask(umask)
