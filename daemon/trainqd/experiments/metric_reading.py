"""Reading an attempt's metric reports from what its trainer wrote (blocking: worker threads).

The sources are the attempt's stdout and stderr (matched against the spec's
`metric_definitions`) and `output/metrics.jsonl` in its ml root (one JSON object per line).
All three lie where the job's owner writes, so they are hostile input: opened without
following a link (the ml root's `output` included), regular files only, never blocking, read
from where the last pass stopped and at most READ_BUDGET bytes a pass, lines cut at
MAX_LINE bytes. Regexes are RE2's (linear time), so no line can stall a pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainq.core.spec_parts import METRIC_NAME_RE, MetricDefinition, compile_metric_regex
from trainqd.experiments.metric_series import AttemptMetrics
from trainqd.monitor.records import STDERR, STDOUT

JSONL = "metrics.jsonl"
MAX_LINE = 4096
READ_BUDGET = 1 << 20  # per source and pass: a flood of output is read over several passes
_CHUNK = 1 << 16
_MAX_NUMBER = 64  # characters of a captured value


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: Any  # re2 compiled
    value_group: int
    step_group: int | None


def patterns(definitions: list[MetricDefinition]) -> list[Pattern]:
    out = []
    for definition in definitions:
        compiled = compile_metric_regex(definition.regex)
        step = compiled.groupindex.get("step")
        value = next(i for i in range(1, compiled.groups + 1) if i != step)
        out.append(Pattern(definition.name, compiled, value, step))
    return out


def _number(text: str | None) -> float | None:
    if text is None or len(text) > _MAX_NUMBER:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def match_line(line: str, found: list[Pattern], into: AttemptMetrics) -> None:
    for pattern in found:
        match = pattern.regex.search(line)
        if match is None:
            continue
        value = _number(match.group(pattern.value_group))
        if value is None:
            continue
        step = None if pattern.step_group is None else _number(match.group(pattern.step_group))
        into.report(pattern.name, step, value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: Any) -> float | None:
    """A JSON number as a float; None for anything else, or an integer no float holds."""
    if not _is_number(value):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def json_line(line: str, into: AttemptMetrics) -> None:
    """`{"step": 3, "val_loss": 0.41}`: every numeric key but `step` is a report."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # a line nested deeper than Python recurses
        return
    if not isinstance(record, dict):
        return
    step = _as_float(record.get("step"))
    for name, given in record.items():
        value = _as_float(given)
        if name != "step" and value is not None and METRIC_NAME_RE.match(name):
            into.report(name, step, value)


def _open_regular(directory: Path, names: tuple[str, ...]) -> int | None:
    """A descriptor of directory/names[0]/.../names[-1], no link followed on the way, or
    None if it is absent or not a regular file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(directory, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for name in names[:-1]:
            inner = os.open(name, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        inner = os.open(names[-1], flags, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(inner).st_mode):
        os.close(inner)
        return None
    return inner


def _read_lines(
    fd: int, offset: int, final: bool, budget: int = READ_BUDGET
) -> tuple[list[str], int]:
    """Whole lines from `offset` (up to `budget` bytes) and the offset after them. A line
    longer than MAX_LINE is cut there; at the attempt's end (`final`) an unterminated last
    line counts too."""
    size = os.fstat(fd).st_size
    if size < offset:  # truncated by its writer: read again from the start
        offset = 0
    end = min(size, offset + budget)
    lines: list[str] = []
    pending = b""
    position = offset
    while position < end:
        data = os.pread(fd, min(_CHUNK, end - position), position)
        if not data:
            break
        position += len(data)
        parts = (pending + data).split(b"\n")
        pending = parts.pop()
        lines.extend(p[:MAX_LINE].decode("utf-8", "replace") for p in parts)
        while len(pending) > MAX_LINE:  # a line with no end in sight: cut
            lines.append(pending[:MAX_LINE].decode("utf-8", "replace"))
            pending = pending[MAX_LINE:]
    if final and position >= size and pending:
        lines.append(pending.decode("utf-8", "replace"))
        pending = b""
    return lines, position - len(pending)


@dataclass
class AttemptReader:
    """Reads one attempt's sources into its AttemptMetrics, a pass at a time."""

    attempt_dir: Path
    ml_root: Path
    found: list[Pattern]
    metrics: AttemptMetrics

    def read(self, *, final: bool = False, budget: int = READ_BUDGET) -> None:
        """`budget`: bytes of each source at most."""
        sources: list[tuple[str, Path, tuple[str, ...]]] = [
            (JSONL, self.ml_root, ("output", JSONL))
        ]
        if self.found:
            sources += [(n, self.attempt_dir, (n,)) for n in (STDOUT, STDERR)]
        for key, directory, names in sources:
            fd = _open_regular(directory, names)
            if fd is None:
                continue
            try:
                lines, after = _read_lines(fd, self.metrics.offsets.get(key, 0), final, budget)
            except OSError:
                continue
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
            for line in lines:
                if key == JSONL:
                    json_line(line, self.metrics)
                else:
                    match_line(line, self.found, self.metrics)
            if after != self.metrics.offsets.get(key, 0):
                self.metrics.offsets[key] = after
                self.metrics.changed = True
