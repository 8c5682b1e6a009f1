"""The command line: what parses into what, and the one line (and exit status) of every
mistake, without a daemon."""

from __future__ import annotations

import argparse
from pathlib import Path

import click
import pytest
import typer

from trainq import __version__, cli
from trainq.cli import main
from trainq.flag_values import ChannelFlag
from trainq.spec_flags import SPEC_FLAGS

pytestmark = pytest.mark.usefixtures("cli_environment")


def parse(argv: list[str]) -> argparse.Namespace:
    args = cli.parse(argv)
    assert isinstance(args, argparse.Namespace), f"{argv} did not parse: exit {args}"
    return args


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_submit_flags() -> None:
    args = parse(
        [
            "submit", "-f", "job.toml", "--name", "a", "--gpus", "2", "--priority", "-3",
            "--hp", "lr=0.1", "--hp", "opt=adam", "--env", "SEED=1", "--env", "WANDB_API_KEY",
            "--channel", "train=/data/t:Pipe", "--max-runtime", "12h", "--stop-grace", "1.5",
            "--max-retries", "0", "--workdir", "runs", "--wait", "--json",
            "--", "python3", "train.py", "--epochs", "3", "--",
        ]
    )  # fmt: skip
    assert args.command == "submit"
    assert args.file == "job.toml"
    assert (args.name, args.gpus, args.priority) == ("a", 2, -3)
    assert args.hp == [("lr", "0.1"), ("opt", "adam")]
    assert args.env == [("SEED", "1"), ("WANDB_API_KEY", None)]
    assert args.channel == [ChannelFlag("train", "/data/t", "Pipe")]
    assert (args.max_runtime, args.stop_grace, args.max_retries) == (43200, 1.5, 0)
    assert (args.workdir, args.wait, args.json) == ("runs", True, True)
    assert args.command_argv == ["python3", "train.py", "--epochs", "3", "--"]


def test_submit_defaults() -> None:
    args = parse(["submit", "--image", "localhost/trainer", "--engine", "podman"])
    assert (args.image, args.engine) == ("localhost/trainer", "podman")
    assert args.hp == args.env == args.channel == args.command_argv == []
    assert args.gpus is args.name is args.file is None
    assert not args.wait


def test_socket_before_or_after_the_command() -> None:
    assert parse(["--socket", "/tmp/a.sock", "ls"]).socket == "/tmp/a.sock"
    assert parse(["ls", "--socket", "/tmp/b.sock"]).socket == "/tmp/b.sock"
    assert parse(["ls"]).socket is None


def test_other_commands() -> None:
    stop = parse(["stop", "12", "--grace", "30s"])
    assert (stop.jobs, stop.grace) == ([12], 30)
    several = parse(["stop", "--user", "bob", "--state", "pending", "--name", "lr-*"])
    assert (several.jobs, several.user, several.state, several.name) == (
        [],
        "bob",
        "PENDING",
        "lr-*",
    )
    assert parse(["hold", "3", "4"]).jobs == [3, 4]
    rm = parse(["rm", "--ended", "--older-than", "7d"])
    assert (rm.jobs, rm.ended, rm.older_than) == ([], True, 7 * 86400)
    logs = parse(["logs", "5", "-n", "20", "--since", "10m", "-t"])
    assert (logs.tail, logs.since, logs.timestamps) == (20, "10m", True)
    ls = parse(["ls", "--all", "--state", "failed", "--user", "bob", "--wide"])
    assert (ls.all, ls.state, ls.user, ls.wide) == (True, "FAILED", "bob", True)
    logs = parse(["logs", "5", "-f", "--stderr", "--attempt", "2"])
    assert (logs.job, logs.follow, logs.stream, logs.attempt) == (5, True, "stderr", 2)
    assert parse(["logs", "5"]).stream == "both"
    assert parse(["wait", "5"]).job == 5
    assert parse(["show", "5", "--json"]).json
    assert parse(["gpus", "--json"]).json
    assert not parse(["health"]).json


