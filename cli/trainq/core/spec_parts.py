"""The parts of a job spec (`trainq.core.spec.JobSpec`): a channel, a metric definition, an
instance group, and the checks the spec shares with them."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from trainq.core.spec_limits import (
    ENV_NAME_RE,
    IMAGE_RE,
    MAX_COMMAND_ARGS,
    MAX_ENV_TOTAL,
    MAX_ENV_VALUE,
    MAX_ENV_VARS,
    MAX_NODES,
    NAME_RE,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
)


def check_name(kind: str, value: str) -> str:
    """Job and channel names become path components: no "/", no "..", nothing odd."""
    if "/" in value or ".." in value:
        raise ValueError(f"{kind} name {value!r} may not contain '/' or '..'")
    if not NAME_RE.match(value):
        raise ValueError(
            f"{kind} name {value!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def hp_value_to_str(value: str | bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


ChannelMode = Literal["File", "Pipe", "FastFile"]
# Numbers are numbers: "2" or true where a count is asked for is a mistake to report, not
# to guess at. A float field takes an integer too, never a boolean or a string.
ExitStatus = Annotated[StrictInt, Field(ge=1, le=255)]


def _check_image(value: str) -> str:
    if not IMAGE_RE.match(value):
        raise ValueError(f"image {value!r} is not an image reference")
    return value


# A job's image, or an instance group's own.
ImageRef = Annotated[str, AfterValidator(_check_image)]


class ChannelSpec(StrictModel):
    """One input channel. `source` is an absolute host path: a directory or a single file."""

    source: Annotated[str, Field(min_length=1, max_length=4096)]
    mode: ChannelMode = "File"
    content_type: Annotated[str, Field(max_length=256)] | None = None
    record_wrapper: Literal["None", "RecordIO"] = "None"
    compression: Literal["None", "Gzip"] = "None"
    shuffle_seed: StrictInt | None = None
    epochs: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None

    @field_validator("source")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"source {value!r} must be an absolute path")
        if "\0" in value:
            raise ValueError("source may not contain a NUL byte")
        return value

    @model_validator(mode="after")
    def _pipe_only_options(self) -> ChannelSpec:
        if self.mode != "Pipe":
            for key, default in (
                ("record_wrapper", "None"),
                ("compression", "None"),
                ("shuffle_seed", None),
                ("epochs", None),
            ):
                if getattr(self, key) != default:
                    raise ValueError(f"{key} applies to Pipe mode channels only")
        return self


# Metric definitions (SageMaker's MetricDefinitions): regexes over the trainer's output.
MAX_METRIC_DEFINITIONS = 16
MAX_METRIC_REGEX = 512
METRIC_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}\Z")


def compile_metric_regex(pattern: str) -> Any:
    """The pattern compiled by RE2 (linear time: no pattern can stall the reader of a log);
    ValueError with one line if it does not compile or captures no value. RE2 is imported
    here, when a spec has metrics: the CLI's start-up never validates a spec."""
    import re2  # noqa: PLC0415

    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"metric regex {pattern!r} does not compile: {exc}") from None
    names = {index for name, index in compiled.groupindex.items() if name == "step"}
    if compiled.groups - len(names) < 1:
        raise ValueError(f"metric regex {pattern!r} needs a group that captures the value")
    return compiled


class MetricDefinition(StrictModel):
    """One metric read from the trainer's output: each match of `regex` is a report, its
    value the first group that is not named `step` (a group named `step` gives the step)."""

    name: str
    regex: Annotated[str, Field(min_length=1, max_length=MAX_METRIC_REGEX)]
    # Which end is better: what `trainq show` calls the best value.
    direction: Literal["minimize", "maximize"] = "minimize"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not METRIC_NAME_RE.match(value):
            raise ValueError(
                f"metric name {value!r} must be 1-64 letters, digits, '_', '.', ':', '/' or "
                "'-', starting with a letter or '_'"
            )
        return value

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        compile_metric_regex(value)
        return value


def check_environment(value: dict[str, str]) -> dict[str, str]:
    """A job's (or an instance group's) own variables: names, sizes, none of trainq's."""
    if len(value) > MAX_ENV_VARS:
        raise ValueError(
            f"{len(value)} environment variables; a job may set at most {MAX_ENV_VARS}"
        )
    for key, text in value.items():
        if not ENV_NAME_RE.match(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
        if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
            raise ValueError(f"environment variable {key} is set by trainq itself")
        if "\0" in text:
            raise ValueError(f"environment variable {key} may not contain a NUL byte")
        if len(text.encode()) > MAX_ENV_VALUE:
            raise ValueError(f"environment variable {key} is longer than {MAX_ENV_VALUE} bytes")
    total = sum(len(k) + len(v.encode()) + 2 for k, v in value.items())
    if total > MAX_ENV_TOTAL:
        raise ValueError(f"the environment takes {total} bytes, over {MAX_ENV_TOTAL}")
    return value


class InstanceGroup(StrictModel):
    """One group of a heterogeneous job (SageMaker's InstanceGroups): `instance_count` nodes
    of `gpus` GPUs each, running the job's command (or image) unless it gives its own."""

    name: str
    instance_count: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)]
    gpus: Annotated[StrictInt, Field(ge=0, le=1024)] = 0
    command: Annotated[list[str], Field(min_length=1, max_length=MAX_COMMAND_ARGS)] | None = None
    image: ImageRef | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    # restart = "node": the job completes when this group's nodes have exited 0.
    primary: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name("instance group", value)

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value[0] or any("\0" in arg for arg in value)):
            raise ValueError("a group's command is a program, then its arguments, without NUL")
        return value

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        return check_environment(value)
