"""One function per `trainq` command, each a single request (or stream) to trainqd.

Every command takes a `Context` (`trainq.context`: where to write, which socket, the
caller's directory and environment: no global state, so tests run them in-process) and the
parsed arguments, and returns the exit status. It speaks to trainqd only through the methods
of `trainq.client.api.Api` (`ctx.client()`), one per endpoint. Errors are raised as trainq's
own exceptions; `trainq.cli.main` turns them into one line and an exit status. `COMMANDS`
is the dispatch table.

The daemon's JSON is used as plain dicts, never through the pydantic models of
`trainq.core.wire`: pydantic's import cost stays off the CLI (see `trainq.cli` for the budget),
and `--json` prints what the daemon sent, pretty-printed, field for field.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from trainq.client.api import new_token
from trainq.context import Context
from trainq.core.errors import InvalidRequest
from trainq.core.states import TERMINAL
from trainq.humanize import health_line, pretty_json
from trainq.spec_flags import submit_flags
from trainq.specfile import build_spec, load_spec_file
from trainq.waiting import job_exit_status, report_end, wait_until_ended

Command = Callable[[Context, argparse.Namespace], int]


def submit(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs: the spec file (if any) with the flags over it; prints the job id."""
    if ctx.cwd is None:
        raise InvalidRequest("the current directory no longer exists; cd to one that does")
    file_data: dict[str, Any] | None
    if getattr(args, "like", None) is not None:
        if args.file:
            raise InvalidRequest("give either --like JOB or -f SPEC, not both")
        from trainq.client.specs import spec_of  # noqa: PLC0415 (only --like needs it)

        file_data = spec_of(ctx.client(), args.like)
    else:
        file_data = load_spec_file(args.file, ctx.cwd, ctx.environ) if args.file else None
    flags = submit_flags(vars(args), args.command_argv)
    spec = build_spec(file_data, flags, ctx.cwd, ctx.environ)
    if file_data is None and spec.get("command") is None and spec.get("image") is None:
        # The daemon would refuse it too, but only the CLI can say which flags to use. A spec
        # file goes to the daemon, which names its misspelt key (`comand`) or missing one.
        raise InvalidRequest(
            "nothing to run: put the job's command after `--` "
            "(trainq submit [options] -- python3 train.py), or give --image IMAGE or -f SPEC"
        )
    client = ctx.client()
    if getattr(args, "sweep", None):
        from trainq import groups  # noqa: PLC0415 (only a sweep needs it)

        return groups.submit_sweep(ctx, client, spec, args, submit_token(args))
    job = client.post_jobs(spec, submit_token(args))
    # The id (or record) goes out before any waiting, so `id=$(trainq submit --wait ...)`
    # style scripts and a person watching both see it at once.
    ctx.print(pretty_json(job) if args.json else str(job["id"]))
    if not args.wait:
        return 0
    if getattr(args, "follow", False):  # its output until it ends, then how it ended
        from trainq.logs import print_logs  # noqa: PLC0415

        print_logs(ctx, client, int(job["id"]), {"follow": True, "stream": "both"})
    return wait_until_ended(ctx, client, int(job["id"]))


def submit_token(args: argparse.Namespace) -> str:
    """The submission's client token: --token, else a fresh one, so the CLI's own resend
    after a lost answer never queues it twice (trainq.client.api.Api.post_jobs)."""
    given: str | None = getattr(args, "token", None)
    return given or new_token()


def wait(ctx: Context, args: argparse.Namespace) -> int:
    """Block until the job has ended; the exit status says how it ended."""
    client = ctx.client()
    if getattr(args, "group", None) is not None:
        from trainq import groups  # noqa: PLC0415

        return groups.wait_group(ctx, client, args.group)
    job = client.get_job(args.job)
    if job.get("state") in TERMINAL:
        report_end(ctx, job)
        return job_exit_status(job)
    return wait_until_ended(ctx, client, args.job, state=job.get("state"))


