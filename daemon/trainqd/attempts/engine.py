"""How trainqd runs a training image: `ENGINE run ... IMAGE train` (docs/architecture.md).

docker and podman take the same flags for everything trainq needs except GPUs: docker
asks the NVIDIA runtime with `--gpus '"device=UUID,..."'`, podman uses CDI names
(`--device nvidia.com/gpu=UUID`). The container is named and labelled after the job and
attempt so it can be found again after a daemon restart, runs attached (its output is the
attempt's stdout and stderr) and without --rm (an ambiguous exit status 125-127 is settled
by `inspect` before the monitor removes it).

Both engines parse --mount and --gpus values as CSV, so a path or list is quoted as CSV
quotes it; --volume is never used, since its SRC:DST:OPTIONS cannot hold a path with a
colon in it (a channel directory named after a time of day, say).

What a container may do on the host is held down the same way on both engines
(docs/security.md): `no-new-privileges` (a setuid binary in the image gains nothing), every
capability dropped but those the administrator grants, the submitter's uid and gid, and the
ml root and channels mounted nosuid and nodev. podman says the last in `--mount`; docker's
`--mount` cannot, so on a root trainqd the monitor binds them nosuid,nodev itself and the
engine mounts those binds, whose flags it keeps (monitor/mounts.py).

No value of the job's environment goes on a command line, where every local user could read
it in `ps`. The engines read --env-file a line at a time into a 64 KiB buffer and drop a
carriage return at a line's end, and a line with a name alone copies the engine client's own
variable: a line that could not hold its value intact is never written. trainq's own
variables (SM_*, TRAINQ_*) that do not fit are named with `--env NAME` and their values put
in the engine client's environment (readable by root alone); the job's own variables are
checked at submit so that they always fit (trainq.core.spec).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from trainq.core import spec_limits
from trainq.core.errors import InvalidSpec
from trainqd.attempts.contract import CURRENT_HOST

EngineName = Literal["docker", "podman"]
CONTAINER_PREFIX = "trainq"
# The engines read --env-file with Go's bufio.Scanner, whose buffer holds 64 KiB: a longer
# line fails the whole run ("token too long"). The spec holds a job's own variables to it.
ENV_FILE_LINE_LIMIT = spec_limits.ENV_FILE_LINE_LIMIT


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
    host: str | None = None,
    capabilities: Sequence[str] = (),
    passed_env: Sequence[str] = (),
    pids_limit: int = 0,
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
    # Names only: the values are in the engine client's environment (`split_environment`).
    for key in passed_env:
        argv += ["--env", key]
    argv += confinement_options(engine, capabilities)
    if pids_limit:
        argv += ["--pids-limit", str(pids_limit)]
    if user is not None:
        argv += ["--user", f"{user[0]}:{user[1]}"]
        for gid in groups:
            if gid != user[1]:
                argv += ["--group-add", str(gid)]
    if network is not None:
        argv += ["--network", network]
    for mount in mounts:
        argv += ["--mount", mount_option(mount, engine.name)]
    if gpu_uuids and real_gpus:
        if engine.name == "docker":
            # Quoted: unquoted, the CSV parser takes each UUID after the first for a field.
            argv += ["--gpus", _csv_quoted(f"device={','.join(gpu_uuids)}")]
        else:
            for uuid in gpu_uuids:
                argv += ["--device", f"nvidia.com/gpu={uuid}"]
    if host is None:
        # resourceconfig.json names the container `algo-1`, and the SageMaker toolkit waits
        # for that name to resolve before it trains.
        argv += ["--hostname", CURRENT_HOST, "--add-host", f"{CURRENT_HOST}:127.0.0.1"]
    else:
        # A node of a job of several nodes, on the job's network: every node resolves it.
        argv += ["--hostname", host, "--network-alias", host]
    argv += [image, "train"]
    return argv


def _csv_quoted(field: str) -> str:
    return '"' + field.replace('"', '""') + '"'


def confinement_options(engine: Engine, capabilities: Sequence[str]) -> list[str]:
    """What keeps a container from root on the host: no privilege gained through setuid
    or file capabilities, and no capability kept but those the administrator grants."""
    options = ["--security-opt", "no-new-privileges", "--cap-drop", "all"]
    for name in capabilities:
        options += ["--cap-add", name]
    if engine.name == "podman":
        # podman copies the client's proxy variables into the container by default: they are
        # the host's, not the job's.
        options.append("--http-proxy=false")
    return options


def mount_option(mount: Mount, engine: EngineName = "docker") -> str:
    """`--mount`'s value for a bind mount: every path quoted, so none of its characters
    (",", ":", "=", '"') can be taken for the option's syntax. podman is told nosuid and
    nodev; docker's `--mount` has no words for them (its sources carry them instead)."""
    fields = [
        "type=bind",
        _csv_quoted(f"source={mount.source}"),
        _csv_quoted(f"target={mount.target}"),
    ]
    if mount.read_only:
        fields.append("readonly")
    if engine == "podman":
        fields += ["nosuid", "nodev"]
    return ",".join(fields)


