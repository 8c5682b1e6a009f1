"""Refuse at submit what the submitter could not read (the workstation issue, item 2).

Channel sources must be readable files or listable directories, and a working directory must
be enterable, by the submitter: checked by `trainqd.access.pathcheck` in a child running with the
submitter's credentials when trainqd is root, in-process otherwise; either way within a
deadline (the child's process group killed at it, children.py), and cancelled when the
submitting client leaves. A refused channel never reaches the trainer, its FIFOs or its
logs, because the job is never created.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import anyio

from trainq.core.errors import InvalidSpec
from trainq.core.spec import JobSpec
from trainqd.access.identity import Account
from trainqd.access.pathcheck import inspect_paths
from trainqd.children import ChildTimedOut, child_failure, module_child, run_child
from trainqd.departure import unless_client_leaves

# The default of path_check_timeout_seconds: a check that opens a few paths takes
# milliseconds, so this is met only by a path that blocks (a hung network filesystem, a
# file under a lease, a check its submitter stopped).
PATH_CHECK_TIMEOUT = 30.0

_CHECKER = module_child("access.pathcheck")


async def _inspect_as(
    acct: Account, requests: dict[str, list[str]], deadline: float
) -> dict[str, str]:
    """The verdicts on `requests`; cancelled when the submitting client leaves."""
    if os.geteuid() != 0 or acct.uid == 0:
        return await unless_client_leaves(lambda: _inspect_here(requests, deadline))
    return await unless_client_leaves(lambda: _inspect_in_child(acct, requests, deadline))


async def _inspect_here(requests: dict[str, list[str]], deadline: float) -> dict[str, str]:
    # Off the event loop: a path on a hung filesystem blocks a thread alone.
    with anyio.move_on_after(deadline):
        return await anyio.to_thread.run_sync(inspect_paths, requests, abandon_on_cancel=True)
    raise _timed_out(deadline)


async def _inspect_in_child(
    acct: Account, requests: dict[str, list[str]], deadline: float
) -> dict[str, str]:
    message = {"uid": acct.uid, "gid": acct.gid, "groups": list(acct.groups), "requests": requests}
    try:
        done = await run_child(
            _CHECKER,
            deadline=deadline,
            input=json.dumps(message).encode(),
            env={"LANG": "C.UTF-8"},
            cwd="/",
        )
    except ChildTimedOut:
        raise _timed_out(deadline) from None
    if done.returncode != 0:
        raise child_failure(done, "check the job's paths as its submitter")
    result: dict[str, str] = json.loads(done.stdout)
    return result


def _timed_out(deadline: float) -> InvalidSpec:
    return InvalidSpec(
        f"the job's paths could not be checked within {deadline:g} s "
        "(path_check_timeout_seconds): one of them blocks when opened"
    )


async def check_job_paths(
    spec: JobSpec, acct: Account, deadline: float = PATH_CHECK_TIMEOUT
) -> None:
    """InvalidSpec naming the first unusable path, or saying that the check did not end
    within `deadline` seconds (its child then killed)."""
    await check_paths_together({0: spec}, acct, deadline, numbered=False)


async def check_paths_together(
    specs: Mapping[int, JobSpec], acct: Account, deadline: float, *, numbered: bool = True
) -> None:
    """`check_job_paths` for several specs (a sweep's distinct ones, by their index in its
    list) in one check, one child within one deadline, each path once: a list of specs holds
    its request no longer than one spec does. The first problem is named with its spec's
    index (`jobs[i]: `)."""
    requests = {
        key: path_and_need
        for spec in specs.values()
        for key, path_and_need in _requests_of(spec).items()
    }
    if not requests:
        return
    found = await _inspect_as(acct, requests, deadline)
    for index, spec in specs.items():
        problem = _first_problem(spec, found)
        if problem is not None:
            raise InvalidSpec(f"jobs[{index}]: {problem}" if numbered else problem)


def _requests_of(spec: JobSpec) -> dict[str, list[str]]:
    """What to check of `spec`, keyed by what is checked (the same path and need, once)."""
    wanted = [[ch.source, "data"] for ch in spec.channels.values()]
    if spec.working_dir is not None:
        wanted.append([spec.working_dir, "workdir"])
    return {f"{need}:{path}": [path, need] for path, need in wanted}


def _first_problem(spec: JobSpec, found: dict[str, str]) -> str | None:
    for name, ch in spec.channels.items():
        verdict = found[f"data:{ch.source}"]
        if verdict not in ("dir", "file"):
            return f"channel {name!r}: {ch.source} {verdict}"
    if spec.working_dir is not None:
        verdict = found[f"workdir:{spec.working_dir}"]
        if verdict not in ("dir", "file"):
            return f"working directory {spec.working_dir} {verdict}"
    return None