def stop(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs/{id}/stop; prints the state the job is in now (STOPPING or STOPPED),
    after its id when there are several."""
    from trainq.selection import Filters, each, filters_of, jobs_to_act_on  # noqa: PLC0415

    jobs = list(getattr(args, "jobs", None) or [])
    filters = filters_of(args)
    if not jobs and filters.group is not None and filters == Filters(group=filters.group):
        from trainq import groups  # noqa: PLC0415

        return groups.stop_group(ctx, filters.group, args.grace)
    client = ctx.client()
    if len(jobs) == 1 and not filters.given():
        job = client.post_job_stop(jobs[0], grace_seconds=args.grace)
        ctx.print(str(job.get("state", "?")))
        return 0

    def act(job_id: int) -> str:
        job = client.post_job_stop(job_id, grace_seconds=args.grace)
        return f"{job_id} {job.get('state', '?')}"

    return each(ctx, jobs_to_act_on(ctx, args), act)


def ls(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/jobs: a table of jobs (unfinished ones unless --all or an ended --state)."""
    group = getattr(args, "group", None)  # a sweep's jobs: ended ones too
    everything = (
        args.all or group is not None or (args.state is not None and args.state in TERMINAL)
    )
    query = {"include_ended": everything, "state": args.state, "user": args.user, "group": group}
    client = ctx.client()
    if args.all:
        # --all pages through every job; without it, one page and a hint when more match.
        listed = client.all_jobs(**query)
        body: Any = {"jobs": listed, "total": len(listed), "next": None}
    else:
        body = client.get_jobs(**query)
    if args.json:
        ctx.print(pretty_json(body))
        return 0
    jobs: list[Any] = body.get("jobs", []) if isinstance(body, dict) else []
    if not jobs:
        hint = "" if everything else " (`trainq ls --all` lists ended ones too)"
        ctx.say(f"no jobs{hint}")
        return 0
    from trainq.job_tables import job_table  # noqa: PLC0415 (rich: ~90 ms)
    from trainq.render import options_for  # noqa: PLC0415

    ctx.print(job_table(jobs, options_for(ctx.stdout, ctx.environ, ctx.now()), wide=args.wide))
    if body.get("next"):
        more = "" if group is None else f" --group {group}"
        ctx.say(
            f"showing {len(jobs)} of {body.get('total')}; `trainq ls{more} --all` lists them all"
        )
    return 0


def show(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/jobs/{id}: every field of the job, its spec and its attempts."""
    job = ctx.client().get_job(args.job)
    if args.json:
        ctx.print(pretty_json(job))
        return 0
    from trainq.job_detail import job_detail  # noqa: PLC0415 (rich)
    from trainq.render import options_for  # noqa: PLC0415

    opts = options_for(ctx.stdout, ctx.environ, ctx.now())
    ctx.print(job_detail(job, opts, all_fields=getattr(args, "all_fields", True)))
    if job.get("attempts"):
        from trainq import metric_lines  # noqa: PLC0415

        lines = metric_lines.for_show(ctx, int(job["id"]))
        if lines:
            ctx.print(lines)
    return 0


def logs(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/jobs/{id}/logs: the attempt's output as it arrives (trainq.logs)."""
    from trainq.logs import print_logs, query_for  # noqa: PLC0415

    print_logs(ctx, ctx.client(), args.job, query_for(args, ctx.now()))
    return 0


def gpus(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/gpus: each GPU, the job holding it, and processes trainq did not start."""
    body = ctx.client().get_gpus()
    if args.json:
        ctx.print(pretty_json(body))
        return 0
    from trainq.job_tables import gpu_table  # noqa: PLC0415 (rich)
    from trainq.render import options_for  # noqa: PLC0415

    ctx.print(gpu_table(body, options_for(ctx.stdout, ctx.environ, ctx.now())))
    return 0


def health(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/health: one line (or the record with --json)."""
    body = ctx.client().get_health()
    ctx.print(pretty_json(body) if args.json else health_line(body, ctx.now()))
    return 0


def report(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/report: usage per user (trainq.report)."""
    from trainq import report as usage  # noqa: PLC0415 (rich only where it draws)

    return usage.run(ctx, args)


def users(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/users: each user's recent usage, share and work (trainq.users)."""
    from trainq import users as shares  # noqa: PLC0415 (rich only where it draws)

    return shares.run(ctx, args)


def top(ctx: Context, args: argparse.Namespace) -> int:
    """The live full-screen view (trainq.top)."""
    from trainq import top as live_view  # noqa: PLC0415 (rich only where it draws)

    return live_view.run(ctx, args)


def export(ctx: Context, args: argparse.Namespace) -> int:
    """A job as a Slurm, Kubernetes or SageMaker artifact (trainq.export_command)."""
    from trainq import export_command  # noqa: PLC0415 (pydantic only where it validates)

    return export_command.export(ctx, args)


def metrics(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/jobs/{id}/metrics: latest and best values and a plot (trainq.metric_lines)."""
    from trainq import metric_lines  # noqa: PLC0415

    return metric_lines.run(ctx, args)


def tune(ctx: Context, args: argparse.Namespace) -> int:
    """Start, list, show, stop tuning experiments (trainq.tune_command)."""
    from trainq import tune_command  # noqa: PLC0415

    return tune_command.run(ctx, args)


def ui(ctx: Context, args: argparse.Namespace) -> int:
    """The web pages through a local forwarder (trainq.ui_forward)."""
    from trainq import ui_forward  # noqa: PLC0415 (asyncio only where it serves)

    ctx.client().get_health()  # no daemon: its one-line error, no URL
    return ui_forward.run(ctx.socket_path, args.port, ctx.stdout)


def requeue(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs/{id}/requeue; prints the new job's id."""
    job = ctx.client().post_job_requeue(args.job)
    ctx.print(pretty_json(job) if args.json else str(job["id"]))
    return 0


def _sharing(name: str) -> Command:
    """A command of trainq.sharing_commands, imported when it runs."""

    def run(ctx: Context, args: argparse.Namespace) -> int:
        from trainq import sharing_commands  # noqa: PLC0415 (only these commands need it)

        command: Command = getattr(sharing_commands, name)
        return command(ctx, args)

    return run


COMMANDS: dict[str, Command] = {
    "submit": submit,
    "stop": stop,
    "ls": ls,
    "show": show,
    "logs": logs,
    "wait": wait,
    "gpus": gpus,
    "health": health,
    "report": report,
    "users": users,
    "top": top,
    "export": export,
    "requeue": requeue,
    "metrics": metrics,
    "tune": tune,
    "ui": ui,
    **{name: _sharing(name) for name in ("hold", "release", "update", "rm", "drain", "resume")},
}
