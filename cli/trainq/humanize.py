"""The daemon's JSON in words a person reads: durations, times, reasons, one-line summaries.

Plain string functions over plain dicts, with no rich and no pydantic, so the commands on
the fast path (`submit --wait`, `wait`, `health`) can use them for free; the tables and the
`show` view that are built from them are in `trainq.job_tables` and `trainq.job_detail`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from typing import Any

from trainq.core.states import JobState

REASON_CHARS = 60  # how much of a reason `ls` shows without --wide


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp from the wire, or None for null or something unreadable."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    # The wire is UTC; a stamp without an offset is read as UTC rather than local time.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def format_duration(seconds: float) -> str:
    """3m12s: the two largest units, no spaces, never negative."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _coarse(seconds: float) -> str:
    total = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size:
            return f"{total // size}{unit}"
    return f"{total}s"


def format_relative(when: datetime, now: datetime) -> str:
    """`2m ago`, `just now`, or `in 5s` for a moment still to come."""
    delta = (now - when).total_seconds()
    if delta >= 0:
        return "just now" if delta < 1 else f"{_coarse(delta)} ago"
    return f"in {_coarse(-delta)}"


def format_absolute(when: datetime, tz: tzinfo | None = None) -> str:
    """`2026-05-01 12:00:03` in `tz` (None: this machine's local time)."""
    return when.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def format_time(value: Any, now: datetime, tz: tzinfo | None = None) -> str:
    """`2026-05-01 12:00:03 (5m ago)`, or `-` when there is no such moment."""
    when = parse_time(value)
    if when is None:
        return "-"
    return f"{format_absolute(when, tz)} ({format_relative(when, now)})"


def format_ago(value: Any, now: datetime) -> str:
    when = parse_time(value)
    return "-" if when is None else format_relative(when, now)


def format_stamp(value: Any, tz: tzinfo | None = None) -> str:
    when = parse_time(value)
    return "-" if when is None else format_absolute(when, tz)


def one_line(text: str) -> str:
    """All of `text` on one line: runs of whitespace (newlines too) become one space."""
    return " ".join(text.split())


