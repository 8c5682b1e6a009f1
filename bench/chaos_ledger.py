"""The ledgers the chaos soak's trainers write (bench/trainers/chaos_trainer.py), read back
and judged: what each attempt did, in the order it did it.

Each judgement returns the broken invariants in words (an empty list: all held). A ledger
only ever understates what ran (a line is written after what it reports, and a process runs
a while before its first line and after its last), so every overlap found in ledgers is an
overlap that happened.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass
class Span:
    """One attempt as its trainer wrote it down."""

    job: int
    attempt: int
    pids: set[int]
    first: float  # time of its first line and of its last
    last: float
    start_step: int
    gpus: str  # TRAINQ_GPUS: the host's indices
    uuids: frozenset[str]
    cuda: str  # CUDA_VISIBLE_DEVICES as the trainer saw it
    steps: list[int] = field(default_factory=list)
    done: bool = False


@dataclass
class Ledger:
    job: int
    lines: list[dict[str, Any]]

    @classmethod
    def read(cls, path: Path) -> Ledger:
        text = path.read_text()
        # Each line is one write(2) of a whole line; a line without its newline can only be
        # the write a concurrent read caught half done, and is read next time.
        complete = text[: text.rfind("\n") + 1]
        return cls(int(path.stem), [json.loads(line) for line in complete.splitlines()])

    def spans(self) -> list[Span]:
        spans: dict[int, Span] = {}
        for line in self.lines:
            number = int(line["attempt"])
            span = spans.get(number)
            if span is None:
                # "void": the NVIDIA runtime's word for none (a job of no GPUs).
                found = str(line.get("uuids", "")).split(",")
                uuids = frozenset(u for u in found if u and u != "void")
                span = Span(
                    self.job,
                    number,
                    set(),
                    line["t"],
                    line["t"],
                    int(line.get("step", -1)),
                    str(line.get("gpus", "")),
                    uuids,
                    str(line.get("cuda", "")),
                )
                spans[number] = span
            span.pids.add(int(line["pid"]))
            span.last = max(span.last, line["t"])
            if line["ev"] == "step":
                span.steps.append(int(line["step"]))
            if line["ev"] == "done":
                span.done = True
        return [spans[n] for n in sorted(spans)]


def judge_attempts(ledger: Ledger) -> list[str]:
    """Never run twice, resumed from the checkpoint: attempts follow one another (no line of
    an attempt after a later one began), each is one process, each starts with its start line,
    counts its steps one by one, and starts from the last checkpoint it could have seen (never
    from before it, so never from 0 once one was saved; never past the steps done)."""
    broken: list[str] = []
    job = ledger.job
    latest = 0
    checkpointed = 0  # the last checkpoint a ledger line confirms
    progress = 0  # the furthest step done or saved so far
    seen_start: set[int] = set()
    expected: dict[int, int] = {}
    for line in ledger.lines:
        number, event = int(line["attempt"]), line["ev"]
        if number < latest:
            broken.append(
                f"job {job}: attempt {number} wrote {event!r} after attempt {latest} began "
                "(two attempts ran at once)"
            )
        latest = max(latest, number)
        if event == "start":
            if number in seen_start:
                broken.append(f"job {job}: attempt {number} started twice")
            seen_start.add(number)
            start = int(line["step"])
            if not checkpointed <= start <= progress:
                broken.append(
                    f"job {job}: attempt {number} started from step {start}, but the last "
                    f"checkpoint was {checkpointed} and step {progress} the furthest done"
                )
            expected[number] = start + 1
            continue
        if number not in seen_start:
            broken.append(f"job {job}: attempt {number} wrote {event!r} before its start line")
            continue
        step = int(line["step"])
        if event == "step":
            if step != expected[number]:
                broken.append(
                    f"job {job}: attempt {number} did step {step} after {expected[number] - 1}"
                )
            expected[number] = step + 1
        if event == "ckpt":
            checkpointed = step
        progress = max(progress, step)
    broken.extend(
        f"job {job}: attempt {span.attempt} was run by {len(span.pids)} processes "
        f"{sorted(span.pids)}"
        for span in ledger.spans()
        if len(span.pids) > 1
    )
    return broken


def judge_against_api(ledger: Ledger, job: dict[str, Any]) -> list[str]:
    """The ledger agrees with the job's record: each attempt it shows is one trainqd knows,
    run on the GPUs trainqd gave it (as many as the job asked for), and never writing after
    trainqd recorded that attempt's end."""
    broken: list[str] = []
    attempts = {int(a["number"]): a for a in job["attempts"]}
    for span in ledger.spans():
        record = attempts.get(span.attempt)
        if record is None:
            broken.append(f"job {ledger.job}: attempt {span.attempt} ran, trainqd has no record")
            continue
        given = ",".join(str(g) for g in record["gpus"])
        if span.gpus != given:
            broken.append(
                f"job {ledger.job}: attempt {span.attempt} saw GPUs {span.gpus!r}, "
                f"trainqd gave {given!r}"
            )
        visible = [d for d in span.cuda.split(",") if d]
        # The host's indices, or 0..n-1 where trainqd confines a job to its devices.
        if visible not in (
            given.split(",") if given else [],
            [str(i) for i in range(len(visible))],
        ):
            broken.append(
                f"job {ledger.job}: attempt {span.attempt} saw CUDA_VISIBLE_DEVICES "
                f"{span.cuda!r}, trainqd gave GPUs {given!r}"
            )
        if len(visible) != job["spec"]["gpus"] or len(span.uuids) != job["spec"]["gpus"]:
            broken.append(
                f"job {ledger.job}: attempt {span.attempt} saw CUDA_VISIBLE_DEVICES "
                f"{span.cuda!r} for a job of {job['spec']['gpus']} GPUs"
            )
        ended = record.get("ended_at")
        if ended is not None and span.last > _timestamp(ended):
            broken.append(
                f"job {ledger.job}: attempt {span.attempt} kept writing after trainqd recorded "
                f"its end at {_timestamp(ended):.3f}"
            )
    return broken


def judge_gpu_sharing(spans: Sequence[Span]) -> list[str]:
    """No GPU (by UUID, as the trainers saw them) used by two jobs at one time."""
    broken = []
    ordered = sorted(spans, key=lambda s: s.first)
    for i, one in enumerate(ordered):
        for other in ordered[i + 1 :]:
            if other.first >= one.last:
                break
            if other.job != one.job and one.uuids & other.uuids:
                broken.append(
                    f"jobs {one.job} (attempt {one.attempt}) and {other.job} (attempt "
                    f"{other.attempt}) both ran on {sorted(one.uuids & other.uuids)} between "
                    f"{other.first:.3f} and {min(one.last, other.last):.3f}"
                )
    return broken


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()
