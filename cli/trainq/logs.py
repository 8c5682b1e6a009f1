"""`trainq logs` (and `submit --wait --follow`): a job's output as trainqd sends it.

Both streams come in the order they were written (trainqd merges them from the monitor's
timeline); `-t` asks for each line with its time and stream (JSON lines, printed here as
`TIME STREAM TEXT`); `-n` and `--since` pick where to begin; `-f` follows to the job's end,
from its last 10 lines unless told otherwise.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from trainq.flag_values import parse_seconds

if TYPE_CHECKING:
    import argparse

    from trainq.client.api import Api
    from trainq.context import Context

FOLLOW_TAIL = 10  # `logs -f` starts from the last lines, as `tail -f` does


def parse_since(text: str) -> str:
    """A duration ago (`10m`, `2h`) or a time (ISO 8601, local unless it says its zone);
    checked here, turned into a time when the command runs."""
    try:
        parse_seconds(text)
    except ValueError:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"expected a duration ago such as 10m or 2h, or a time such as "
                f"2026-05-01T12:00, got {text!r}"
            ) from None
    return text


def since_unix(text: str, now: datetime) -> float:
    try:
        return now.timestamp() - parse_seconds(text)
    except ValueError:
        return datetime.fromisoformat(text).timestamp()  # naive: local time


def query_for(args: argparse.Namespace, now: datetime) -> dict[str, Any]:
    """What `trainq logs` asks for, as `Api.get_job_logs` takes it."""
    tail = args.tail if args.tail is not None or not args.follow else FOLLOW_TAIL
    return {
        "follow": args.follow,
        "stream": args.stream,
        "attempt": args.attempt,
        "tail": tail,
        "since": None if args.since is None else since_unix(args.since, now),
        "stamps": True if args.timestamps else None,
        "node": getattr(args, "node", None),
    }


def print_logs(ctx: Context, client: Api, job_id: int, query: dict[str, Any]) -> None:
    """Stream the job's output to stdout as it arrives."""
    from trainq.client.transport import iter_lines  # noqa: PLC0415

    out = ctx.stdout_bytes()
    with client.get_job_logs(job_id, **query) as chunks:
        if not query.get("stamps"):
            for chunk in chunks:
                out.write(chunk)
                out.flush()
            return
        for line in iter_lines(chunks):
            if line.strip():
                out.write(stamped_line(json.loads(line)).encode("utf-8", "replace"))
                out.flush()


def stamped_line(entry: dict[str, Any]) -> str:
    """`2026-05-01T12:00:01.250 stderr text` (local time); an attempt's start as `==>`."""
    if "attempt" in entry:
        return f"==> attempt {entry['attempt']} <==\n"
    when = datetime.fromtimestamp(float(entry["time"])).isoformat(timespec="milliseconds")
    text = str(entry["text"])
    return f"{when} {entry['stream']:<6} {text if text.endswith(chr(10)) else text + chr(10)}"
