"""The spec `trainq submit` sends: a spec file (TOML or JSON) with the command line over it.

This module only reads and merges; it never validates a spec's meaning. The daemon does that
with the pydantic models in `trainq.core.spec` (one source of truth, and pydantic's import cost
stays off `submit`'s path) and answers one clear line for anything wrong. What only the
client can know (its current directory, its PATH) is added by `trainq.client.specs.localized`,
as the Python library adds it.

The flags that set the spec's fields are declared once, in `trainq.spec_flags.SPEC_FLAGS`:
`trainq submit` and `trainq export` take the same ones (`trainq.flags.spec` makes them typer
options), and `trainq.spec_flags.submit_flags` reads them back from the parsed line as the
`SubmitFlags` that `build_spec` takes.

Merging: a flag replaces the file's key of the same name; `--hp`, `--env` and `--channel`
add entries or replace them by key. A `--channel` for a channel the file already describes
sets its source (and mode, when given) and keeps the file's other options for it, so
`--channel train=/data/v2` does not quietly turn a Pipe channel into a File one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainq.client.specs import localized, resolve_path
from trainq.core.errors import InvalidSpec
from trainq.spec_flags import SubmitFlags

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
