"""`trainq export --to slurm|kubernetes|sagemaker`: a job as another engine's artifact.

The spec comes from a spec file with submit's flags over it (`-f SPEC`, as `trainq submit`
builds it) or from an existing job (`trainq export JOB`, its spec as trainqd holds it). The
translation is `trainq.core.export`'s; this module gathers the inputs, prints the artifact
or writes it (`-o FILE`), and turns a refusal into one line and exit status 2.

`add_parser` registers the command on an argparse sub-parser set; `export` is the command
itself (`Context`, parsed arguments) and `run_export` the same for callers that gather the
options otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from trainq.again import spec_of
from trainq.core.errors import InvalidRequest, InvalidSpec
from trainq.core.export.common import TARGETS
from trainq.specfile import (
    SubmitFlags,
    build_spec,
    load_spec_file,
    parse_after,
    parse_channel,
    parse_env,
    parse_integer,
    parse_job_id,
    parse_key_value,
    parse_seconds,
    parse_whole_number,
    parse_whole_seconds,
    submit_flags,
)

if TYPE_CHECKING:  # pydantic is imported when the command runs, not when it is registered
    from trainq.commands import Context
    from trainq.core.spec import JobSpec


# A NamedTuple, not a dataclass: every `trainq` command imports this module (to register
# `export`), and a dataclass costs start-up time (see trainq.specfile).
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


# --- argparse ---------------------------------------------------------------------------


def _typed(parse: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = what
    return convert


def _mapping(text: str) -> tuple[str, str]:
    key, value = parse_key_value(text)
    if not value:
        raise ValueError(f"nothing after '=' in {text!r}")
    return key, value


EXPORT_HELP = """\
Print a job as another engine's artifact: a Slurm batch script (--to slurm), a Kubernetes
List of a ConfigMap and a Job (--to kubernetes, container jobs), or a SageMaker
CreateTrainingJob request and its `aws` command (--to sagemaker). The spec comes from JOB
(an existing job) or from -f SPEC with submit's flags over it. What the target cannot
express is refused with one line naming the field (exit 2)."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Register `export` on `sub` (argparse's sub-parsers); `common` holds --socket."""
    p: argparse.ArgumentParser = sub.add_parser(
        "export", parents=[common], help="a job as a Slurm, Kubernetes or SageMaker artifact",
        description=EXPORT_HELP,
    )  # fmt: skip
    p.add_argument("--to", required=True, choices=TARGETS, help="the target engine")
    p.add_argument("-o", "--output", metavar="FILE", help="write the artifact here")
    p.add_argument("-f", "--file", metavar="SPEC", help="spec file (.toml or .json)")
    p.add_argument("--name")
    p.add_argument("--gpus", type=_typed(parse_whole_number, "count"), metavar="N")
    p.add_argument("--nodes", type=_typed(parse_whole_number, "count"), metavar="N")
    p.add_argument("--priority", type=_typed(parse_integer, "integer"), metavar="P")
    kv = _typed(parse_key_value, "KEY=VALUE")
    p.add_argument("--hp", type=kv, action="append", default=[], metavar="K=V")
    p.add_argument(
        "--channel", type=_typed(parse_channel, "channel"), action="append", default=[],
        metavar="NAME=PATH[:MODE]",
    )  # fmt: skip
    p.add_argument(
        "--env", type=_typed(parse_env, "NAME=VALUE"), action="append", default=[],
        metavar="K=V",
    )  # fmt: skip
    p.add_argument("--max-runtime", type=_typed(parse_whole_seconds, "duration"), metavar="S")
    p.add_argument(
        "--after",
        type=_typed(parse_after, "dependency"),
        action="append",
        default=[],
        metavar="ID[:ok|:failed|:any]",
        help="slurm: start after this Slurm job (--dependency; repeatable)",
    )
    p.add_argument("--stop-grace", type=_typed(parse_seconds, "duration"), metavar="S")
    p.add_argument("--max-retries", type=_typed(parse_whole_number, "count"), metavar="N")
    p.add_argument("--image")
    p.add_argument("--engine", choices=("docker", "podman"))
    p.add_argument("--workdir", metavar="DIR")
    slurm = p.add_argument_group("slurm")
    slurm.add_argument(
        "--python", default=sys.executable, metavar="PATH",
        help="the Python with trainq installed on the nodes (default: this one)",
    )  # fmt: skip
    slurm.add_argument(
        "--job-dir", metavar="DIR",
        help="where job directories go on the cluster (default: the submit directory)",
    )  # fmt: skip
    slurm.add_argument("--partition")
    mapping = _typed(_mapping, "NAME=VALUE")
    k8s = p.add_argument_group("kubernetes")
    k8s.add_argument(
        "--volume", type=mapping, action="append", default=[], metavar="CHANNEL=SOURCE",
        help="the channel's data: a PersistentVolumeClaim name, or an absolute host path",
    )  # fmt: skip
    k8s.add_argument("--namespace")
    k8s.add_argument(
        "--checkpoints", metavar="SOURCE",
        help="a claim or host path for /opt/ml/checkpoints, so that a retry resumes",
    )  # fmt: skip
    k8s.add_argument(
        "--init-image", metavar="IMAGE", help="the image that lays out /opt/ml (a shell, cp)"
    )
    sm = p.add_argument_group("sagemaker")
    sm.add_argument(
        "--s3", type=mapping, action="append", default=[], metavar="CHANNEL=S3_URI",
        help="where the channel's data is in S3",
    )  # fmt: skip
    sm.add_argument("--instance-type", metavar="TYPE", help="e.g. ml.g5.xlarge")
    sm.add_argument("--role-arn", metavar="ARN", help="the IAM role SageMaker runs the job as")
    sm.add_argument("--output-s3", metavar="S3_URI", help="where SageMaker puts model.tar.gz")
    sm.add_argument("--checkpoint-s3", metavar="S3_URI", help="synced with /opt/ml/checkpoints")
    count = _typed(parse_whole_number, "count")
    sm.add_argument("--volume-size", type=count, default=50, metavar="GB")
    p.add_argument(
        "job_or_command", nargs="*", metavar="JOB | -- COMMAND",
        help="an existing job's id, or the trainer's command line (subprocess jobs)",
    )  # fmt: skip
    return p


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
    flags = submit_flags(args, command)
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
