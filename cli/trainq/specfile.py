"""The spec `trainq submit` sends: a spec file (TOML or JSON) with the command line over it.

This module only reads and merges; it never validates a spec's meaning. The daemon does that
with the pydantic models in `trainq.core.spec` (one source of truth, and pydantic's import cost
stays off `submit`'s path) and answers one clear line for anything wrong. What only the
client can know (its current directory, its PATH) is added by `trainq.client.specs.localized`,
as the Python library adds it.

The flags that set the spec's fields are declared once, in `SPEC_FLAGS`: `trainq submit` and
`trainq export` take the same ones (`trainq.flags.spec` makes them typer options), and
`submit_flags` reads them back from the parsed line.

Merging: a flag replaces the file's key of the same name; `--hp`, `--env` and `--channel`
add entries or replace them by key. A `--channel` for a channel the file already describes
sets its source (and mode, when given) and keeps the file's other options for it, so
`--channel train=/data/v2` does not quietly turn a Pipe channel into a File one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from trainq.client.specs import localized, resolve_path
from trainq.core.errors import InvalidSpec

CHANNEL_MODES = ("File", "Pipe", "FastFile")
_MODE_BY_LOWER = {mode.lower(): mode for mode in CHANNEL_MODES}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


# NamedTuples rather than dataclasses: `trainq --version` and `--help` import this module
# (the flags' parsers), and dataclasses would cost them ~10 ms.
class ChannelFlag(NamedTuple):
    """One `--channel NAME=PATH[:MODE]`, its path as typed (resolved later)."""

    name: str
    source: str
    mode: str | None = None


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


# --- parsing single flags (the CLI's parsers call these; ValueError carries the message) ---


def check_command(text: str) -> str:
    """`--notify`'s value, checked where the command line is parsed; split later."""
    parse_command(text)
    return text


def check_mail_types(text: str) -> str:
    parse_mail_types(text)
    return text


def parse_command(text: str) -> list[str]:
    """`--notify "CMD ARGS"`: split as a shell would split words (nothing is expanded)."""
    import shlex  # noqa: PLC0415

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r} into words: {exc}") from None
    if not words:
        raise ValueError("expected a command, got nothing")
    return words


def parse_mail_types(text: str) -> list[str]:
    """`--mail END,FAIL` (ALL: both)."""
    kinds = [word.strip().upper() for word in text.split(",")]
    if kinds == ["ALL"]:
        return ["END", "FAIL"]
    for kind in kinds:
        if kind not in ("END", "FAIL"):
            raise ValueError(f"expected END, FAIL or ALL, got {text!r}")
    return list(dict.fromkeys(kinds))


def parse_after(text: str) -> str:
    """One `--after JOB[:ok|:failed|:any]` or `--after group:G[:...]`, as it is kept."""
    from trainq.core.dependencies import parse  # noqa: PLC0415 (standard library only)

    return str(parse(text))


def parse_whole_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"expected a whole number (0 or more), got {text!r}")
    return value


def parse_integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_job_id(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"expected a job id (a whole number like 12), got {text!r}")
    return int(text)


