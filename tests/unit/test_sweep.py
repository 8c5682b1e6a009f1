"""`trainq submit --sweep`: the grid it makes, and the one line of each mistake in it, without
a daemon; `stop` and `wait` take a JOB or a --group, not both."""

from __future__ import annotations

import argparse
import re

import pytest

from trainq import cli
from trainq.cli import main
from trainq.core.errors import InvalidRequest
from trainq.sweep import expand, parse_sweep, points


def test_the_grid_is_the_product_in_flag_order() -> None:
    grid = points([("lr", ("0.1", "0.01")), ("batch", ("32", "64", "128"))])
    assert len(grid) == 6
    assert grid[0] == {"lr": "0.1", "batch": "32"}
    assert grid[1] == {"lr": "0.1", "batch": "64"}  # the last flag varies fastest
    assert grid[-1] == {"lr": "0.01", "batch": "128"}


def test_points_go_over_the_spec_and_named_jobs_get_a_suffix() -> None:
    spec = {"name": "mnist", "command": ["x"], "hyperparameters": {"lr": "1", "seed": "7"}}
    specs = expand(spec, [("lr", ("0.1", "0.2"))])
    assert [s["name"] for s in specs] == ["mnist-1", "mnist-2"]
    assert [s["hyperparameters"] for s in specs] == [
        {"lr": "0.1", "seed": "7"},
        {"lr": "0.2", "seed": "7"},
    ]
    assert spec["hyperparameters"] == {"lr": "1", "seed": "7"}  # left as it was
    assert "name" not in expand({"command": ["x"]}, [("lr", ("1",))])[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lr=", "no values after '=' in 'lr='"),
        ("=1", "missing the hyperparameter's name before '=' in '=1'"),
        ("lr", "expected KEY=V1,V2,..., got 'lr'"),
        ("lr=1,,2", "an empty value in 'lr=1,,2'"),
        ("lr=1,", "an empty value in 'lr=1,'"),
        ("lr=1,2,1", "value '1' is given twice in 'lr=1,2,1'"),
    ],
)
def test_bad_sweeps_are_one_line(
    text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_sweep(text)
    assert main(["submit", "--sweep", text, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainq submit: argument --sweep: "), err
    assert err.count("\n") == 1


def test_a_key_twice_and_a_grid_too_large_are_refused_before_sending() -> None:
    with pytest.raises(InvalidRequest, match=r"^--sweep lr is given twice"):
        points([("lr", ("1",)), ("lr", ("2",))])
    wide = tuple(str(n) for n in range(1000))
    with pytest.raises(InvalidRequest, match=r"^the sweep has 1,000,000,000 points"):
        points([("a", wide), ("b", wide), ("c", wide)])


def test_values_keep_their_text() -> None:
    assert parse_sweep("opt=adam,sgd=0.9") == ("opt", ("adam", "sgd=0.9"))


def test_wait_takes_a_job_or_a_group(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.parse(["wait", "--group", "12"])
    assert isinstance(args, argparse.Namespace)
    assert (args.job, args.group) == (None, 12)
    assert main(["wait"]) == 2
    assert "JOB (or --group G)" in capsys.readouterr().err
    assert main(["wait", "3", "--group", "12"]) == 2
    assert "not allowed with argument JOB" in capsys.readouterr().err
    assert main(["wait", "--group", "x"]) == 2
    assert "expected a job id" in capsys.readouterr().err


def test_stop_takes_jobs_or_a_group(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.parse(["stop", "--group", "12"])
    assert isinstance(args, argparse.Namespace)
    assert (args.jobs, args.group) == ([], 12)
    assert main(["stop"]) == 2
    assert "the following arguments are required: JOB..." in capsys.readouterr().err
    assert main(["stop", "3", "--group", "12"]) == 2
    assert "give job ids or filters, not both" in capsys.readouterr().err
    assert main(["stop", "--group", "x"]) == 2
    assert "expected a job id" in capsys.readouterr().err


def test_ls_and_submit_parse_their_group_flags() -> None:
    args = cli.parse(["ls", "--group", "5"])
    assert isinstance(args, argparse.Namespace)
    assert args.group == 5
    args = cli.parse(["submit", "--sweep", "lr=1,2", "--sweep", "b=3", "--", "x"])
    assert isinstance(args, argparse.Namespace)
    assert args.sweep == [("lr", ("1", "2")), ("b", ("3",))]
