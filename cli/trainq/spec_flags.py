"""The flags that set a spec's fields, declared once (`SPEC_FLAGS`) for every command that
builds a spec (`trainq submit`, `trainq export`), and what they say (`SubmitFlags`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from trainq.flag_values import (
    ChannelFlag,
    check_command,
    check_mail_types,
    parse_after,
    parse_channel,
    parse_command,
    parse_engine,
    parse_env,
    parse_integer,
    parse_key_value,
    parse_mail_types,
    parse_seconds,
    parse_whole_number,
    parse_whole_seconds,
)


# NamedTuples rather than dataclasses, for start-up time (see trainq.flag_values).
class SubmitFlags(NamedTuple):
    """What the command line of `trainq submit` says; None and empty mean "not given"."""

    name: str | None = None
    gpus: int | None = None
    priority: int | None = None
    job_class: str | None = None
    hyperparameters: Sequence[tuple[str, str]] = ()
    environment: Sequence[tuple[str, str | None]] = ()  # None: take the value from our own
    channels: Sequence[ChannelFlag] = ()
    max_runtime_seconds: int | None = None
    stop_grace_seconds: float | None = None
    max_retries: int | None = None
    image: str | None = None
    engine: str | None = None
    working_dir: str | None = None
    command: Sequence[str] = ()
    after: Sequence[str] = ()  # dependencies, as trainq.core.dependencies writes them
    notify: Sequence[str] = ()  # the command run when the job ends
    mail: Sequence[str] = ()  # END, FAIL
    source_dir: str | None = None
    snapshot: bool | None = None  # --snapshot / --no-snapshot
    metrics: Sequence[tuple[str, str]] = ()  # --metric NAME=REGEX
    instance_count: int | None = None  # --nodes


class SpecFlag(NamedTuple):
    """A flag that sets a field of the spec, declared once for every command that builds a
    spec from a file and flags (`trainq submit`, `trainq export`; `trainq.flags.spec` turns
    each into a typer option)."""

    param: str  # its name in the parsed command line
    field: str  # the SubmitFlags field it fills
    flag: str  # as typed (`--a/--no-a` for a switch)
    kind: Any  # its value's type, as typer reads it (a list: repeatable)
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None  # checks a value; its ValueError is the message
    convert: Callable[[Any], Any] | None = None  # the checked value as SubmitFlags holds it


def submit_flags(values: Mapping[str, Any], command: Sequence[str]) -> SubmitFlags:
    """The spec flags of a parsed command line (`vars(args)`), as build_spec takes them; a
    flag not given keeps SubmitFlags' default."""
    given: dict[str, Any] = {}
    for flag in SPEC_FLAGS:
        value = values.get(flag.param)
        if value is None or (isinstance(value, list) and not value):
            continue
        given[flag.field] = flag.convert(value) if flag.convert else value
    return SubmitFlags(command=command, **given)


# --- the spec flags, in the order `--help` lists them ---

SPEC_FLAGS = (
    SpecFlag("name", "name", "--name", str | None, "job name (letters, digits, '.', '_', '-')"),
    SpecFlag(
        "gpus", "gpus", "--gpus", int | None, "whole GPUs the job needs", "N", parse_whole_number
    ),
    SpecFlag(
        "nodes", "instance_count", "--nodes", int | None,
        "nodes started together (each with --gpus GPUs)", "N", parse_whole_number,
    ),
    SpecFlag(
        "priority", "priority", "--priority", int | None,
        "higher runs first, among your own jobs", "P", parse_integer,
    ),
    SpecFlag(
        "job_class", "job_class", "--class", str | None,
        "the class (QoS) it runs in (`trainq users`)", "C",
    ),
    SpecFlag(
        "hp", "hyperparameters", "--hp", list[str] | None,
        "hyperparameter (repeatable; replaces the file's entry of that name)", "K=V",
        parse_key_value,
    ),
    SpecFlag(
        "metric", "metrics", "--metric", list[str] | None,
        "a metric read from the job's output: each match of REGEX, its first group the value "
        "(repeatable)", "NAME=REGEX", parse_key_value,
    ),
    SpecFlag(
        "channel", "channels", "--channel", list[str] | None,
        "input channel; MODE is File (default), Pipe or FastFile (repeatable)",
        "NAME=PATH[:MODE]", parse_channel,
    ),
    SpecFlag(
        "env", "environment", "--env", list[str] | None,
        "environment variable; K alone passes on your value (repeatable)", "K=V", parse_env,
    ),
    SpecFlag(
        "max_runtime", "max_runtime_seconds", "--max-runtime", int | None,
        "stop the job after this long: seconds, or 30m, 12h, 2d", "S", parse_whole_seconds,
    ),
    SpecFlag(
        "source_dir", "source_dir", "--source-dir", str | None,
        "the trainer's code, copied into the job at submit", "DIR",
    ),
    SpecFlag(
        "snapshot", "snapshot", "--snapshot/--no-snapshot", bool | None,
        "copy the source (--source-dir, sagemaker_submit_directory) at submit "
        "[default: on when there is one]",
    ),
    SpecFlag(
        "notify", "notify", "--notify", str | None,
        "run this command of yours when the job ends (TRAINQ_JOB_* say how)", "CMD",
        check_command, parse_command,
    ),
    SpecFlag(
        "mail", "mail", "--mail", str | None, "mail you when the job ends, or fails",
        "END,FAIL", check_mail_types, parse_mail_types,
    ),
    SpecFlag(
        "after", "after", "--after", list[str] | None,
        "start only once job JOB (or group:G) has succeeded, failed or ended (repeatable; "
        "export --to slurm: a Slurm job's id)", "JOB[:ok|:failed|:any]", parse_after,
    ),
    SpecFlag(
        "stop_grace", "stop_grace_seconds", "--stop-grace", float | None,
        "time between SIGTERM and SIGKILL when the job is stopped", "S", parse_seconds,
    ),
    SpecFlag(
        "max_retries", "max_retries", "--max-retries", int | None,
        "retries of transient crashes (default 3)", "N", parse_whole_number,
    ),
    SpecFlag(
        "image", "image", "--image", str | None, "run this container image (as `IMAGE train`)"
    ),
    SpecFlag(
        "engine", "engine", "--engine", str | None, "container engine", "docker|podman",
        parse_engine,
    ),
    SpecFlag(
        "workdir", "working_dir", "--workdir", str | None,
        "working directory of a subprocess job", "DIR",
    ),
)  # fmt: skip
