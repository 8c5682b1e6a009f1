"""The `show` view: a job's fields, its spec and its attempts (laid out by trainq.render)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainq.humanize import (
    compact,
    exit_cell,
    format_duration,
    format_stamp,
    format_time,
    job_runtime,
    one_line,
    parse_time,
    shown_state,
)
from trainq.inert import inert_data
from trainq.node_rows import HEADERS as NODE_HEADERS
from trainq.node_rows import ML_ROOT, node_rows
from trainq.render import MIN_FREE_TEXT, PAD, Column, RenderOptions, draw, rich_table

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text


# The record's fields in the order `show` lists them. Fields not named here (added to the
# record later) follow in the record's own order, so `show` never hides one.
_TIME_FIELDS = ("created_at", "started_at", "ended_at", "next_attempt_at")
_DETAIL_ORDER = (
    "state",
    "owner",
    "priority",
    "runtime",
    "gpus",
    "gpu_uuids",
    "job_dir",
    *_TIME_FIELDS[:3],
    "pending_reason",
    "place",
    "next_attempt_at",
    "failure_reason",
    "stop_reason",
)
_SPEC_ORDER = (
    "name",
    "command",
    "image",
    "engine",
    "network",
    "run_as_root",
    "working_dir",
    "gpus",
    "priority",
    "class",
    "max_runtime_seconds",
    "stop_grace_seconds",
    "max_retries",
    "retry_exit_codes",
    "retry_backoff_seconds",
    "hyperparameters",
    "environment",
    "channels",
)
_SPEC_TABLES = ("hyperparameters", "environment", "channels")
_ATTEMPT_FIELDS = frozenset(
    {"number", "gpus", "started_at", "ended_at", "exit_code", "signal", "signal_name"}
    | {"outcome", "retried", "reason", "container"}
    | {"gpu_util_peak", "gpu_util_mean", "gpu_memory_peak_mib", "gpu_idle_seconds"}
    | {"opt_ml"}
)
# Beside an attempt whose trainer found no /opt/ml (only SAGEMAKER_BASE_DIR led to its files).
NO_OPT_ML_NOTE = "(no /opt/ml: the ml root was only in SAGEMAKER_BASE_DIR)"


def _gpu_use(attempt: Mapping[str, Any]) -> str:
    """What trainqd sampled of an attempt's GPUs: `40%/87%` (mean/peak utilization)."""
    mean, peak = attempt.get("gpu_util_mean"), attempt.get("gpu_util_peak")
    if mean is None or peak is None:
        return "-"
    idle = attempt.get("gpu_idle_seconds") or 0
    return f"{mean:.0f}%/{peak:.0f}%" + (f" idle {format_duration(idle)}" if idle >= 1 else "")


def _ordered(
    record: Mapping[str, Any], first: Iterable[str], skip: Iterable[str] = ()
) -> list[str]:
    skipped = set(skip)
    named = [key for key in first if key in record and key not in skipped]
    return named + [key for key in record if key not in named and key not in skipped]


def _field_value(key: str, value: Any, opts: RenderOptions) -> str:
    if key in _TIME_FIELDS:
        return format_time(value, opts.now, opts.tz)
    if key == "owner" and isinstance(value, dict):
        return f"{value.get('user', '?')} (uid {value.get('uid', '?')})"
    if key == "command" and isinstance(value, list):
        return shlex.join(str(arg) for arg in value)
    if key == "gpus" and isinstance(value, list):
        return ",".join(str(index) for index in value) or "-"
    if key.endswith("_seconds") and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g} ({format_duration(value)})" if value >= 60 else f"{value:g}"
    return compact(value)


def _channel_value(channel: Any) -> str:
    if not isinstance(channel, dict):
        return compact(channel)
    options = ", ".join(
        f"{key}={compact(value)}"
        for key, value in channel.items()
        if key != "source" and value is not None
    )
    source = compact(channel.get("source"))
    return f"{source} ({options})" if options else source


def _spec_rows(spec: Mapping[str, Any], opts: RenderOptions) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key in _ordered(spec, _SPEC_ORDER):
        value = spec[key]
        if key in _SPEC_TABLES and isinstance(value, dict):
            rows.append((key, "" if value else "-"))
            show = _channel_value if key == "channels" else compact
            rows += [(f"  {name}", show(entry)) for name, entry in value.items()]
        else:
            rows.append((key, _field_value(key, value, opts)))
    return rows


def _grid(rows: Sequence[tuple[str, str]], opts: RenderOptions, label_width: int) -> Table:
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    grid = Table.grid(padding=(0, PAD))
    grid.add_column(style="bold" if opts.color else "", no_wrap=True, min_width=label_width)
    grid.add_column(overflow="fold")  # long values wrap on a terminal; never cut
    for label, value in rows:
        grid.add_row(label, Text(value))
    return grid


