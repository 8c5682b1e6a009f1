"""`trainq metrics JOB`: each metric's latest and best value and a sparkline of its series;
also the metric lines of `trainq show`. Plain text, no rich: one line per metric."""

from __future__ import annotations

import argparse
from typing import Any

from trainq.context import Context
from trainq.core.errors import Forbidden
from trainq.humanize import pretty_json

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 40


def sparkline(values: list[float], width: int = WIDTH) -> str:
    """The series in at most `width` bars (each the mean of its share of the points)."""
    if not values:
        return ""
    if len(values) > width:
        buckets = [
            values[i * len(values) // width : (i + 1) * len(values) // width] for i in range(width)
        ]
        values = [sum(b) / len(b) for b in buckets if b]
    low, high = min(values), max(values)
    span = high - low
    if span == 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / span * len(BARS)))] for v in values)


def number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}"


def step_text(step: float) -> str:
    return str(int(step)) if float(step).is_integer() else f"{step:g}"


def series_lines(attempt: dict[str, Any], *, plot: bool) -> list[str]:
    series: dict[str, Any] = attempt.get("series") or {}
    if not series:
        return []
    width = max(len(name) for name in series)
    lines = []
    for name, data in sorted(series.items()):
        latest = data.get("latest")
        latest_text = (
            "-" if latest is None else f"{number(latest[1])} at step {step_text(latest[0])}"
        )
        line = (
            f"{name:<{width}}  latest {latest_text}  best {number(data.get('best'))}"
            f" ({'min' if data.get('direction') == 'minimize' else 'max'})"
            f"  {data.get('count', 0)} reports"
        )
        if plot:
            line += "  " + sparkline([p[1] for p in data.get("points") or []])
        lines.append(line)
    if attempt.get("dropped"):
        lines.append(f"({attempt['dropped']} reports of further metrics dropped: too many series)")
    return lines


def run(ctx: Context, args: argparse.Namespace) -> int:
    """GET /v1/jobs/{id}/metrics: the latest attempt's metrics (or --attempt N's)."""
    body = ctx.client().get_job_metrics(args.job)
    if args.json:
        ctx.print(pretty_json(body))
        return 0
    attempts = body.get("attempts") or []
    if args.attempt is not None:
        attempts = [a for a in attempts if a.get("number") == args.attempt]
    with_series = [a for a in attempts if a.get("series")]
    if not with_series:
        ctx.say(
            f"job {args.job} has no metric reports"
            + ("" if args.attempt is None else f" in attempt {args.attempt}")
        )
        return 0
    attempt = with_series[-1]
    ctx.print(f"attempt {attempt.get('number')}")
    ctx.print("\n".join("  " + line for line in series_lines(attempt, plot=True)))
    return 0


def for_show(ctx: Context, job_id: int) -> str | None:
    """The metric lines `trainq show` adds, or None (no reports, or not yours to read)."""
    try:
        body = ctx.client().get_job_metrics(job_id)
    except Forbidden:
        return None
    attempts = [a for a in body.get("attempts") or [] if a.get("series")]
    if not attempts:
        return None
    lines = series_lines(attempts[-1], plot=False)
    return "metrics (attempt {}):\n{}".format(
        attempts[-1].get("number"), "\n".join("  " + line for line in lines)
    )
