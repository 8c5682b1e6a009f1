"""The `ls` and `gpus` tables (laid out by trainq.render)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainq.humanize import (
    format_ago,
    format_stamp,
    gpus_cell,
    job_reason,
    job_runtime,
    one_line,
    shorten,
    shown_state,
)
from trainq.inert import Drawn, inert_data
from trainq.render import Column, RenderOptions, draw, plain_table, rich_table, state_style


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
    plain = None if opts.color or opts.width else plain_table(columns, rows)
    if plain is not None:
        return plain
    table, width = rich_table(columns, rows, opts, {"STATE": state_style})
    return draw(opts, [table], width)


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
    table, width = rich_table(columns, rows, opts)
    note = "" if backend == "nvml" else f"(backend: {backend})\n"
    host = gpu_list.get("host_drain")
    if isinstance(host, dict):
        note += f"DRAINED: the whole host, {_drained_cell(host)}; nothing new starts\n"
    return Drawn(draw(opts, [table], width) + note)


def _drained_cell(drain: Any) -> str:
    if not isinstance(drain, dict):
        return "-"
    return one_line(f"by {drain.get('by', '?')}: {drain.get('reason', '')}")
