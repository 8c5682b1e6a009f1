"""Metric reports from a trainer's output: regexes (RE2), metrics.jsonl, and the bounds that
hold whatever the trainer writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from trainq.core.spec import JobSpec
from trainq.core.spec_parts import MetricDefinition
from trainqd.experiments.metric_reading import MAX_LINE, AttemptReader, patterns
from trainqd.experiments.metric_series import MAX_POINTS, MAX_SERIES, AttemptMetrics, Series


def reader(tmp_path: Path, *definitions: tuple[str, str]) -> AttemptReader:
    attempt = tmp_path / "attempt"
    (tmp_path / "ml" / "output").mkdir(parents=True, exist_ok=True)
    attempt.mkdir(exist_ok=True)
    found = patterns([MetricDefinition(name=n, regex=r) for n, r in definitions])
    return AttemptReader(attempt, tmp_path / "ml", found, AttemptMetrics())


def test_each_match_is_a_report_its_step_counted_or_named(tmp_path: Path) -> None:
    read = reader(
        tmp_path, ("loss", r"loss=([-+0-9.eE]+)"), ("acc", r"epoch (?P<step>\d+) acc=([0-9.]+)")
    )
    (read.attempt_dir / "stdout").write_text(
        "loss=0.9\nnoise\nepoch 10 acc=0.5 loss=0.7\nepoch 20 acc=0.75\nloss=nan\n"
    )
    read.read()
    series = read.metrics.series
    assert series["loss"].kept() == [(1.0, 0.9), (2.0, 0.7)]  # nan is no report
    assert series["acc"].kept() == [(10.0, 0.5), (20.0, 0.75)]


def test_a_line_being_written_waits_for_its_end(tmp_path: Path) -> None:
    read = reader(tmp_path, ("loss", r"loss=([0-9.]+)"))
    out = read.attempt_dir / "stderr"
    out.write_text("loss=0.5\nloss=0.4")
    read.read()
    assert read.metrics.series["loss"].count == 1
    with out.open("a") as f:
        f.write("25\n")
    read.read()
    assert read.metrics.series["loss"].kept() == [(1.0, 0.5), (2.0, 0.425)]


def test_metrics_jsonl_numbers_are_reports_and_the_rest_is_ignored(tmp_path: Path) -> None:
    read = reader(tmp_path)
    lines = [
        {"step": 3, "val_loss": 0.41, "note": "x", "flag": True},
        [1, 2],
        {"bad name!": 1, "step": "four", "val_loss": 0.3},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\nnot json\n"
    (read.ml_root / "output" / "metrics.jsonl").write_text(text)
    read.read()
    assert list(read.metrics.series) == ["val_loss"]
    assert read.metrics.series["val_loss"].kept() == [(3.0, 0.41), (2.0, 0.3)]


def test_links_are_not_followed(tmp_path: Path) -> None:
    read = reader(tmp_path, ("loss", r"loss=([0-9.]+)"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "metrics.jsonl").write_text('{"secret": 42}\n')
    (elsewhere / "log").write_text("loss=1\n")
    os.rmdir(read.ml_root / "output")
    os.symlink(elsewhere, read.ml_root / "output")
    os.symlink(elsewhere / "log", read.attempt_dir / "stdout")
    read.read(final=True)
    assert read.metrics.series == {}


def test_a_flood_costs_bounded_memory(tmp_path: Path) -> None:
    read = reader(tmp_path, ("loss", r"loss=([0-9]+)"))
    reports = 20_000
    with (read.attempt_dir / "stdout").open("w") as f:
        f.writelines(f"loss={i}\n" for i in range(1, reports + 1))
        f.write("loss=" + "9" * (3 * MAX_LINE) + "\n")  # too long to be a number
    for _ in range(10):
        read.read(final=True)
    series = read.metrics.series["loss"]
    assert series.count == reports
    kept = series.kept()
    assert len(kept) <= MAX_POINTS + 1
    assert kept[0] == (1.0, 1.0)
    assert kept[-1] == (float(reports), float(reports))
    assert [s for s, _ in kept] == sorted(s for s, _ in kept)
    for n in range(MAX_SERIES + 5):
        read.metrics.report(f"m{n}", None, 1.0)
    assert len(read.metrics.series) == MAX_SERIES
    assert read.metrics.dropped == 6


def test_a_pathological_pattern_matches_in_linear_time(tmp_path: Path) -> None:
    # Python's re backtracks for ages on this; RE2 cannot.
    read = reader(tmp_path, ("x", r"^(?:a+)+b=([0-9])$"))
    (read.attempt_dir / "stdout").write_text(("a" * 4000 + "c\n") * 200 + "aab=7\n")
    read.read()
    assert read.metrics.series["x"].kept() == [(1.0, 7.0)]


def test_series_round_trip_through_json() -> None:
    series = Series()
    for i in range(3 * MAX_POINTS):
        series.add(None, float(i))
    again = Series.from_json(json.loads(json.dumps(series.to_json())))
    assert again == series


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"name": "loss", "regex": "loss=("}, "does not compile"),
        ({"name": "loss", "regex": "loss=[0-9]+"}, "needs a group that captures the value"),
        ({"name": "loss", "regex": "(?P<step>[0-9]+)"}, "needs a group"),
        ({"name": "1oss", "regex": "(x)"}, "must be 1-64 letters"),
        ({"name": "loss", "regex": "(" * 600}, "at most 512 characters"),
    ],
)
def test_bad_definitions_are_refused_with_a_line(definition: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobSpec.model_validate({"command": ["true"], "metric_definitions": [definition]})


def test_a_metric_defined_twice_is_refused() -> None:
    twice = [{"name": "a", "regex": "(1)"}, {"name": "a", "regex": "(2)"}]
    with pytest.raises(ValidationError, match="defined twice"):
        JobSpec.model_validate({"command": ["true"], "metric_definitions": twice})
