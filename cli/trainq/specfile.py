"""The spec `trainq submit` sends: a spec file (TOML or JSON) with the command line over it.

This module only reads and merges; it never validates a spec's meaning. The daemon does that
with the pydantic models in `trainq.core.spec` (one source of truth, and pydantic's import cost
stays off `submit`'s path) and answers one clear line for anything wrong. What is decided
here is what only the client can know: its current directory (relative host paths become
absolute, `~` is expanded, a subprocess job runs where it was submitted, like sbatch) and its
PATH (so `python3` in a job means the program it means to the person submitting). A
container job's working_dir is a path inside the image, so it is sent as given.

Merging: a flag replaces the file's key of the same name; `--hp`, `--env` and `--channel`
add entries or replace them by key. A `--channel` for a channel the file already describes
sets its source (and mode, when given) and keeps the file's other options for it, so
`--channel train=/data/v2` does not quietly turn a Pipe channel into a File one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from trainq.core.errors import InvalidSpec

CHANNEL_MODES = ("File", "Pipe", "FastFile")
_MODE_BY_LOWER = {mode.lower(): mode for mode in CHANNEL_MODES}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


# NamedTuples rather than dataclasses: `trainq --version` and `--help` import this module
# (argparse's types), and dataclasses would cost them ~10 ms.
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


def submit_flags(args: Any, command: Sequence[str]) -> SubmitFlags:
    """The submit flags of a parsed command line (`trainq submit` and `trainq export` share
    them)."""
    return SubmitFlags(
        name=args.name,
        gpus=args.gpus,
        priority=args.priority,
        job_class=getattr(args, "job_class", None),
        hyperparameters=args.hp,
        environment=args.env,
        channels=args.channel,
        max_runtime_seconds=args.max_runtime,
        stop_grace_seconds=args.stop_grace,
        max_retries=args.max_retries,
        image=args.image,
        engine=args.engine,
        working_dir=args.workdir,
        command=command,
        after=getattr(args, "after", None) or (),
        notify=parse_command(args.notify) if getattr(args, "notify", None) else (),
        mail=parse_mail_types(args.mail) if getattr(args, "mail", None) else (),
        source_dir=getattr(args, "source_dir", None),
        snapshot=getattr(args, "snapshot", None),
        metrics=getattr(args, "metric", None) or (),
        instance_count=getattr(args, "nodes", None),
    )


# --- parsing single flags (argparse types call these; ValueError carries the message) ---


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


def resolve_path(path: str, cwd: Path, environ: Mapping[str, str]) -> str:
    """`~` expanded (from $HOME when set), then made absolute against `cwd`; symlinks kept."""
    if path == "~" or path.startswith("~/"):
        home = environ.get("HOME") or os.path.expanduser("~")
        path = home + path[1:]
    elif path.startswith("~"):
        path = os.path.expanduser(path)
    return os.path.normpath(os.path.join(cwd, path))


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


def _resolve_channels(channels: dict[str, Any], cwd: Path, environ: Mapping[str, str]) -> None:
    for name, channel in channels.items():
        if isinstance(channel, dict) and isinstance(channel.get("source"), str):
            channels[name] = {**channel, "source": resolve_path(channel["source"], cwd, environ)}


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

    if isinstance(spec.get("channels"), dict) or flags.channels:
        channels = _table(spec, "channels", "--channel")
        for flag in flags.channels:
            previous = channels.get(flag.name)
            channel = dict(previous) if isinstance(previous, dict) else {}
            channel["source"] = flag.source
            if flag.mode is not None:
                channel["mode"] = flag.mode
            channels[flag.name] = channel
        _resolve_channels(channels, cwd, environ)
        spec["channels"] = channels

    if isinstance(spec.get("source_dir"), str):
        spec["source_dir"] = resolve_path(spec["source_dir"], cwd, environ)
    if spec.get("image") is None:
        if isinstance(spec.get("working_dir"), str):
            spec["working_dir"] = resolve_path(spec["working_dir"], cwd, environ)
        # A subprocess job runs where it was submitted and finds programs as we do.
        spec.setdefault("working_dir", os.path.normpath(cwd))
        if "PATH" in environ:
            job_env = spec.get("environment")
            if job_env is None:
                spec["environment"] = {"PATH": environ["PATH"]}
            elif isinstance(job_env, dict) and "PATH" not in job_env:
                spec["environment"] = {**job_env, "PATH": environ["PATH"]}
    return spec
