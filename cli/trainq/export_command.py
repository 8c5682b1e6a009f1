"""`trainq export --to slurm|kubernetes|sagemaker`: a job as another engine's artifact.

The spec comes from a spec file with submit's flags over it (`-f SPEC`, as `trainq submit`
builds it) or from an existing job (`trainq export JOB`, its spec as trainqd holds it). The
translation is `trainq.core.export`'s; this module gathers the inputs, prints the artifact
or writes it (`-o FILE`), and turns a refusal into one line and exit status 2.

Its flags are `trainq.flags.export`'s (the spec's are `trainq.spec_flags.SPEC_FLAGS`, as
for submit); `export` is the command itself (`Context`, parsed arguments) and `run_export`
the same for callers that gather the options otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from trainq.client.specs import spec_of
from trainq.core.errors import InvalidRequest, InvalidSpec
from trainq.core.export.common import TARGETS
from trainq.flag_values import parse_job_id
from trainq.spec_flags import SubmitFlags, submit_flags
from trainq.specfile import build_spec, load_spec_file

if TYPE_CHECKING:  # pydantic is imported when the command runs, not when it is registered
    from trainq.context import Context
    from trainq.core.spec import JobSpec


# A NamedTuple, not a dataclass: a dataclass costs start-up time (see trainq.flag_values).
class ExportRequest(NamedTuple):
    """Everything `trainq export` is told."""

    target: str
    job: int | None = None  # export this job's spec, else the file and flags'
    spec_file: str | None = None
    flags: SubmitFlags = SubmitFlags()
    output: str | None = None
    # slurm
    python: str = sys.executable
    job_dir: str | None = None
    partition: str | None = None
    # kubernetes
    volumes: Sequence[tuple[str, str]] = ()
    namespace: str | None = None
    checkpoints: str | None = None
    init_image: str | None = None
    # sagemaker
    s3: Sequence[tuple[str, str]] = ()
    instance_type: str | None = None
    role_arn: str | None = None
    output_s3: str | None = None
    checkpoint_s3: str | None = None
    volume_size_gb: int = 50


def job_spec(ctx: Context, request: ExportRequest) -> JobSpec:
    """The spec to export, validated as trainqd validates a submission."""
    if request.job is not None:
        if request.spec_file is not None:
            raise InvalidRequest("give either JOB or -f SPEC, not both")
        data = spec_of(ctx.client(), request.job)  # refused if anything is hidden
        if data.get("after"):
            raise InvalidSpec(
                f"after: job {request.job} waits for trainq jobs, whose ids mean nothing "
                "elsewhere; export its spec with -f and --after with the target's job ids"
            )
        if any(value not in (None, (), []) for value in request.flags):
            data = build_spec(data, request.flags, _cwd(ctx), ctx.environ)  # flags over it
        return _parsed(data)
    cwd = _cwd(ctx)
    file_data = load_spec_file(request.spec_file, cwd, ctx.environ) if request.spec_file else None
    data = build_spec(file_data, request.flags, cwd, ctx.environ)
    if data.get("command") is None and data.get("image") is None:
        raise InvalidRequest(
            "nothing to export: give -f SPEC, a command after `--`, --image IMAGE, or a JOB"
        )
    return _parsed(data)


def _cwd(ctx: Context) -> Path:
    if ctx.cwd is None:
        raise InvalidRequest("the current directory no longer exists; cd to one that does")
    return ctx.cwd


def _parsed(data: dict[str, Any]) -> JobSpec:
    from trainq.core.spec import parse_spec  # noqa: PLC0415 (see TYPE_CHECKING above)

    try:
        return parse_spec(data)
    except ValueError as exc:  # one line, exit 2, as trainqd refuses a submission
        raise InvalidSpec(str(exc)) from None


def artifact(spec: JobSpec, request: ExportRequest) -> str:
    """The target's artifact as text (Unsupported for what it cannot express)."""
    if spec.after and request.target != "slurm":
        from trainq.core.export.common import Unsupported  # noqa: PLC0415

        raise Unsupported(request.target, "after", "it has no dependencies between jobs")
    if request.target == "slurm":
        from trainq.core.export import slurm  # noqa: PLC0415 (one target per run)

        return slurm.batch_script(
            spec,
            python=request.python,
            job_dir_base=request.job_dir,
            partition=request.partition,
        )
    if request.target == "kubernetes":
        from trainq.core.export import kubernetes  # noqa: PLC0415

        manifest = kubernetes.manifest(
            spec,
            volumes=dict(request.volumes),
            namespace=request.namespace,
            checkpoints=request.checkpoints,
            init_image=request.init_image or kubernetes.DEFAULT_INIT_IMAGE,
        )
        return json.dumps(manifest, indent=2) + "\n"
    if request.target == "sagemaker":
        return json.dumps(_sagemaker_body(spec, request), indent=2) + "\n"
    raise InvalidRequest(f"unknown target {request.target!r}: use {', '.join(TARGETS)}")


