"""How trainqd runs a training image: `ENGINE run ... IMAGE train` (DESIGN §2, §5).

docker and podman take the same flags for everything trainq needs except GPUs: docker
asks the NVIDIA runtime with `--gpus '"device=UUID,..."'`, podman uses CDI names
(`--device nvidia.com/gpu=UUID`). The container is named and labelled after the job and
attempt so it can be found again after a daemon restart, runs attached (its output is the
attempt's stdout and stderr) and without --rm (an ambiguous exit status 125-127 is settled
by `inspect` before the monitor removes it).

Both engines parse --mount and --gpus values as CSV, so a path or list is quoted as CSV
quotes it; --volume is never used, since its SRC:DST:OPTIONS cannot hold a path with a
colon in it (a channel directory named after a time of day, say). Their --env-file
parsers read a line at a time into a 64 KiB buffer and drop a carriage return at a line's
end: a value that cannot survive that goes on the command line (`fits_env_file`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from trainq.errors import InvalidSpec

EngineName = Literal["docker", "podman"]
CONTAINER_PREFIX = "trainq"
# The engines read --env-file with Go's bufio.Scanner, whose buffer holds 64 KiB: a longer
# line fails the whole run ("token too long").
ENV_FILE_LINE_LIMIT = 64 * 1024 - 1


@dataclass(frozen=True)
class Engine:
    name: EngineName
    path: str


def find_engine(wanted: EngineName | None, default: EngineName | None) -> Engine:
    """The engine a job runs on: the spec's, else the configured default, else whichever is
    installed (podman first: it needs no daemon of its own)."""
    choice = wanted or default
    candidates: Sequence[EngineName] = (choice,) if choice else ("podman", "docker")
    for name in candidates:
        path = shutil.which(name)
        if path:
            return Engine(name, os.path.realpath(path) if name == "podman" else path)
    if choice:
        raise InvalidSpec(f"container engine {choice!r} is not installed on this host")
    raise InvalidSpec("no container engine is installed on this host (install podman or docker)")


def container_name(instance: str, job_id: int, attempt: int) -> str:
    """trainq-<instance>-<job>-<attempt>: the instance keeps two trainqds (a personal one and
    the workstation's) from taking each other's containers for their own."""
    return f"{CONTAINER_PREFIX}-{instance}-{job_id}-{attempt}"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool


def run_argv(
    engine: Engine,
    *,
    image: str,
    name: str,
    instance: str,
    job_id: int,
    attempt: int,
    owner_uid: int,
    user: tuple[int, int] | None,
    groups: Sequence[int],
    env_file: str,
    mounts: Sequence[Mount],
    network: str | None,
    gpu_uuids: Sequence[str],
    real_gpus: bool,
) -> list[str]:
    argv = [
        engine.path,
        "run",
        "--name",
        name,
        "--label",
        f"trainq.instance={instance}",
        "--label",
        f"trainq.job={job_id}",
        "--label",
        f"trainq.attempt={attempt}",
        "--label",
        f"trainq.owner={owner_uid}",
        # trainq keeps the attempt's stdout and stderr itself; a second copy in the
        # engine's log store would only fill its disk.
        "--log-driver",
        "none",
        "--env-file",
        env_file,
    ]
    if user is not None:
        argv += ["--user", f"{user[0]}:{user[1]}"]
        for gid in groups:
            if gid != user[1]:
                argv += ["--group-add", str(gid)]
    if network is not None:
        argv += ["--network", network]
    for mount in mounts:
        argv += ["--mount", mount_option(mount)]
    if gpu_uuids and real_gpus:
        if engine.name == "docker":
            # Quoted: unquoted, the CSV parser takes each UUID after the first for a field.
            argv += ["--gpus", _csv_quoted(f"device={','.join(gpu_uuids)}")]
        else:
            for uuid in gpu_uuids:
                argv += ["--device", f"nvidia.com/gpu={uuid}"]
    argv += [image, "train"]
    return argv


def _csv_quoted(field: str) -> str:
    return '"' + field.replace('"', '""') + '"'


def mount_option(mount: Mount) -> str:
    """`--mount`'s value for a bind mount: every path quoted, so none of its characters
    (",", ":", "=", '"') can be taken for the option's syntax."""
    fields = [
        "type=bind",
        _csv_quoted(f"source={mount.source}"),
        _csv_quoted(f"target={mount.target}"),
    ]
    if mount.read_only:
        fields.append("readonly")
    return ",".join(fields)


def fits_env_file(key: str, value: str) -> bool:
    """Whether NAME=value survives an --env-file intact; what does not must be passed with
    `--env NAME=value` on the command line instead."""
    if "\n" in value or "\r" in value:
        return False
    return len(key.encode()) + 1 + len(value.encode()) <= ENV_FILE_LINE_LIMIT


def env_file_text(env: dict[str, str]) -> str:
    """An --env-file: one NAME=value a line, for variables that `fits_env_file`."""
    unfit = [key for key, value in env.items() if not fits_env_file(key, value)]
    if unfit:
        raise ValueError(f"cannot go in an --env-file (pass them with --env): {unfit}")
    return "".join(f"{key}={value}\n" for key, value in env.items())
