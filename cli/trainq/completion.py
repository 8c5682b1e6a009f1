"""Shell completion of job ids, asked of trainqd while the user presses Tab.

The shell waits for the answer, so the daemon gets a short time to answer and any failure
(no daemon, a slow one, a socket we may not open) completes nothing rather than printing an
error into the command line being typed. A job is offered when its id starts with what
was typed; its name and state are the description that shells showing one (zsh, fish)
print beside it.
"""

from __future__ import annotations

from typing import Any

from trainq.core.paths import client_socket

# Long enough for a daemon on the same machine, short enough that Tab never feels stuck.
CONNECT_TIMEOUT = 0.3
RESPONSE_TIMEOUT = 0.7


def _socket_of(ctx: Any) -> str | None:
    """The --socket given on the command line so far (after or before the command)."""
    while ctx is not None:
        value = ctx.params.get("socket")
        if value:
            return str(value)
        ctx = ctx.parent
    return None


def matching_jobs(socket: str | None, typed: str, *, ended_too: bool) -> list[tuple[str, str]]:
    """(id, "name STATE") of the jobs whose id starts with `typed`; [] on any failure."""
    from trainq.client.api import Api  # noqa: PLC0415 (only when completing)

    client = Api(
        client_socket(socket),
        connect_timeout=CONNECT_TIMEOUT,
        response_timeout=RESPONSE_TIMEOUT,
        busy_retry_seconds=0,
    )
    try:
        body = client.get_jobs(include_ended=ended_too, limit=1000)
        jobs = body.get("jobs", []) if isinstance(body, dict) else []
        found = []
        for job in jobs:
            job_id, name = str(job.get("id", "")), str(job.get("name", ""))
            if job_id.startswith(typed):
                found.append((job_id, f"{name} {job.get('state', '')}".strip()))
    except Exception:  # a completion must never print an error
        return []
    return found


def any_job(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """Completion for commands that read any job (show, logs, wait)."""
    return matching_jobs(_socket_of(ctx), incomplete, ended_too=True)


def unfinished_job(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """Completion for `stop`: only jobs that have not ended."""
    return matching_jobs(_socket_of(ctx), incomplete, ended_too=False)


def keep_our_order() -> None:
    """bash and fish sort what they are offered, so job ids would come as 1, 10, 11, 2:
    the scripts `--show-completion` and `--install-completion` write ask them to keep
    trainq's order (ids ascending) instead. typer has no setting for it: its templates are
    amended in place (typer is pinned, pyproject.toml)."""
    from typer import _completion_shared as shared  # noqa: PLC0415 (only for those flags)

    scripts = shared._completion_scripts
    scripts["bash"] = scripts["bash"].replace("complete -o default -F", NOSORT_BASH)
    if "--keep-order" not in scripts["fish"]:
        scripts["fish"] = scripts["fish"].replace("--no-files", "--no-files --keep-order", 1)


NOSORT_BASH = "complete -o default -o nosort -F"