def _sagemaker_body(spec: JobSpec, request: ExportRequest) -> dict[str, Any]:
    from trainq.core.export import sagemaker  # noqa: PLC0415

    return sagemaker.create_training_job(
        spec,
        s3_uris=dict(request.s3),
        instance_type=request.instance_type,
        role_arn=request.role_arn,
        output_s3=request.output_s3,
        checkpoint_s3=request.checkpoint_s3,
        volume_size_gb=request.volume_size_gb,
    )


def run_export(ctx: Context, request: ExportRequest) -> int:
    spec = job_spec(ctx, request)
    text = artifact(spec, request)
    if request.target == "slurm":
        from trainq.core.export import slurm  # noqa: PLC0415

        for note in slurm.notes(spec):
            ctx.say(f"note: {note}")
    path: Path | None = None
    if request.output is None:
        ctx.stdout.write(text)
        ctx.stdout.flush()
    else:
        path = Path(request.output)
        if not path.is_absolute() and ctx.cwd is not None:
            path = ctx.cwd / path
        try:
            path.write_text(text, encoding="utf-8")
            if request.target == "slurm":
                path.chmod(0o755)
        except OSError as exc:
            raise InvalidRequest(f"cannot write {path}: {exc.strerror or exc}") from None
        ctx.say(f"wrote {path}")
    if request.target == "sagemaker":
        from trainq.core.export import sagemaker  # noqa: PLC0415

        body = json.loads(text)
        # The equivalent AWS CLI command, for the person (stdout stays the JSON alone).
        ctx.stderr.write(sagemaker.aws_command(body, None if path is None else str(path)) + "\n")
        ctx.stderr.flush()
    return 0


def _job_or_command(words: Sequence[str]) -> tuple[int | None, Sequence[str]]:
    """A lone number is a job id (no trainer's command line is a bare number)."""
    if len(words) == 1 and words[0].isdigit():
        try:
            return parse_job_id(words[0]), ()
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    return None, words


def request_from_args(args: argparse.Namespace) -> ExportRequest:
    job, command = _job_or_command(args.job_or_command)
    flags = submit_flags(vars(args), command)
    return ExportRequest(
        target=args.to,
        job=job,
        spec_file=args.file,
        flags=flags,
        output=args.output,
        python=args.python,
        job_dir=args.job_dir,
        partition=args.partition,
        volumes=args.volume,
        namespace=args.namespace,
        checkpoints=args.checkpoints,
        init_image=args.init_image,
        s3=args.s3,
        instance_type=args.instance_type,
        role_arn=args.role_arn,
        output_s3=args.output_s3,
        checkpoint_s3=args.checkpoint_s3,
        volume_size_gb=args.volume_size,
    )


def export(ctx: Context, args: argparse.Namespace) -> int:
    """The `export` command, as `trainq.commands.COMMANDS` calls its commands."""
    return run_export(ctx, request_from_args(args))
