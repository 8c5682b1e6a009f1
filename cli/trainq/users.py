"""`trainq users`: each user's recent use of the workstation (GPU-hours decayed with the
fair share half-life), their share of it, and the jobs and GPUs they have running and
waiting (GET /v1/users). Fair share orders users' waiting jobs by this usage: the lower,
the sooner."""

from __future__ import annotations

import argparse
import io
from collections.abc import Mapping
from typing import Any

from trainq.context import Context
from trainq.humanize import pretty_json

HEADERS = ("USER", "GPU-H", "SHARE", "CPU-H", "RUNNING", "GPUS", "WAITING", "GPUS")


def rows(listing: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            str(user["user"]),
            f"{user['gpu_hours']:.2f}",
            f"{100 * user['share']:.0f}%",
            f"{user['cpu_slot_hours']:.2f}",
            str(user["running_jobs"]),
            str(user["running_gpus"]),
            str(user["waiting_jobs"]),
            str(user["waiting_gpus"]),
        ]
        for user in listing["users"]
    ]


def as_table(listing: Mapping[str, Any]) -> str:
    from rich.console import Console  # noqa: PLC0415 (rich only for the commands that draw)
    from rich.table import Table  # noqa: PLC0415

    days = listing["half_life_days"]
    title = f"usage halved every {days:g} days" if days else "fair share is off"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for header in HEADERS:
        table.add_column(header, justify="left" if header == "USER" else "right")
    for row in rows(listing):
        table.add_row(*row)
    out = io.StringIO()
    Console(file=out, width=100, color_system=None, markup=False).print(table)
    return out.getvalue()


def run(ctx: Context, args: argparse.Namespace) -> int:
    listing = ctx.client().get_users()
    if args.json:
        ctx.print(pretty_json(listing))
    elif not listing["users"]:
        ctx.print("no usage and no unfinished jobs")
    else:
        ctx.print(as_table(listing))
    return 0
