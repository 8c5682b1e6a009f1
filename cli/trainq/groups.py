"""Sweeps on the command line: `trainq submit --sweep`, `trainq stop --group` and
`trainq wait --group`. A group is the jobs of one list submission, named by its first job's
id; `trainq ls --group` is a filter of `ls` itself.

`wait --group` follows the events stream as `trainq wait` does: the stream is opened first
and the group's states read after, so no end between the two is missed and nothing polls.
It exits 0 only if every job of the group COMPLETED, 1 if any FAILED, else 3 (STOPPED).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainq.client.api import Api
from trainq.client.following import wait_for_group
from trainq.core.errors import ExitCode
from trainq.core.states import JobState
from trainq.humanize import pretty_json
from trainq.sweep import expand

if TYPE_CHECKING:
    import argparse

    from trainq.context import Context


def submit_sweep(
    ctx: Context, client: Api, spec: Mapping[str, Any], args: argparse.Namespace, token: str
) -> int:
    """POST /v1/jobs with one spec per point of the grid; prints the ids, one a line (or
    the daemon's answer with --json)."""
    specs = expand(spec, args.sweep)
    answer = client.post_jobs(specs, token)
    jobs = answer.get("jobs", [])
    if args.json:
        ctx.print(pretty_json(answer))
    else:
        ctx.print("\n".join(str(job["id"]) for job in jobs))
    group = int(answer["group_id"])
    ctx.say(f"{len(jobs)} jobs submitted as group {group}")
    return wait_group(ctx, client, group) if args.wait else 0


def stop_group(ctx: Context, group: int, grace_seconds: float | None) -> int:
    """POST /v1/groups/{id}/stop; prints how many jobs were stopped."""
    answer = ctx.client().post_group_stop(group, grace_seconds=grace_seconds)
    stopped = answer.get("stopped", [])
    line = f"stopped {len(stopped)} jobs of group {group}"
    not_allowed = answer.get("not_allowed", 0)
    if not_allowed:
        line += f"; {not_allowed} others are not yours to stop"
    ctx.print(line)
    return 0


def wait_group(ctx: Context, client: Api, group: int) -> int:
    """Wait until every job of the group has ended, reconnecting while trainqd is away
    (trainq.client.following); the exit status says how they ended."""

    def say_lost(problem: str) -> None:
        ctx.say(f"{problem}; still waiting for group {group} (reconnecting)")

    states = wait_for_group(client, group, say_lost)
    counts = Counter(states.values())
    ctx.say(f"group {group}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if counts[JobState.COMPLETED] == len(states):
        return int(ExitCode.OK)
    return int(ExitCode.FAILED if counts[JobState.FAILED] else ExitCode.STOPPED)