def headline(text: str) -> str:
    """The line of a reason that says the most: the last line of a Python traceback (where
    the exception is), otherwise the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    traceback_at = next((i for i, line in enumerate(lines) if line.startswith("Traceback (")), -1)
    if traceback_at >= 0 and traceback_at < len(lines) - 1:
        return one_line(lines[-1])
    return one_line(lines[0])


def shorten(text: str, limit: int = REASON_CHARS) -> str:
    """A reason's headline, cut to `limit` characters ending in "..." when anything is left
    out (further lines included)."""
    line = headline(text)
    more = len([part for part in text.splitlines() if part.strip()]) > 1
    if len(line) <= limit and not more:
        return line
    if len(line) + 3 <= limit:
        return f"{line}..."
    return line[: max(0, limit - 3)].rstrip() + "..."


def wait_reason(waiting: Any) -> str:
    """Why a PENDING job waits, from the daemon's structured record, in the one wording of
    `trainq.core.reasons.render` (times in this machine's zone); "" for a record this
    version cannot read (the daemon's own words, `pending_reason`, are used then)."""
    from trainq.core.reasons import Wait, WaitReason, render  # noqa: PLC0415 (dataclasses)

    if not isinstance(waiting, Mapping):
        return ""
    details: dict[str, Any] = {name: waiting.get(name) for name in WaitReason.__dataclass_fields__}
    try:
        details["kind"] = Wait(str(details["kind"]))
        return render(WaitReason(**details))
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def job_reason(job: Mapping[str, Any]) -> str:
    """Why the job is where it is (waiting, failed, stopped); empty when there is nothing."""
    if job.get("state") == "PENDING" and (waiting := wait_reason(job.get("waiting"))):
        return waiting
    for key in ("pending_reason", "failure_reason", "stop_reason"):
        value = job.get(key)
        if isinstance(value, str) and value.strip():
            return value
    if job.get("gpu_idle_since"):  # a running job flagged by the idle rule
        return f"GPUs idle since {format_stamp(job['gpu_idle_since'])}"
    return ""


def job_runtime(job: Mapping[str, Any], now: datetime) -> str:
    """How long the job has run (or ran): the sum of its attempts' running times, so time
    back in the queue (a preemption, a retry's backoff) is not counted; `-` if it never
    ran. A record without attempts counts from its start to its end (or now)."""
    started = parse_time(job.get("started_at"))
    if started is None:
        return "-"
    job_end = parse_time(job.get("ended_at"))
    attempts = [a for a in job.get("attempts") or [] if isinstance(a, Mapping)]
    spans = [(parse_time(a.get("started_at")), parse_time(a.get("ended_at"))) for a in attempts]
    if not any(start for start, _ in spans):
        return format_duration(((job_end or now) - started).total_seconds())
    # An attempt still open has run until now, or until the job's end if its end is lost.
    ran = sum(((end or job_end or now) - start).total_seconds() for start, end in spans if start)
    return format_duration(ran)


def gpus_cell(job: Mapping[str, Any]) -> str:
    """GPUs asked for, and the indices held: `2 [0,1]`; `-` for a CPU job."""
    spec = job.get("spec")
    wanted = spec_gpu_total(spec) if isinstance(spec, dict) else 0
    held = job.get("gpus") or []
    if not wanted and not held:
        return "-"
    count = str(wanted or len(held))
    return f"{count} [{','.join(str(i) for i in held)}]" if held else count


def spec_gpu_total(spec: Mapping[str, Any]) -> int:
    """The GPUs of all a job's nodes together (its `gpus` is per node)."""
    groups = [g for g in spec.get("instance_groups") or [] if isinstance(g, dict)]
    if groups:
        return sum(_count(g.get("instance_count"), 1) * _count(g.get("gpus"), 0) for g in groups)
    return _count(spec.get("instance_count"), 1) * _count(spec.get("gpus"), 0)


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def exit_cell(attempt: Mapping[str, Any]) -> str:
    """How an attempt's process ended: its exit code, or the signal that killed it."""
    signal, name = attempt.get("signal"), attempt.get("signal_name")
    if signal is not None:
        return f"{name} ({signal})" if name else f"signal {signal}"
    code = attempt.get("exit_code")
    return "-" if code is None else str(code)


def shown_state(job: Mapping[str, Any]) -> str:
    """The state as trainq prints it: a job its time limit stopped is TIMEOUT."""
    state = str(job.get("state", "?"))
    return "TIMEOUT" if state == "STOPPED" and job.get("timed_out") is True else state


def end_summary(job: Mapping[str, Any]) -> str:
    """`job 12 FAILED: ValueError: bad shape`: what `wait` says when a job has ended."""
    reason = job_reason(job)
    line = f"job {job.get('id')} {shown_state(job)}"
    return f"{line}: {shorten(reason, 200)}" if reason else line


def health_line(health: Mapping[str, Any], now: datetime) -> str:
    """`trainqd 0.1.0 ok, up 3h12m (pid 812); 4 GPUs (fake), 16 CPU slots; jobs: 2 RUNNING`."""
    started = parse_time(health.get("started_at"))
    uptime = format_duration((now - started).total_seconds()) if started else "?"
    counts = health.get("jobs")
    counts = counts if isinstance(counts, dict) else {}
    order = [str(state) for state in JobState] + sorted(set(counts) - set(JobState))
    jobs = ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s))
    return (
        f"trainqd {health.get('version', '?')} {health.get('status', '?')}, up {uptime} "
        f"(pid {health.get('pid', '?')}); {health.get('gpus', '?')} GPUs "
        f"({health.get('gpu_backend', '?')}), {health.get('cpu_slots', '?')} CPU slots; "
        f"jobs: {jobs or 'none'}{_draining(health.get('drains'))}"
    )


def _draining(drains: Any) -> str:
    """`; draining: host` or `; draining: GPUs 2,3`; nothing while nothing is drained."""
    if not isinstance(drains, list) or not drains:
        return ""
    gpus = [d.get("gpu") for d in drains if isinstance(d, dict)]
    if None in gpus:
        return "; draining: yes, the whole host"
    return "; draining: yes, GPUs " + ",".join(str(gpu) for gpu in gpus)


class JsonText(str):
    """JSON text, printed as it is: `--json` output is the daemon's answer unchanged (JSON
    escapes the C0 controls itself), never made inert as text for people is."""

    __slots__ = ()


def pretty_json(body: Any) -> JsonText:
    """The daemon's JSON as it came, indented for people (and still valid JSON)."""
    return JsonText(json.dumps(body, indent=2, ensure_ascii=False) + "\n")


def compact(value: Any) -> str:
    """A value of any JSON type on one line: `-` for null, lists comma-separated."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(v, str | int) for v in value):
        return ", ".join(str(v) for v in value) or "-"
    return json.dumps(value, ensure_ascii=False)
