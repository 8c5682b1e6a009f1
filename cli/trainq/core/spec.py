"""The job spec: the spec file's keys, the body of `POST /v1/jobs` (docs/architecture.md).

Validation here is everything that can be decided from the spec alone. What depends on the
host (GPU count, whether a path exists and the submitter may read it, whether the engine is
installed) is the daemon's to check. The CLI does not import this module on its fast path:
it sends a plain dict and prints the daemon's one-line verdict.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from trainq.core.dependencies import MAX_DEPENDENCIES
from trainq.core.dependencies import parse as parse_dependency
from trainq.core.spec_limits import (
    CLASS_RE,
    ENV_FILE_LINE_LIMIT,
    MAX_ARG_BYTES,
    MAX_COMMAND_ARGS,
    MAX_HP_JSON,
    MAX_HP_KEY,
    MAX_HP_VALUE,
    MAX_HYPERPARAMETERS,
    MAX_INSTANCE_GROUPS,
    MAX_NODES,
    MAX_PATH,
    TRANSIENT_EXIT_CODES,
)
from trainq.core.spec_parts import (
    MAX_METRIC_DEFINITIONS,
    ChannelSpec,
    ExitStatus,
    ImageRef,
    InstanceGroup,
    MetricDefinition,
    StrictModel,
    check_environment,
    check_name,
    hp_value_to_str,
)


class JobSpec(StrictModel):
    """A training job as submitted. Exactly one of `command` and `image`."""

    # `class` is a Python keyword: the field is `job_class`, the key (JSON, spec files) `class`.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        str_strip_whitespace=False,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    name: str | None = None
    # The administrator's class (QoS) it runs in; None: the configured default class.
    job_class: str | None = Field(default=None, alias="class")
    priority: Annotated[StrictInt, Field(ge=-10_000, le=10_000)] = 0
    gpus: Annotated[StrictInt, Field(ge=0, le=1024)] = 0
    command: Annotated[list[str], Field(min_length=1, max_length=MAX_COMMAND_ARGS)] | None = None
    image: ImageRef | None = None
    engine: Literal["docker", "podman"] | None = None
    network: Literal["none", "host", "bridge"] | None = None
    run_as_root: bool = False
    working_dir: str | None = None
    max_runtime_seconds: Annotated[StrictInt, Field(ge=1, le=10 * 365 * 86400)] | None = None
    stop_grace_seconds: Annotated[StrictFloat, Field(ge=0, le=86400)] | None = None
    max_retries: Annotated[StrictInt, Field(ge=0, le=100)] = 3
    retry_exit_codes: Annotated[list[ExitStatus], Field(max_length=255)] = Field(
        default_factory=lambda: list(TRANSIENT_EXIT_CODES)
    )
    retry_backoff_seconds: Annotated[StrictFloat, Field(ge=0, le=3600)] = 2.0
    hyperparameters: dict[str, str] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    channels: dict[str, ChannelSpec] = Field(default_factory=dict)
    metric_definitions: Annotated[
        list[MetricDefinition], Field(max_length=MAX_METRIC_DEFINITIONS)
    ] = Field(default_factory=list)
    # Jobs (or groups) that must end first, and how (trainq.core.dependencies): "12:ok".
    after: Annotated[list[str], Field(max_length=MAX_DEPENDENCIES)] = Field(default_factory=list)

    # Run as the job's owner when the job ends (its id, name, state, exit status and reason in
    # TRAINQ_JOB_* variables); `mail`: the admin's mail command tells the owner (END: any
    # end, FAIL: a FAILED one).
    notify: Annotated[list[str], Field(min_length=1, max_length=256)] | None = None
    mail: Annotated[list[Literal["END", "FAIL"]], Field(max_length=2)] = Field(default_factory=list)

    # The trainer's source directory, copied into the job at submit (`snapshot`, on by
    # default when there is a source: this, or the sagemaker_submit_directory hyperparameter)
    # so that what runs is what was submitted; False runs the directory as it is at start.
    source_dir: str | None = None
    snapshot: bool | None = None

    # Several nodes (trainq.core.nodes): `instance_count` nodes of `gpus` GPUs each, or the
    # `instance_groups`; `restart` is what a failing node takes down: the attempt ("job",
    # SageMaker's rule) or itself alone ("node", AI Platform's).
    instance_count: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = 1
    instance_groups: Annotated[list[InstanceGroup], Field(max_length=MAX_INSTANCE_GROUPS)] = Field(
        default_factory=list
    )
    restart: Literal["job", "node"] = "job"

    @field_validator("source_dir")
    @classmethod
    def _source_dir(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\0" in value):
            raise ValueError(f"source_dir {value!r} must be an absolute path")
        return value

    @field_validator("notify")
    @classmethod
    def _notify(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value[0] or any("\0" in arg for arg in value)):
            raise ValueError("notify is a command: a program, then its arguments, without NUL")
        return value

    @field_validator("after")
    @classmethod
    def _after(cls, value: list[str]) -> list[str]:
        written = [str(parse_dependency(text)) for text in value]
        return list(dict.fromkeys(written))  # each once, in the order given

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_name("job", value)

    @field_validator("job_class")
    @classmethod
    def _job_class(cls, value: str | None) -> str | None:
        if value is not None and not CLASS_RE.match(value):
            raise ValueError(f"class {value!r} is not a class name")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value[0]:
                raise ValueError("the command's program may not be empty")
            if any("\0" in arg for arg in value):
                raise ValueError("command arguments may not contain a NUL byte")
            for index, arg in enumerate(value):
                if len(arg) > MAX_ARG_BYTES // 4 and len(arg.encode()) > MAX_ARG_BYTES:
                    raise ValueError(
                        f"command argument {index} is longer than {MAX_ARG_BYTES} bytes, "
                        "the most the kernel passes a program"
                    )
        return value

    @field_validator("working_dir")
    @classmethod
    def _working_dir(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_PATH:
            raise ValueError(f"working_dir is longer than {MAX_PATH} characters (PATH_MAX)")
        if value is not None and (not value.startswith("/") or "\0" in value):
            raise ValueError(f"working_dir {value!r} must be an absolute path")
        return value

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _hyperparameters(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value  # pydantic reports the type error
        if len(value) > MAX_HYPERPARAMETERS:
            raise ValueError(f"at most {MAX_HYPERPARAMETERS} hyperparameters")
        out: dict[str, str] = {}
        for key, raw in value.items():
            if not isinstance(key, str) or not key or len(key) > MAX_HP_KEY:
                raise ValueError(f"hyperparameter names must be 1-{MAX_HP_KEY} characters")
            # Each becomes a variable name, SM_HP_<NAME>: nothing that could end or split it.
            if "=" in key or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
                raise ValueError(
                    f"hyperparameter name {key!r} may not contain '=' or a control character"
                )
            if not isinstance(raw, str | bool | int | float):
                raise ValueError(
                    f"hyperparameter {key!r} must be a string, number or boolean, "
                    f"not {type(raw).__name__}"
                )
            text = hp_value_to_str(raw)
            if len(text) > MAX_HP_VALUE:
                raise ValueError(f"hyperparameter {key!r} is longer than {MAX_HP_VALUE}")
            out[key] = text
        size = len(json.dumps(out))
        if size > MAX_HP_JSON:
            raise ValueError(
                f"the hyperparameters take {size} bytes as JSON, over {MAX_HP_JSON}: they reach "
                "the trainer in its environment (SM_HPS); pass large values in a file"
            )
        return out

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        return check_environment(value)

    @field_validator("metric_definitions")
    @classmethod
    def _metric_names(cls, value: list[MetricDefinition]) -> list[MetricDefinition]:
        names = [d.name for d in value]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"metric {name!r} is defined twice")
        return value

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: dict[str, ChannelSpec]) -> dict[str, ChannelSpec]:
        for name in value:
            check_name("channel", name)
        # Pipe mode's FIFOs are named <channel>_<epoch>: no other channel may take such a name.
        for pipe in (n for n, c in value.items() if c.mode == "Pipe"):
            clash = re.compile(re.escape(pipe) + r"_[0-9]+$")
            for other in value:
                if clash.match(other):
                    raise ValueError(
                        f"channel {other!r} would clash with the FIFOs of Pipe channel {pipe!r}"
                    )
        return value

    @model_validator(mode="after")
    def _runtime(self) -> JobSpec:
        if (self.command is None) == (self.image is None):
            raise ValueError(
                "give exactly one of 'command' (a subprocess) and 'image' (a container)"
            )
        if self.image is None:
            for key in ("engine", "network"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} applies to container jobs (with 'image') only")
            if self.run_as_root:
                raise ValueError("run_as_root applies to container jobs (with 'image') only")
        else:
            for key, text in self.environment.items():
                if "\n" in text or "\r" in text:
                    raise ValueError(
                        f"environment variable {key} of a container job may not contain a "
                        "line break (pass such a value in a file)"
                    )
                if len(key) + 1 + len(text.encode()) > ENV_FILE_LINE_LIMIT:
                    raise ValueError(
                        f"environment variable {key} of a container job is longer than "
                        f"{ENV_FILE_LINE_LIMIT} bytes with its name"
                    )
        return self

    @model_validator(mode="after")
    def _nodes(self) -> JobSpec:
        """One line for a layout of nodes no host could run (trainq.core.nodes lays it out)."""
        groups = self.instance_groups
        several = self.node_count > 1 or bool(groups)
        if self.network is not None and self.network != "bridge" and several:
            raise ValueError(
                f"network {self.network!r}: the nodes of a job meet on a network of its own"
            )
        if not groups:
            if self.restart == "node" and self.instance_count == 1:
                raise ValueError('restart = "node" applies to jobs of several nodes')
            return self
        if self.instance_count != 1:
            raise ValueError("give instance_count per instance group, not for the whole job")
        if self.gpus:
            raise ValueError("give gpus per instance group, not for the whole job")
        seen: set[str] = set()
        for group in groups:
            if group.name in seen:
                raise ValueError(f"instance group {group.name!r} is named twice")
            seen.add(group.name)
            if group.command is not None and self.command is None:
                raise ValueError(
                    f"instance group {group.name!r} gives a command to a container job (give image)"
                )
            if group.image is not None and self.image is None:
                raise ValueError(
                    f"instance group {group.name!r} gives an image to a subprocess job "
                    "(give command)"
                )
        total = sum(g.instance_count for g in groups)
        if total > MAX_NODES:
            raise ValueError(f"the instance groups hold {total} nodes; a job may have {MAX_NODES}")
        if all(g.primary for g in groups):
            raise ValueError("every instance group is primary: mark the ones the job waits for")
        return self

    @property
    def total_gpus(self) -> int:
        """The GPUs of all its nodes together: what the planner places, whole."""
        if self.instance_groups:
            return sum(g.instance_count * g.gpus for g in self.instance_groups)
        return self.instance_count * self.gpus

    @property
    def node_count(self) -> int:
        if self.instance_groups:
            return sum(g.instance_count for g in self.instance_groups)
        return self.instance_count

    @property
    def runtime(self) -> Literal["subprocess", "container"]:
        return "container" if self.image is not None else "subprocess"


def describe_validation_error(exc: ValidationError, what: str = "spec") -> str:
    """One line for a person: where the first problem is and what it is."""
    errors = exc.errors(include_url=False)
    if not errors:
        return f"invalid {what}"
    first = errors[0]
    loc = ".".join(str(part) for part in first["loc"] if part not in ("function-after",))
    msg = str(first["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif first["type"] == "missing":
        msg = "missing"
    where = f"{what}: {loc}: " if loc else f"{what}: "
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}{msg}{more}"


def parse_spec(data: Any) -> JobSpec:
    """Validate a spec dict; raise ValueError with one clear line."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc)) from None