def parse_key_value(text: str) -> tuple[str, str]:
    """`KEY=VALUE` (the value may itself contain '=', or be empty)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    if not key:
        raise ValueError(f"missing the name before '=' in {text!r}")
    return key, value


def parse_env(text: str) -> tuple[str, str | None]:
    """`NAME=VALUE`, or `NAME` alone to pass on the value it has here (as `docker run -e`)."""
    if "=" not in text:
        if not text:
            raise ValueError("expected NAME=VALUE or NAME, got ''")
        return text, None
    return parse_key_value(text)


def parse_channel(text: str) -> ChannelFlag:
    """`NAME=PATH[:File|Pipe|FastFile]`; the mode's case does not matter.

    A path may contain ':'; only a last `:WORD` is read as the mode, so a path ending in
    `:word` needs its mode spelled out after it (`train=/data/run:final:File`).
    """
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise ValueError(f"expected NAME=PATH[:File|Pipe|FastFile], got {text!r}")
    source, mode = rest, None
    head, colon, word = rest.rpartition(":")
    if colon and word.isalpha():
        mode = _MODE_BY_LOWER.get(word.lower())
        if mode is None:
            raise ValueError(
                f"unknown channel mode {word!r} in {text!r}: use File, Pipe or FastFile "
                "(if the path itself ends in ':" + word + "', add ':File' after it)"
            )
        source = head
    if not source:
        raise ValueError(f"channel {name!r} has no path in {text!r}")
    return ChannelFlag(name=name, source=source, mode=mode)


def parse_seconds(text: str) -> float:
    """A duration: seconds, or a number with s, m, h or d after it (`90`, `1.5h`, `2d`)."""
    match = _DURATION_RE.match(text)
    if match is None:
        raise ValueError(f"expected a duration like 90, 30m, 12h or 2d, got {text!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def parse_whole_seconds(text: str) -> int:
    """A duration rounded up to whole seconds (what `max_runtime_seconds` holds)."""
    seconds = parse_seconds(text)
    whole = int(seconds)
    return whole if whole == seconds else whole + 1


def parse_engine(text: str) -> str:
    if text not in ("docker", "podman"):
        raise ValueError(f"invalid choice: {text!r} (choose from 'docker', 'podman')")
    return text


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


# --- the spec file ---


def _parse_toml(text: str) -> dict[str, Any]:
    import tomllib  # noqa: PLC0415 (only a -f submit pays for it)

    return tomllib.loads(text)


def _toml_error(path: str, exc: ValueError) -> InvalidSpec:
    # tomllib's message already ends with "(at line L, column C)".
    return InvalidSpec(f"spec file {path}: invalid TOML: {exc}")


def _json_error(path: str, exc: json.JSONDecodeError) -> InvalidSpec:
    return InvalidSpec(
        f"spec file {path}: invalid JSON: {exc.msg} (at line {exc.lineno}, column {exc.colno})"
    )


def load_spec_file(path: str, cwd: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """Read a spec file: TOML for `.toml`, JSON for `.json`, otherwise TOML and then JSON.

    `path` is as the user typed it (relative to `cwd`, `~` allowed). Every failure is an
    InvalidSpec with one line naming the file.
    """
    full = resolve_path(path, cwd, environ)
    try:
        raw = Path(full).read_bytes()
    except FileNotFoundError:
        raise InvalidSpec(f"spec file {path}: no such file") from None
    except IsADirectoryError:
        raise InvalidSpec(f"spec file {path}: is a directory, not a file") from None
    except PermissionError:
        raise InvalidSpec(f"spec file {path}: permission denied") from None
    except OSError as exc:
        raise InvalidSpec(f"spec file {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidSpec(
            f"spec file {path}: not UTF-8 text (bad byte at offset {exc.start})"
        ) from None

    suffix = Path(path).suffix.lower()
    data: Any
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc) from None
    elif suffix == ".toml":
        try:
            data = _parse_toml(text)
        except ValueError as exc:
            raise _toml_error(path, exc) from None
    else:
        try:
            data = _parse_toml(text)
        except ValueError as toml_exc:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as json_exc:
                # Report in the language the file was most likely meant to be in.
                looks_json = text.lstrip().startswith(("{", "["))
                error = _json_error(path, json_exc) if looks_json else _toml_error(path, toml_exc)
                raise error from None
    if not isinstance(data, dict):
        raise InvalidSpec(
            f"spec file {path}: expected a table of keys at the top, not {type(data).__name__}"
        )
    return data


# --- merging ---


def _table(spec: dict[str, Any], key: str, flag: str) -> dict[str, Any]:
    """The spec's sub-table `key`, copied, ready for the flag's entries."""
    current = spec.get(key)
    if current is None:
        return {}
    if not isinstance(current, dict):
        raise InvalidSpec(
            f"the spec file's {key!r} must be a table to add {flag} entries to it, "
            f"not {type(current).__name__}"
        )
    return dict(current)


# A spec's keys that only a container job may have.
CONTAINER_ONLY_KEYS = ("image", "engine", "network", "run_as_root")


def _add_metrics(spec: dict[str, Any], metrics: Sequence[tuple[str, str]]) -> None:
    """`--metric NAME=REGEX` over the file's metric_definitions: same name, replaced."""
    defined = spec.get("metric_definitions") or []
    if not isinstance(defined, list):
        raise InvalidSpec("--metric: the spec's metric_definitions is not a list")
    named = {name for name, _ in metrics}
    kept = [d for d in defined if not (isinstance(d, dict) and d.get("name") in named)]
    spec["metric_definitions"] = kept + [{"name": n, "regex": r} for n, r in metrics]


def build_spec(
    file_data: Mapping[str, Any] | None,
    flags: SubmitFlags,
    cwd: Path,
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """The body of `POST /v1/jobs`: the file's keys, the flags over them, paths absolute."""
    spec: dict[str, Any] = dict(file_data or {})

    scalars = {
        "name": flags.name,
        "gpus": flags.gpus,
        "instance_count": flags.instance_count,
        "priority": flags.priority,
        "class": flags.job_class,
        "max_runtime_seconds": flags.max_runtime_seconds,
        "stop_grace_seconds": flags.stop_grace_seconds,
        "max_retries": flags.max_retries,
        "image": flags.image,
        "engine": flags.engine,
        "working_dir": flags.working_dir,
        "source_dir": flags.source_dir,
        "snapshot": flags.snapshot,
    }
    spec.update({key: value for key, value in scalars.items() if value is not None})
    # The flags' runtime replaces the file's, as every flag overrides the file: --image over
    # the file's command, a command after `--` over its image (both given stay a mistake).
    if flags.image is not None and not flags.command:
        spec.pop("command", None)
    if flags.command:
        spec["command"] = list(flags.command)
        if flags.image is None:
            for key in CONTAINER_ONLY_KEYS:
                spec.pop(key, None)

    if flags.notify:
        spec["notify"] = list(flags.notify)
    if flags.mail:
        spec["mail"] = list(flags.mail)
    if flags.after:  # added to the file's, as --hp adds to its hyperparameters
        before = spec.get("after")
        spec["after"] = [*(before if isinstance(before, list) else []), *flags.after]

    if flags.hyperparameters:
        hps = _table(spec, "hyperparameters", "--hp")
        hps.update(flags.hyperparameters)
        spec["hyperparameters"] = hps

    if flags.metrics:
        _add_metrics(spec, flags.metrics)

    if flags.environment:
        env = _table(spec, "environment", "--env")
        for key, value in flags.environment:
            if value is not None:
                env[key] = value
            elif key in environ:
                env[key] = environ[key]
            else:
                raise InvalidSpec(f"--env {key}: {key} is not set in your environment")
        spec["environment"] = env

    if flags.channels:
        channels = _table(spec, "channels", "--channel")
        for flag in flags.channels:
            previous = channels.get(flag.name)
            channel = dict(previous) if isinstance(previous, dict) else {}
            channel["source"] = flag.source
            if flag.mode is not None:
                channel["mode"] = flag.mode
            channels[flag.name] = channel
        spec["channels"] = channels
    return localized(spec, cwd, environ)