def _attempt_rows(
    attempts: Iterable[Any], opts: RenderOptions, containers: bool = False, sampled: bool = False
) -> list[list[str]]:
    rows = []
    for attempt in attempts:
        if not isinstance(attempt, dict):
            continue
        started, ended = parse_time(attempt.get("started_at")), parse_time(attempt.get("ended_at"))
        ran = format_duration(((ended or opts.now) - started).total_seconds()) if started else "-"
        reason = one_line(str(attempt.get("reason") or ""))
        extra = {key: value for key, value in attempt.items() if key not in _ATTEMPT_FIELDS}
        if extra:  # fields added to the record later still show
            reason = " ".join(filter(None, [reason, compact(extra)]))
        if attempt.get("opt_ml") is False:
            reason = " ".join(filter(None, [reason, NO_OPT_ML_NOTE]))
        rows.append(
            [
                str(attempt.get("number", "?")),
                ",".join(str(index) for index in attempt.get("gpus") or []) or "-",
                format_stamp(attempt.get("started_at"), opts.tz),
                format_stamp(attempt.get("ended_at"), opts.tz),
                ran,
                exit_cell(attempt),
                compact(attempt.get("outcome")),
                "yes" if attempt.get("retried") else "no",
                *([str(attempt.get("container") or "-")] if containers else []),
                *([_gpu_use(attempt)] if sampled else []),
                reason or "-",
            ]
        )
    return rows


def _is_set(value: Any) -> bool:
    return value not in (None, "", [], {}, False)


def job_detail(job: Mapping[str, Any], opts: RenderOptions, all_fields: bool = True) -> str:
    """The `show` view: the record's fields, its spec, and its attempts as a table; without
    `all_fields`, only the fields and spec keys that hold something."""
    job = inert_data(dict(job))
    if not all_fields:
        job = {key: value for key, value in job.items() if _is_set(value) or key == "state"}
        spec = job.get("spec")
        if isinstance(spec, dict):
            job["spec"] = {key: value for key, value in spec.items() if _is_set(value)}
    from rich.cells import cell_len  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    def heading(text: str) -> Text:
        return Text(text, style="bold underline" if opts.color else "")

    # A time limit's end is in the state shown (TIMEOUT), not a field of its own.
    skip = ("id", "name", "spec", "attempts", "timed_out", "nodes")
    fields = _ordered(job, _DETAIL_ORDER, skip=skip)
    rows = [
        (key, shown_state(job) if key == "state" else _field_value(key, job[key], opts))
        for key in fields
    ]
    if parse_time(job.get("started_at")) is not None:
        rows.insert(1 if fields[:1] == ["state"] else 0, ("ran for", job_runtime(job, opts.now)))
    spec = job.get("spec")
    spec_rows = _spec_rows(spec, opts) if isinstance(spec, dict) else []
    # One label width for both sections, so their values line up.
    label_width = max(cell_len(label) for label, _ in [*rows, *spec_rows, ("", "")])
    width = label_width + PAD + MIN_FREE_TEXT
    title = f"Job {job.get('id', '?')}  {job.get('name', '')}"
    parts: list[RenderableType] = [heading(title), _grid(rows, opts, label_width)]
    if spec_rows:
        parts += [Text(""), heading("Spec"), _grid(spec_rows, opts, label_width)]
    nodes = node_rows(job)
    if nodes:  # a job of several nodes: a table of its own
        columns = [Column(h) for h in NODE_HEADERS] + [Column(ML_ROOT, free_text=True)]
        table, table_width = rich_table(columns, nodes, opts)
        parts += [Text(""), heading("Nodes"), table]
        width = max(width, table_width)
    parts += [Text(""), heading("Attempts")]
    attempts = job.get("attempts") or []
    containers = any(isinstance(a, dict) and a.get("container") for a in attempts)
    sampled = any(isinstance(a, dict) and a.get("gpu_util_mean") is not None for a in attempts)
    attempt_rows = _attempt_rows(attempts, opts, containers, sampled)
    if attempt_rows:
        headers: tuple[str, ...] = ("#", "GPUS", "STARTED", "ENDED", "RAN", "EXIT", "OUTCOME")
        headers += ("RETRIED", "CONTAINER") if containers else ("RETRIED",)
        headers += ("GPU USE",) if sampled else ()
        columns = [Column(h) for h in headers] + [Column("REASON", free_text=True, wrap=True)]
        table, table_width = rich_table(columns, attempt_rows, opts)
        parts.append(table)
        width = max(width, table_width)
    else:
        parts.append(Text("none yet"))
    return draw(opts, parts, width)