# Variables whose names trainq makes (the contract's): an engine reads none of them, so they
# may travel in the engine client's environment. A job's own names never do (LD_PRELOAD or
# DOCKER_HOST there would be the root client's).
TRAINQ_NAMES = ("SM_", "TRAINQ_")


def fits_env_file(key: str, value: str) -> bool:
    """Whether NAME=value survives an --env-file line intact."""
    if any(c in value for c in "\n\r\0"):
        return False
    return len(key.encode()) + 1 + len(value.encode()) <= ENV_FILE_LINE_LIMIT


def _check_name(key: str) -> None:
    # A name with "=" or a line break would let its value (or a bare NAME line, which the
    # engine fills from its own environment) through as another variable.
    if not key or "=" in key or any(ord(c) < 0x20 or c == "\x7f" for c in key):
        raise ValueError(f"environment variable name {key!r} cannot be passed to a container")


def split_environment(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(what goes in the --env-file, what goes in the client's environment) for `env`;
    ValueError for a variable that can go in neither."""
    in_file: dict[str, str] = {}
    passed: dict[str, str] = {}
    for key, value in env.items():
        _check_name(key)
        if fits_env_file(key, value):
            in_file[key] = value
        elif key.startswith(TRAINQ_NAMES) and "\0" not in value:
            passed[key] = value
        else:
            raise ValueError(f"environment variable {key} cannot be passed to a container")
    return in_file, passed


def env_file_text(env: dict[str, str]) -> str:
    """An --env-file: one NAME=value a line, for variables that `fits_env_file`."""
    for key, value in env.items():
        _check_name(key)
        if not fits_env_file(key, value):
            raise ValueError(f"{key} cannot go in an --env-file")
    return "".join(f"{key}={value}\n" for key, value in env.items())


# What the engine client keeps of trainqd's environment: where the engine and its settings
# are, and how to reach a registry. Nothing else of the daemon's (a registry token, say)
# reaches the client, so nothing can be copied from it into a container.
CLIENT_VARIABLES = frozenset(
    {
        "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME", "XDG_DATA_HOME", "REGISTRY_AUTH_FILE", "STORAGE_DRIVER",
        "STORAGE_OPTS", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
        "https_proxy", "no_proxy",
    }
)  # fmt: skip
CLIENT_PREFIXES = ("CONTAINERS_", "DOCKER_")


def client_environment(daemon_env: dict[str, str], passed: dict[str, str]) -> dict[str, str]:
    """The engine client's environment: the engine's settings from `daemon_env`, and the
    values of the variables named with `--env NAME`."""
    env = {
        key: value
        for key, value in daemon_env.items()
        if key in CLIENT_VARIABLES or key.startswith(CLIENT_PREFIXES)
    }
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.update(passed)
    return env
