"""Tables and views: the `ls` and `gpus` tables and the `show` view, laid out with rich.

rich costs ~40 ms to import and lays a table out at ~0.1 ms a cell, so only `ls`, `show` and
`gpus` import this module (lazily, in `trainq.commands`), and it imports rich only where it
draws with it: a table with no colour, no width limit and plain ASCII cells (`trainq ls`
into a pipe or a script) is laid out here, line for line as rich would (`_plain_table`).
Everything works from the daemon's JSON as plain dicts (pydantic stays off the CLI) and
returns a string, so it is tested without a terminal; the words in the cells come from
`trainq.humanize`.

Every string of the daemon's answer is made inert (`trainq.inert`) before it is laid out:
the user's text can neither act on the terminal nor pass for the CLI's own colours.

Output piped into another program has no colour, no width limit (rich wraps and cuts
nothing) and no trailing blanks, so `grep` and `awk` see whole lines. On a terminal, colour
follows NO_COLOR and TERM=dumb, and only free text gives way to a narrow window: the REASON
of `ls` is cut to fit, an attempt's reason and long values in `show` wrap; ids, states and
times are never cut (a line too long for the window is left to the terminal to wrap).
"""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, TextIO

from trainq.humanize import (
    compact,
    exit_cell,
    format_ago,
    format_duration,
    format_stamp,
    format_time,
    gpus_cell,
    job_reason,
    job_runtime,
    one_line,
    parse_time,
    shorten,
    shown_state,
)
from trainq.inert import Drawn, inert_data

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

UNBOUNDED_WIDTH = 100_000  # for output that is not going to a terminal: never wrap
PAD = 2  # blanks between columns
MIN_FREE_TEXT = 16  # the least room free text gets, however narrow the window
STATE_STYLES = {
    "PENDING": "yellow",
    "RUNNING": "green",
    "STOPPING": "magenta",
    "COMPLETED": "bold green",
    "FAILED": "bold red",
    "STOPPED": "yellow",
    "TIMEOUT": "yellow",
}


@dataclass(frozen=True)
class RenderOptions:
    """How to draw: at what moment, in which time zone (None: local), for what output."""

    now: datetime
    color: bool = False
    width: int | None = None  # None: not a terminal
    tz: tzinfo | None = None


def options_for(stream: TextIO, environ: Mapping[str, str], now: datetime) -> RenderOptions:
    """Colour and width for `stream`: only a terminal has a width or gets colour."""
    try:
        tty = stream.isatty()
    except ValueError:  # a closed stream
        tty = False
    if not tty:
        return RenderOptions(now=now)
    color = not environ.get("NO_COLOR") and environ.get("TERM") != "dumb"
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        width = 80
    return RenderOptions(now=now, color=color, width=width)


@dataclass(frozen=True)
class Column:
    header: str
    free_text: bool = False  # may give way to a narrow terminal
    wrap: bool = False  # gives way by wrapping (else by being cut short)


def _cut(text: str, room: int) -> str:
    from rich.cells import cell_len  # noqa: PLC0415 (see the module docstring)

    if cell_len(text) <= room:
        return text
    kept = text
    while kept and cell_len(kept) > room - 3:
        kept = kept[:-1]
    return kept.rstrip() + "..."


def _table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    opts: RenderOptions,
    styles: Mapping[str, Callable[[str], str]] | None = None,
) -> tuple[Table, int]:
    """A borderless table, and the console width that draws it without cutting a fixed
    column. On a terminal, free text that would not fit is cut (or left to wrap) here."""
    from rich.cells import cell_len  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    natural = [
        max([cell_len(col.header)] + [cell_len(row[i]) for row in rows])
        for i, col in enumerate(columns)
    ]
    fixed = sum(
        width + PAD for width, col in zip(natural, columns, strict=True) if not col.free_text
    )
    flexible = [i for i, col in enumerate(columns) if col.free_text]
    room = max(MIN_FREE_TEXT, (opts.width or UNBOUNDED_WIDTH) - fixed - PAD * len(flexible))
    table = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        padding=(0, PAD, 0, 0),
        header_style="bold" if opts.color else "",
    )
    for col in columns:
        table.add_column(col.header, no_wrap=not col.wrap, overflow="fold")
    style_of = styles or {}
    for row in rows:
        cells: list[RenderableType] = []
        for i, (col, value) in enumerate(zip(columns, row, strict=True)):
            text = _cut(value, room) if i in flexible and not col.wrap and opts.width else value
            style = style_of[col.header](value) if opts.color and col.header in style_of else ""
            cells.append(Text(text, style=style))
        table.add_row(*cells)
    return table, fixed + (room + PAD) * len(flexible)


