"""Sweeps on the command line: `trainq submit --sweep`, `trainq stop --group` and
`trainq wait --group`. A group is the jobs of one list submission, named by its first job's
id; `trainq ls --group` is a filter of `ls` itself.

`wait --group` follows the events stream as `trainq wait` does: the stream is opened first
and the group's states read after, so no end between the two is missed and nothing polls.
It exits 0 only if every job of the group COMPLETED, 1 if any FAILED, else 3 (STOPPED).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainq.client import Client, iter_lines
from trainq.core.errors import ExitCode, NotFound, Unavailable
from trainq.core.states import TERMINAL, JobState
from trainq.humanize import pretty_json
from trainq.sweep import expand
from trainq.waiting import RECONNECT_INTERVAL, RECONNECT_SECONDS

if TYPE_CHECKING:
    import argparse

    from trainq.commands import Context


def submit_sweep(
    ctx: Context, client: Client, spec: Mapping[str, Any], args: argparse.Namespace
) -> int:
    """POST /v1/jobs with one spec per point of the grid; prints the ids, one a line (or
    the daemon's answer with --json)."""
    specs = expand(spec, args.sweep)
    from trainq.commands import submit_token  # noqa: PLC0415 (commands imports this module)

    answer = client.post_jobs(specs, submit_token(args))
    jobs = answer.get("jobs", [])
    if args.json:
        ctx.print(pretty_json(answer))
    else:
        ctx.print("\n".join(str(job["id"]) for job in jobs))
    group = int(answer["group_id"])
    ctx.say(f"{len(jobs)} jobs submitted as group {group}")
    return wait_group(ctx, client, group) if args.wait else 0


def stop_group(ctx: Context, group: int, body: Mapping[str, Any]) -> int:
    """POST /v1/groups/{id}/stop; prints how many jobs were stopped."""
    _, answer = ctx.client().request("POST", f"/v1/groups/{group}/stop", json=body)
    stopped = answer.get("stopped", [])
    line = f"stopped {len(stopped)} jobs of group {group}"
    not_allowed = answer.get("not_allowed", 0)
    if not_allowed:
        line += f"; {not_allowed} others are not yours to stop"
    ctx.print(line)
    return 0


def wait_group(ctx: Context, client: Client, group: int) -> int:
    """Wait until every job of the group has ended, reconnecting while trainqd is away for
    up to RECONNECT_SECONDS; the exit status says how they ended."""
    lost_at: float | None = None
    while True:
        try:
            states = follow_group(client, group)
            break
        except Unavailable as exc:
            now = time.monotonic()
            if lost_at is None:
                lost_at = now
                ctx.say(f"{exc.message}; still waiting for group {group} (reconnecting)")
            elif now - lost_at > RECONNECT_SECONDS:
                raise
        time.sleep(RECONNECT_INTERVAL)
    counts = Counter(states.values())
    ctx.say(f"group {group}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if counts[JobState.COMPLETED] == len(states):
        return int(ExitCode.OK)
    return int(ExitCode.FAILED if counts[JobState.FAILED] else ExitCode.STOPPED)


def follow_group(client: Client, group: int) -> dict[int, str]:
    """Each job's final state, read from the events stream until none is left unfinished."""
    with client.stream("GET", "/v1/events") as chunks:  # from now on
        listed = client.all_jobs({"group": group, "all": True})
        if not listed:
            raise NotFound(f"no group {group}")
        states: dict[int, str] = {int(job["id"]): str(job["state"]) for job in listed}
        left = {job_id for job_id, state in states.items() if state not in TERMINAL}
        if not left:
            return states
        for line in iter_lines(chunks):
            if not line.strip():
                continue  # a keep-alive
            event = json.loads(line)
            job_id = event.get("job_id")
            if job_id not in states:
                continue
            states[job_id] = str(event.get("to_state"))
            if states[job_id] in TERMINAL:
                left.discard(job_id)
            else:  # an older event than the listing showed: its later ones follow
                left.add(job_id)
            if not left:
                return states
    raise Unavailable("trainqd closed the events stream")
