"""The values of single flags, parsed: durations, counts, job ids, NAME=VALUE pairs,
channels. The CLI's parsers (`trainq.flags.values`) call these; a ValueError carries the
message the user reads."""

from __future__ import annotations

import re
from typing import NamedTuple

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