def _plain_table(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> str | None:
    """The table as `_render(_table(...))` draws it with no colour and no width limit, for
    cells of printable ASCII (one character, one column); None for anything else, which
    rich draws."""
    cells = [[col.header for col in columns], *rows]
    if not all(cell.isascii() and cell.isprintable() for row in cells for cell in row):
        return None
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = (
        "".join(cell.ljust(w + PAD) for cell, w in zip(row, widths, strict=True)) for row in cells
    )
    return "".join(line.rstrip(" ") + "\n" for line in lines)


def _render(
    opts: RenderOptions, renderables: Iterable[RenderableType], min_width: int = 0
) -> Drawn:
    from rich.console import Console  # noqa: PLC0415

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=max(opts.width, min_width) if opts.width else UNBOUNDED_WIDTH,
        force_terminal=opts.color,
        no_color=not opts.color,
        color_system="standard" if opts.color else None,
        markup=False,  # names and reasons are the user's text, never markup
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    for renderable in renderables:
        console.print(renderable)
    return Drawn("".join(line.rstrip(" ") + "\n" for line in buffer.getvalue().splitlines()))


def _state_style(state: str) -> str:
    return STATE_STYLES.get(state, "")


def sweep_points(jobs: Iterable[Mapping[str, Any]]) -> dict[Any, str]:
    """Each listed job of a group (a sweep) by the hyperparameters in which the group's
    listed jobs differ, as `lr=0.01,batch=64`: which point of the grid it is."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for job in jobs:
        if job.get("group_id") is not None:
            groups.setdefault(job["group_id"], []).append(job)
    points: dict[Any, str] = {}
    for members in groups.values():
        values = [dict((job.get("spec") or {}).get("hyperparameters") or {}) for job in members]
        keys = list(dict.fromkeys(key for hps in values for key in hps))  # first seen, first
        varying = [key for key in keys if len({hps.get(key) for hps in values}) > 1]
        if not varying:
            continue
        for job, hps in zip(members, values, strict=True):
            points[job.get("id")] = ",".join(f"{key}={hps.get(key, '')}" for key in varying)
    return points


def job_table(jobs: Iterable[Mapping[str, Any]], opts: RenderOptions, *, wide: bool = False) -> str:
    """The `ls` table, one job a line, in the daemon's order. --wide: absolute submit times,
    each job's group and whole reasons (on one line). A sweep's jobs also show their point
    (the values in which they differ), in a column that appears only when one is listed."""
    jobs = inert_data(list(jobs))
    points = sweep_points(jobs)
    columns = [Column(h) for h in ("ID", "NAME", "STATE", "USER", "GPUS", "PRIO")]
    columns += [Column("GROUP")] if wide else []
    columns += [Column("SWEEP POINT")] if points else []
    times = ("SUBMITTED", "RUNTIME", "ATTEMPTS") if wide else ("AGE", "RUNTIME")
    columns += [Column(h) for h in times] + [Column("REASON", free_text=not wide)]
    rows = []
    for job in jobs:
        owner = job.get("owner")
        reason = job_reason(job)
        if job.get("state") == "PENDING" and isinstance(job.get("place"), int):
            # Its place in the queue at the last plan: 1 is considered first.
            reason = f"#{job['place']} {reason}"
        row = [
            str(job.get("id", "?")),
            str(job.get("name", "")),
            shown_state(job),
            str(owner.get("user", "?")) if isinstance(owner, dict) else "?",
            gpus_cell(job),
            str(job.get("priority", 0)),
        ]
        if wide:
            row += [str(job.get("group_id") or "-")]
        if points:
            row += [points.get(job.get("id"), "-")]
        if wide:
            row += [format_stamp(job.get("created_at"), opts.tz), job_runtime(job, opts.now)]
            row += [str(len(job.get("attempts") or [])), one_line(reason)]
        else:
            row += [format_ago(job.get("created_at"), opts.now), job_runtime(job, opts.now)]
            row += [shorten(reason)]
        rows.append(row)
    plain = None if opts.color or opts.width else _plain_table(columns, rows)
    if plain is not None:
        return plain
    table, width = _table(columns, rows, opts, {"STATE": _state_style})
    return _render(opts, [table], width)


def gpu_table(gpu_list: Mapping[str, Any], opts: RenderOptions) -> str:
    """The `gpus` table: each GPU, what holds it, and whether a new job could have it."""
    gpu_list = inert_data(dict(gpu_list))
    gpus = gpu_list.get("gpus") or []
    backend = gpu_list.get("backend", "?")
    if not gpus:
        return f"no GPUs (backend: {backend}); jobs with gpus = 0 still run\n"
    headers: tuple[str, ...] = ("INDEX", "NAME", "UUID", "MEMORY", "JOB", "OTHER PIDS")
    headers += ("AVAILABLE",)
    # A drained GPU takes no new job: who drained it and why, in a column of its own that
    # appears only while something is drained.
    drained = any(isinstance(gpu.get("drain"), dict) for gpu in gpus)
    headers += ("DRAINED",) if drained else ()
    rows = []
    for gpu in gpus:
        used, total = gpu.get("memory_used_mib"), gpu.get("memory_total_mib")
        job_id = gpu.get("job_id")
        rows.append(
            [
                str(gpu.get("index", "?")),
                str(gpu.get("name", "?")),
                str(gpu.get("uuid", "?")),
                f"{used}/{total} MiB" if used is not None else f"{total} MiB",
                "-" if job_id is None else str(job_id),
                ",".join(str(pid) for pid in gpu.get("foreign_pids") or []) or "-",
                "yes" if gpu.get("available") else "no",
                *([_drained_cell(gpu.get("drain"))] if drained else []),
            ]
        )
    columns = [Column(h, free_text=h == "DRAINED") for h in headers]
    table, width = _table(columns, rows, opts)
    note = "" if backend == "nvml" else f"(backend: {backend})\n"
    host = gpu_list.get("host_drain")
    if isinstance(host, dict):
        note += f"DRAINED: the whole host, {_drained_cell(host)}; nothing new starts\n"
    return Drawn(_render(opts, [table], width) + note)


def _drained_cell(drain: Any) -> str:
    if not isinstance(drain, dict):
        return "-"
    return one_line(f"by {drain.get('by', '?')}: {drain.get('reason', '')}")


# --- `show` ---

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


def _node_line(node: Mapping[str, Any]) -> str:
    """A node of a job of several nodes: `algo-2 (workers, GPUs 2,3)`."""
    gpus = ",".join(str(index) for index in node.get("gpus") or []) or "-"
    return f"{node.get('name', '?')} ({node.get('group', '?')}, GPUs {gpus})"


def _field_value(key: str, value: Any, opts: RenderOptions) -> str:
    if key in _TIME_FIELDS:
        return format_time(value, opts.now, opts.tz)
    if key == "owner" and isinstance(value, dict):
        return f"{value.get('user', '?')} (uid {value.get('uid', '?')})"
    if key == "command" and isinstance(value, list):
        return shlex.join(str(arg) for arg in value)
    if key == "gpus" and isinstance(value, list):
        return ",".join(str(index) for index in value) or "-"
    if key == "nodes" and isinstance(value, list):
        return "; ".join(_node_line(node) for node in value if isinstance(node, dict))
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
    skip = ("id", "name", "spec", "attempts", "timed_out")
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
        table, table_width = _table(columns, attempt_rows, opts)
        parts.append(table)
        width = max(width, table_width)
    else:
        parts.append(Text("none yet"))
    return _render(opts, parts, width)
