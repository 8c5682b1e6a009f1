"""What the client adds to a spec before sending it, and a job's spec to copy.

`localized`: what only the client can know, its current directory (relative host paths
become absolute, `~` is expanded, a subprocess job runs where it was submitted, like sbatch)
and its PATH (so `python3` in a job means the program it means to the person submitting). A
container job's working_dir is a path inside the image, so it is sent as given. Nothing
else is checked here: trainqd validates every spec (one source of truth).

`spec_of`: an existing job's spec, whole, for `submit --like`, `Client.submit_like` and
`export JOB`; refused when trainqd hid values of it from the caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainq.core.errors import InvalidSpec, Unavailable

if TYPE_CHECKING:
    from trainq.client.api import Api

HIDDEN = "<hidden>"  # how trainqd shows another user's environment and hyperparameter values
# What `private_data = true` hides of another user's job besides those values.
PRIVATE_FIELDS = ("command", "image", "working_dir", "source_dir")


def resolve_path(path: str, cwd: Path, environ: Mapping[str, str]) -> str:
    """`~` expanded (from $HOME when set), then made absolute against `cwd`; symlinks kept."""
    if path == "~" or path.startswith("~/"):
        home = environ.get("HOME") or os.path.expanduser("~")
        path = home + path[1:]
    elif path.startswith("~"):
        path = os.path.expanduser(path)
    return os.path.normpath(os.path.join(cwd, path))


def localized(spec: Mapping[str, Any], cwd: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """The spec with its host paths absolute and, for a subprocess job, the working
    directory and PATH it runs with unless it says otherwise."""
    spec = dict(spec)
    if isinstance(spec.get("channels"), dict):
        channels = dict(spec["channels"])
        for name, channel in channels.items():
            if isinstance(channel, dict) and isinstance(channel.get("source"), str):
                channels[name] = {
                    **channel,
                    "source": resolve_path(channel["source"], cwd, environ),
                }
        spec["channels"] = channels
    if isinstance(spec.get("source_dir"), str):
        spec["source_dir"] = resolve_path(spec["source_dir"], cwd, environ)
    if spec.get("image") is None:
        if isinstance(spec.get("working_dir"), str):
            spec["working_dir"] = resolve_path(spec["working_dir"], cwd, environ)
        # A subprocess job runs where it was submitted and finds programs as we do.
        spec.setdefault("working_dir", os.path.normpath(cwd))
        if "PATH" in environ:
            job_env = spec.get("environment")
            if job_env is None:
                spec["environment"] = {"PATH": environ["PATH"]}
            elif isinstance(job_env, dict) and "PATH" not in job_env:
                spec["environment"] = {**job_env, "PATH": environ["PATH"]}
    return spec


def spec_of(api: Api, job_id: int) -> dict[str, Any]:
    """Job `job_id`'s spec, whole: refused in one line if trainqd hid values from the caller
    (another user's job), since a copy would run with the placeholders."""
    record = api.get_job(job_id)
    spec = record.get("spec") if isinstance(record, dict) else None
    if not isinstance(spec, dict):
        raise Unavailable(f"trainqd sent no spec for job {job_id}")
    private = [key for key in PRIVATE_FIELDS if spec.get(key) in (HIDDEN, [HIDDEN])]
    if private:  # trainqd's private_data: what the job runs is its owner's and admins' alone
        raise InvalidSpec(
            f"{', '.join(private)}: hidden from you (job {job_id} is not yours and this trainqd "
            "keeps what jobs run private); copy a job of yours"
        )
    env = spec.get("environment")
    if isinstance(env, dict) and env.get("PATH") == HIDDEN:
        # The submitter's PATH, which `submit` adds: the copy gets the caller's, as it would.
        spec["environment"] = {k: v for k, v in env.items() if k != "PATH"}
    if spec.get("notify") == [HIDDEN]:  # another user's command: not the caller's to run
        spec.pop("notify")
    for field in ("environment", "hyperparameters"):
        hidden = sorted(k for k, v in (spec.get(field) or {}).items() if v == HIDDEN)
        if hidden:
            raise InvalidSpec(
                f"{field}: the values of {', '.join(hidden)} are hidden from you "
                f"(job {job_id} is not yours); give them with --env/--hp or copy a job of yours"
            )
    for group in spec.get("instance_groups") or []:
        env = group.get("environment") if isinstance(group, dict) else None
        if isinstance(env, dict) and HIDDEN in env.values():
            raise InvalidSpec(
                f"instance group {group.get('name')}: its environment's values are hidden from "
                f"you (job {job_id} is not yours); copy a job of yours"
            )
    return spec