SUBMIT_HINT = " (put the job's command after `--`: trainq submit [options] -- COMMAND...)"
JOB_ID = "argument JOB: expected a job id (a whole number like 12), got"
STATES = "PENDING, RUNNING, STOPPING, COMPLETED, FAILED, STOPPED"
COMMANDS = (
    "'submit', 'stop', 'ls', 'requeue', 'show', 'logs', 'metrics', 'tune', 'wait', 'gpus', "
    "'health', 'top', 'report', 'users', 'hold', 'release', 'update', 'rm', 'drain', 'resume', "
    "'ui', 'export'"
)
USAGE_ERRORS = [
    ("submit --gpus two", "submit: argument --gpus: expected a whole number, got 'two'"),
    ("submit --gpus -1", "submit: argument --gpus: expected a whole number (0 or more), got '-1'"),
    ("submit --hp lr", "submit: argument --hp: expected KEY=VALUE, got 'lr'"),
    ("submit --env =x", "submit: argument --env: missing the name before '=' in '=x'"),
    (
        "submit --channel train",
        "submit: argument --channel: expected NAME=PATH[:File|Pipe|FastFile], got 'train'",
    ),
    (
        "submit --max-runtime 1w",
        "submit: argument --max-runtime: expected a duration like 90, 30m, 12h or 2d, got '1w'",
    ),
    (
        "submit --engine lxc",
        "submit: argument --engine: invalid choice: 'lxc' (choose from 'docker', 'podman')",
    ),
    ("submit --bogus", "submit: unrecognized arguments: --bogus" + SUBMIT_HINT),
    ("submit --gp 1", "submit: unrecognized arguments: --gp; did you mean '--gpus'?"),
    ("submit --gpu 1", "submit: unrecognized arguments: --gpu; did you mean '--gpus'?"),
    ("ls --stat PENDING", "ls: unrecognized arguments: --stat; did you mean '--state'?"),
    ("stop --nmae x", "stop: unrecognized arguments: --nmae; did you mean '--name'?"),
    (
        "export --to slurm --gpu 2",
        "export: unrecognized arguments: --gpu; did you mean '--gpus'?",
    ),
    ("export --gpus 2", "export: the following arguments are required: --to"),
    (
        "export --to nomad",
        "export: argument --to: invalid choice: 'nomad' "
        "(choose from 'slurm', 'kubernetes', 'sagemaker')",
    ),
    (
        "export --to slurm --volume train=",
        "export: argument --volume: nothing after '=' in 'train='",
    ),
    (
        "logs 1 --since yesterday",
        "logs: argument --since: expected a duration ago such as "
        "10m or 2h, or a time such as 2026-05-01T12:00, got 'yesterday'",
    ),
    ("stop 3 --state pending", "stop: give job ids or filters, not both"),
    ("rm --older-than 7d", "rm: argument --older-than: goes with --ended"),
    ("submit python3 train.py --lr 1", "submit: unrecognized arguments: --lr" + SUBMIT_HINT),
    ("stop abc", "stop: argument JOB...: expected a job id (a whole number like 12), got 'abc'"),
    ("show -3", f"show: {JOB_ID} '-3'"),
    ("wait 0", f"wait: {JOB_ID} '0'"),
    (
        "logs 1 --attempt 0",
        "logs: argument --attempt: expected an attempt number (1, 2, ...), got '0'",
    ),
    ("logs 1 --stdout --stderr", "logs: argument --stderr: not allowed with argument --stdout"),
    ("ls --state done", f"ls: argument --state: unknown state 'done' (one of {STATES})"),
    ("ls --bogus", "ls: unrecognized arguments: --bogus"),
    (
        "hold",
        "hold: the following arguments are required: JOB... "
        "(or filters: --group, --state, --name, ...)",
    ),
    ("rm 3 x", "rm: argument JOB...: expected a job id (a whole number like 12), got 'x'"),
    ("update 3 --gpus two", "update: argument --gpus: expected a whole number, got 'two'"),
    (
        "drain --reason r --gpus 1,b",
        "drain: argument --gpus: expected GPU indices such as 2,3, got '1,b'",
    ),
    ("drain --gpus 1", "drain: the following arguments are required: --reason"),
    ("frobnicate", f": argument COMMAND: invalid choice: 'frobnicate' (choose from {COMMANDS})"),
    (
        "sumbit",
        f": argument COMMAND: invalid choice: 'sumbit' (choose from {COMMANDS}); "
        "did you mean 'submit'?",
    ),
]


@pytest.mark.parametrize(("command", "message"), USAGE_ERRORS)
def test_usage_errors_are_one_line(
    command: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = f"trainq {message}" if message[0] != ":" else f"trainq{message}"
    assert run(command.split(), capsys) == (2, "", line + "\n")


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run([], capsys)
    assert (status, out) == (2, "")
    assert err.startswith("usage: trainq")
    assert "submit" in err


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"], capsys) == (0, f"trainq {__version__}\n", "")
    status, out, _ = run(["submit", "--help"], capsys)
    assert status == 0
    assert "your PATH" in out


def test_spec_file_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.toml").write_text("gpus = \n")
    for name, line in (
        ("missing.toml", "trainq: spec file missing.toml: no such file\n"),
        (str(tmp_path / "bad.toml"), f"trainq: spec file {tmp_path}/bad.toml: invalid TOML: "),
    ):
        status, out, err = run(
            ["--socket", str(tmp_path / "none.sock"), "submit", "-f", name], capsys
        )
        assert (status, out) == (2, "")
        assert err.startswith(line)
        assert err.count("\n") == 1


def test_no_daemon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "trainq.sock"
    status, out, err = run(["--socket", str(sock), "submit", "--", "true"], capsys)
    assert (status, out) == (7, "")
    assert err == (
        f"trainq: cannot reach trainqd at {sock}: no such file. Is it running? "
        "Start it with `trainqd` (or `systemctl start trainqd`).\n"
    )


def test_the_socket_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRAINQ_SOCKET", str(tmp_path / "env.sock"))
    assert f"trainqd at {tmp_path}/env.sock:" in run(["health"], capsys)[2]
    assert (
        f"trainqd at {tmp_path}/flag.sock:"
        in run(["health", "--socket", str(tmp_path / "flag.sock")], capsys)[2]
    )


def test_submit_and_export_take_each_spec_flag_as_declared() -> None:
    group = typer.main.get_command(cli.app)
    assert isinstance(group, click.Group)
    for command in ("submit", "export"):
        options = {
            opt: param
            for param in group.commands[command].params
            for opt in (*param.opts, *param.secondary_opts)
        }
        for flag in SPEC_FLAGS:
            option = options[flag.flag.split("/")[0]]
            assert isinstance(option, click.Option)
            assert (option.name, option.help) == (flag.param, flag.help), command
