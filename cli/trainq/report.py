"""`trainq report`: GPU-hours, jobs, failures and idle GPU-hours per user (or per class) over a
period, as
trainqd computes them from its records (GET /v1/report): a table, `--json` or `--csv`."""

from __future__ import annotations

import argparse
import csv
import io
from collections.abc import Mapping
from typing import Any

from trainq.client.api import Api
from trainq.context import Context
from trainq.humanize import format_stamp, pretty_json

# The first column is the grouping: "user" or "class", as the report says.
COLUMNS = ("jobs", "completed", "failed", "stopped", "gpu_hours", "idle_gpu_hours")
HEADERS = ("JOBS", "DONE", "FAILED", "STOPPED", "GPU-H", "IDLE GPU-H")


def fetch(client: Api, since: str, by: str) -> Mapping[str, Any]:
    result: Mapping[str, Any] = client.get_report(since=since, by=by)
    return result


def as_csv(report: Mapping[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    by = report["by"]
    writer.writerow((by, *COLUMNS))
    for row in report["rows"]:
        writer.writerow([row[by], *(row[column] for column in COLUMNS)])
    return out.getvalue()


def as_table(report: Mapping[str, Any]) -> str:
    from rich.console import Console  # noqa: PLC0415 (rich only for the commands that draw)
    from rich.table import Table  # noqa: PLC0415

    table = Table(
        title=f"since {format_stamp(report['since'])}",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    by = report["by"]
    table.add_column(by.upper(), justify="left")
    for header in HEADERS:
        table.add_column(header, justify="right")
    totals = dict.fromkeys(COLUMNS, 0.0)
    for row in report["rows"]:
        table.add_row(row[by], *(_cell(row[column]) for column in COLUMNS))
        for column in COLUMNS:
            totals[column] += row[column]
    if len(report["rows"]) > 1:
        table.add_row("total", *(_cell(totals[column]) for column in COLUMNS))
    out = io.StringIO()
    Console(file=out, width=100, color_system=None, markup=False).print(table)
    return out.getvalue()


def _cell(value: float) -> str:
    return f"{value:.2f}" if isinstance(value, float) and not value.is_integer() else f"{value:g}"


def run(ctx: Context, args: argparse.Namespace) -> int:
    report = fetch(ctx.client(), args.since, args.by)
    if args.json:
        ctx.print(pretty_json(report))
    elif args.csv:
        ctx.print(as_csv(report))
    elif not report["rows"]:
        ctx.print(f"no jobs since {format_stamp(report['since'])}")
    else:
        ctx.print(as_table(report))
    return 0
