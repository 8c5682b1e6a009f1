"""log_view.AttemptLog over real files written as the monitor's relay writes them (and as a
job's owner might rewrite them): time order, the last N lines, a time by bisection, stamped
lines, and records that do not hold."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trainq.logs import parse_since, since_unix, stamped_line
from trainqd.api.log_view import AttemptLog
from trainqd.api.streams import open_log
from trainqd.monitor.timeline import RECORD, STDERR_ID, STDOUT_ID, TIMELINE

BOTH = (STDOUT_ID, STDERR_ID)


def write(directory: Path, pieces: list[tuple[int, int, bytes]]) -> None:
    """Relay `pieces` (time in seconds, stream, bytes) as the monitor does."""
    files = {STDOUT_ID: b"", STDERR_ID: b""}
    timeline = b""
    for seconds, stream, data in pieces:
        timeline += RECORD.pack(seconds * 10**9, len(files[stream]), len(data), stream)
        files[stream] += data
    (directory / "stdout").write_bytes(files[STDOUT_ID])
    (directory / "stderr").write_bytes(files[STDERR_ID])
    (directory / TIMELINE).write_bytes(timeline)


def read(directory: Path, streams: tuple[int, ...] = BOTH, **seek: int | None) -> bytes:
    log = AttemptLog(directory, streams, open_log)
    try:
        assert log.ready()
        log.seek(tail=seek.get("tail"), since_ns=seek.get("since_ns"))
        out = b""
        while chunk := log.next_output(stamps=False, budget=7):  # small: many calls
            out += chunk
        return out
    finally:
        log.close()


PIECES = [
    (1, STDOUT_ID, b"o1\no2\n"),
    (2, STDERR_ID, b"e1\n"),
    (3, STDOUT_ID, b"o3 part"),
    (4, STDOUT_ID, b"ial\no4\n"),
    (5, STDERR_ID, b"e2\ne3"),
]


def test_time_order_and_one_stream(tmp_path: Path) -> None:
    write(tmp_path, PIECES)
    assert read(tmp_path) == b"o1\no2\ne1\no3 partial\no4\ne2\ne3"
    assert read(tmp_path, (STDERR_ID,)) == b"e1\ne2\ne3"
    assert read(tmp_path, (STDOUT_ID,)) == b"o1\no2\no3 partial\no4\n"


def test_the_last_lines(tmp_path: Path) -> None:
    write(tmp_path, PIECES)
    assert read(tmp_path, tail=1) == b"e3"  # the last line, without its newline yet
    assert read(tmp_path, tail=3) == b"o4\ne2\ne3"
    assert read(tmp_path, tail=4) == b"o3 partial\no4\ne2\ne3"  # a line over two pieces
    assert read(tmp_path, tail=100) == read(tmp_path)
    assert read(tmp_path, tail=0) == b""
    assert read(tmp_path, (STDOUT_ID,), tail=2) == b"o3 partial\no4\n"
    assert read(tmp_path, (STDOUT_ID,), tail=1) == b"o4\n"


def test_since_a_time(tmp_path: Path) -> None:
    write(tmp_path, PIECES)
    assert read(tmp_path, since_ns=4 * 10**9) == b"ial\no4\ne2\ne3"
    assert read(tmp_path, since_ns=0) == read(tmp_path)
    assert read(tmp_path, since_ns=9 * 10**9) == b""
    assert read(tmp_path, since_ns=2 * 10**9, tail=1) == b"e3"  # the later of the two


def test_records_that_do_not_hold_are_left_out(tmp_path: Path) -> None:
    write(tmp_path, PIECES[:2])
    with (tmp_path / TIMELINE).open("ab") as timeline:
        timeline.write(RECORD.pack(3, 1 << 62, 10, STDOUT_ID))  # beyond the file
        timeline.write(RECORD.pack(3, 0, 1 << 30, STDOUT_ID))  # longer than a read
        timeline.write(RECORD.pack(3, 0, 3, 9))  # no such stream
        timeline.write(b"\x00" * 5)  # half a record
    assert read(tmp_path) == b"o1\no2\ne1\n"
    assert read(tmp_path, tail=2) == b"o2\ne1\n"


def test_an_attempt_without_a_timeline_shows_stdout_then_stderr(tmp_path: Path) -> None:
    (tmp_path / "stdout").write_bytes(b"out\n")
    (tmp_path / "stderr").write_bytes(b"err\n")
    assert read(tmp_path) == b"out\nerr\n"
    assert read(tmp_path, tail=1) == b"err\n"
    assert not AttemptLog(tmp_path / "none", BOTH, open_log).ready()


def test_stamped_lines(tmp_path: Path) -> None:
    write(tmp_path, PIECES[:2])
    log = AttemptLog(tmp_path, BOTH, open_log)
    assert log.ready()
    entries = [json.loads(line) for line in log.next_output(stamps=True).splitlines()]
    log.close()
    assert entries == [
        {"time": 1.0, "stream": "stdout", "text": "o1\n"},
        {"time": 1.0, "stream": "stdout", "text": "o2\n"},
        {"time": 2.0, "stream": "stderr", "text": "e1\n"},
    ]
    printed = stamped_line({"time": 1.0, "stream": "stderr", "text": "no newline"})
    assert (
        printed
        == f"{datetime.fromtimestamp(1.0).isoformat(timespec='milliseconds')} stderr no newline\n"
    )
    assert stamped_line({"attempt": 2}) == "==> attempt 2 <==\n"


def test_since_parses_a_duration_or_a_time() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert since_unix(parse_since("10m"), now) == now.timestamp() - 600
    assert since_unix(parse_since("2026-05-01T11:00:00+00:00"), now) == now.timestamp() - 3600
    for bad in ("yesterday", "10 minutes", ""):
        with pytest.raises(ValueError, match="expected a duration ago such as 10m or 2h"):
            parse_since(bad)
