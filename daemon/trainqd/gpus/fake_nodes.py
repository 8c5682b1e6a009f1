"""Device nodes for simulated GPUs, so that confining a job to its GPUs can be seen working.

NVIDIA's driver makes /dev/nvidiaN, a character device of major 195 and minor N, for each
GPU, and /dev/nvidiactl (195:255), the control node every CUDA program opens; all mode 0666,
owned by root. A root trainqd with `fake:` GPUs makes the same nodes in a directory of the
admin's choice (`fake_gpu_device_dir`), with the GPU's index as its minor, as the devices
cgroup of a job (monitor/devices.py) numbers simulated GPUs. With no driver behind them,
opening one fails with ENXIO where the job may use it and EPERM where its cgroup denies it.

A node that is already there as the same device is kept (a host may have the driver's own
nodes) and left behind at the end; anything else there is refused, never replaced. Only
the nodes (and the directory) made here are removed at a clean shutdown.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

NVIDIA_MAJOR = 195
CONTROL_MINOR = 255
NODE_MODE = 0o666


class NodeError(Exception):
    """The nodes cannot be made; the message is one line."""


def node_names(minors: Iterable[int]) -> list[tuple[str, int]]:
    """(file name, minor) of each GPU's node and of the control node."""
    return [*((f"nvidia{minor}", minor) for minor in minors), ("nvidiactl", CONTROL_MINOR)]


def make_nodes(directory: Path, minors: Iterable[int]) -> list[Path]:
    """Make the nodes in `directory` (made too if missing); the paths made here, the
    directory last, so that removing them in order leaves the host as it was."""
    made: list[Path] = []
    try:
        try:
            directory.mkdir(mode=0o755)
        except FileExistsError:
            pass
        else:
            made.append(directory)
        for name, minor in node_names(minors):
            path = directory / name
            device = os.makedev(NVIDIA_MAJOR, minor)
            try:
                _mknod(path, device)
            except FileExistsError:
                status = path.lstat()
                if not stat.S_ISCHR(status.st_mode) or status.st_rdev != device:
                    raise NodeError(
                        f"{path} is there and is not the device {NVIDIA_MAJOR}:{minor}"
                    ) from None
                continue
            made.insert(0, path)
    except OSError as exc:
        remove_nodes(made)
        raise NodeError(f"cannot make the simulated GPUs' device nodes: {exc}") from None
    except NodeError:
        remove_nodes(made)
        raise
    return made


def _mknod(path: Path, device: int) -> None:
    # The mode is set by mknod itself, with the umask cleared for the call (trainqd is still
    # single-threaded at start-up): a chmod afterwards would follow a link that a user who
    # can write in the directory had put there meanwhile. Made by root, the node is root's.
    umask = os.umask(0)
    try:
        os.mknod(path, NODE_MODE | stat.S_IFCHR, device)
    finally:
        os.umask(umask)


def remove_nodes(made: Iterable[Path]) -> None:
    for path in made:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # only if empty: never what someone else put there
            else:
                path.unlink()
