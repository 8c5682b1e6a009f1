"""`trainq export`: a job, or a spec file and the spec's flags, as another engine's
artifact."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
import sys
from typing import Annotated, Any

import typer

from trainq.core.export.common import TARGETS
from trainq.flag_values import parse_key_value
from trainq.flags.common import Socket, parsed
from trainq.flags.spec import with_spec_flags
from trainq.flags.values import COUNT, typed

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order

EXPORT_HELP = """\
Print a job as another engine's artifact: a Slurm batch script (--to slurm), a Kubernetes
List of a ConfigMap and a Job (--to kubernetes, container jobs), or a SageMaker
CreateTrainingJob request and its `aws` command (--to sagemaker). The spec comes from JOB
(an existing job) or from -f SPEC with submit's flags over it. What the target cannot
express is refused with one line naming the field (exit 2)."""


def _target(text: str) -> str:
    if text not in TARGETS:
        choices = ", ".join(repr(target) for target in TARGETS)
        raise ValueError(f"invalid choice: {text!r} (choose from {choices})")
    return text


def _targets(incomplete: str) -> list[str]:
    return [target for target in TARGETS if target.startswith(incomplete)]


def _mapping(text: str) -> tuple[str, str]:
    key, value = parse_key_value(text)
    if not value:
        raise ValueError(f"nothing after '=' in {text!r}")
    return key, value


TARGET = typed(_target, "target")
MAPPING = typed(_mapping, "NAME=VALUE")


def _option(*decls: str, panel: str, **settings: Any) -> Any:
    """An option of one target's (listed under its name in --help)."""
    return typer.Option(*decls, rich_help_panel=panel, show_default=False, **settings)


@commands.command(help=EXPORT_HELP, short_help="a job as a Slurm, Kubernetes or SageMaker artifact")
@with_spec_flags(after="file", panel="the job (as for submit)")
def export(
    ctx: typer.Context,
    *,
    job_or_command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="JOB | -- COMMAND",
            help="an existing job's id, or the trainer's command line (subprocess jobs)",
            show_default=False,
        ),
    ] = None,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="slurm|kubernetes|sagemaker",
            parser=TARGET,
            autocompletion=_targets,
            help="the target engine",
        ),
    ],
    output: Annotated[
        str | None, typer.Option("-o", "--output", metavar="FILE", help="write the artifact here")
    ] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--file", metavar="SPEC", help="spec file (.toml or .json)")
    ] = None,
    python: Annotated[
        str,
        _option(
            "--python",
            panel="slurm",
            metavar="PATH",
            help="the Python with trainq installed on the nodes (default: this one)",
        ),
    ] = sys.executable,
    job_dir: Annotated[
        str | None,
        _option(
            "--job-dir",
            panel="slurm",
            metavar="DIR",
            help="where job directories go on the cluster (default: the submit directory)",
        ),
    ] = None,
    partition: Annotated[
        str | None, _option("--partition", panel="slurm", metavar="NAME", help="the partition")
    ] = None,
    volume: Annotated[
        list[str] | None,
        _option(
            "--volume",
            panel="kubernetes",
            metavar="CHANNEL=SOURCE",
            parser=MAPPING,
            help="the channel's data: a PersistentVolumeClaim name, or an absolute host path "
            "(repeatable)",
        ),
    ] = None,
    namespace: Annotated[
        str | None, _option("--namespace", panel="kubernetes", metavar="NAME", help="its namespace")
    ] = None,
    checkpoints: Annotated[
        str | None,
        _option(
            "--checkpoints",
            panel="kubernetes",
            metavar="SOURCE",
            help="a claim or host path for /opt/ml/checkpoints, so that a retry resumes",
        ),
    ] = None,
    init_image: Annotated[
        str | None,
        _option(
            "--init-image",
            panel="kubernetes",
            metavar="IMAGE",
            help="the image that lays out /opt/ml (a shell, cp)",
        ),
    ] = None,
    s3: Annotated[
        list[str] | None,
        _option(
            "--s3",
            panel="sagemaker",
            metavar="CHANNEL=S3_URI",
            parser=MAPPING,
            help="where the channel's data is in S3 (repeatable)",
        ),
    ] = None,
    instance_type: Annotated[
        str | None,
        _option("--instance-type", panel="sagemaker", metavar="TYPE", help="e.g. ml.g5.xlarge"),
    ] = None,
    role_arn: Annotated[
        str | None,
        _option(
            "--role-arn",
            panel="sagemaker",
            metavar="ARN",
            help="the IAM role SageMaker runs the job as",
        ),
    ] = None,
    output_s3: Annotated[
        str | None,
        _option(
            "--output-s3",
            panel="sagemaker",
            metavar="S3_URI",
            help="where SageMaker puts model.tar.gz",
        ),
    ] = None,
    checkpoint_s3: Annotated[
        str | None,
        _option(
            "--checkpoint-s3",
            panel="sagemaker",
            metavar="S3_URI",
            help="synced with /opt/ml/checkpoints",
        ),
    ] = None,
    volume_size: Annotated[
        int,
        _option(
            "--volume-size",
            panel="sagemaker",
            metavar="GB",
            parser=COUNT,
            help="the training volume's size (default 50)",
        ),
    ] = 50,
    socket: Socket = None,
    spec_flags: dict[str, Any],
) -> argparse.Namespace:
    return parsed(
        ctx, "export", socket=socket, to=to, output=output, file=file, **spec_flags,
        job_or_command=list(job_or_command or []), python=python, job_dir=job_dir,
        partition=partition, volume=list(volume or []), namespace=namespace,
        checkpoints=checkpoints, init_image=init_image, s3=list(s3 or []),
        instance_type=instance_type, role_arn=role_arn, output_s3=output_s3,
        checkpoint_s3=checkpoint_s3, volume_size=volume_size,
    )  # fmt: skip
