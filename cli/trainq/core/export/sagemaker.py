"""A container job as a SageMaker `CreateTrainingJob` request (and its `aws` command line).

trainq's trainer contract is SageMaker's, so the mapping is mostly names:

    image                    AlgorithmSpecification.TrainingImage
    hyperparameters          HyperParameters (strings, as trainq keeps them)
    channels                 InputDataConfig: mode, content type, compression, record
                             wrapper, shuffle seed; the data's S3 URI per channel is the
                             user's to give
    gpus                     ResourceConfig.InstanceType (the user's, else the smallest
                             common type with that many GPUs), one instance
    max_runtime_seconds      StoppingCondition.MaxRuntimeInSeconds
    max_retries              RetryStrategy.MaximumRetryAttempts: SageMaker retries a job
                             that failed for its own reasons (InternalServerError), which
                             is what trainq's "lost" attempts are; a trainer's own exit
                             status is final there; with retries, CheckpointConfig
                             (--checkpoint-s3, else <output>/<job name>/checkpoints/),
                             so that a retry resumes as it would here
    network = "none"         EnableNetworkIsolation
    environment              Environment
    instance_count           ResourceConfig.InstanceCount (SageMaker's hosts algo-1..N)
    instance_groups          ResourceConfig.InstanceGroups (a heterogeneous cluster): each
                             group's name, count and instance type (by its GPUs)

What SageMaker has no place for is refused: a command (SageMaker runs images), a working
directory, a stop grace over SageMaker's fixed 120 seconds, a cap on Pipe mode epochs.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from trainq.core.export.common import Unsupported, job_name
from trainq.core.spec import JobSpec

TARGET = "sagemaker"
# SageMaker sends SIGTERM and, 120 seconds later, SIGKILL.
SAGEMAKER_GRACE = 120.0
DEFAULT_MAX_RUNTIME = 86400  # SageMaker's own default: one day
MAX_RUNTIME = 28 * 86400
MAX_RETRY_ATTEMPTS = 30
MAX_ENV_VALUE = 512
CHECKPOINTS = "/opt/ml/checkpoints"
# The smallest common instance type with that many GPUs (0: a CPU instance).
INSTANCE_FOR_GPUS = {
    0: "ml.m5.xlarge",
    1: "ml.g5.xlarge",
    4: "ml.g5.12xlarge",
    8: "ml.p4d.24xlarge",
}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9-]+")
S3_URI = re.compile(r"^(https|s3)://([^/]+)/?(.*)$")


def training_job_name(spec: JobSpec) -> str:
    """SageMaker's names: letters, digits and '-', at most 63."""
    name = _NAME_CHARS.sub("-", job_name(spec)).strip("-")[:63].rstrip("-")
    return name or "trainq-job"


def _s3(field: str, uri: str | None) -> str:
    if uri is None or not S3_URI.match(uri):
        raise Unsupported(TARGET, field, f"{uri!r} is not an S3 URI (s3://bucket/prefix)")
    return uri


def _instance_type(gpus: int, given: str | None) -> str:
    if given is not None:
        return given
    found = INSTANCE_FOR_GPUS.get(gpus)
    if found is None:
        raise Unsupported(
            TARGET, "gpus", f"no default instance type has {gpus} GPUs: give --instance-type"
        )
    return found


def _check_nodes(spec: JobSpec) -> None:
    """SageMaker runs one image on every host and ends the job when every host has."""
    if spec.restart != "job":
        raise Unsupported(
            TARGET, "restart", "SageMaker restarts no host alone: a failing host ends the job"
        )
    for group in spec.instance_groups:
        where = f"instance_groups.{group.name}"
        if group.image is not None or group.environment:
            raise Unsupported(
                TARGET,
                where,
                "SageMaker runs the job's one image, with one environment, on every instance group",
            )
        if group.primary:
            raise Unsupported(
                TARGET, f"{where}.primary", "a SageMaker job ends when every host has ended"
            )


def _resources(spec: JobSpec, given: str | None, volume_size_gb: int) -> dict[str, Any]:
    if not spec.instance_groups:
        return {
            "InstanceType": _instance_type(spec.gpus, given),
            "InstanceCount": spec.instance_count,
            "VolumeSizeInGB": volume_size_gb,
        }
    return {
        "InstanceGroups": [
            {
                "InstanceType": _instance_type(group.gpus, given),
                "InstanceCount": group.instance_count,
                "InstanceGroupName": group.name,
            }
            for group in spec.instance_groups
        ],
        "VolumeSizeInGB": volume_size_gb,
    }


def _check(spec: JobSpec, s3_uris: dict[str, str]) -> None:
    if spec.image is None:
        raise Unsupported(
            TARGET, "command", "SageMaker runs images; give the job an image to export it"
        )
    _check_nodes(spec)
    if spec.working_dir is not None:
        raise Unsupported(TARGET, "working_dir", "SageMaker starts the image's own working dir")
    grace = spec.stop_grace_seconds
    if grace is not None and grace > SAGEMAKER_GRACE:
        raise Unsupported(
            TARGET,
            "stop_grace_seconds",
            f"SageMaker gives a stopped trainer {SAGEMAKER_GRACE:g} seconds, not {grace:g}",
        )
    if spec.max_runtime_seconds is not None and spec.max_runtime_seconds > MAX_RUNTIME:
        raise Unsupported(
            TARGET, "max_runtime_seconds", f"SageMaker allows at most {MAX_RUNTIME} seconds"
        )
    if spec.max_retries > MAX_RETRY_ATTEMPTS:
        raise Unsupported(
            TARGET, "max_retries", f"SageMaker retries a job at most {MAX_RETRY_ATTEMPTS} times"
        )
    for key, value in spec.environment.items():
        if len(value) > MAX_ENV_VALUE:
            raise Unsupported(
                TARGET,
                f"environment.{key}",
                f"SageMaker takes values of at most {MAX_ENV_VALUE} characters",
            )
    for name, channel in spec.channels.items():
        if channel.epochs is not None:
            raise Unsupported(
                TARGET,
                f"channels.{name}.epochs",
                "SageMaker feeds as many epochs as the trainer reads; it has no cap to set",
            )
        if name not in s3_uris:
            raise Unsupported(
                TARGET, f"channels.{name}", f"say where its data is in S3 (--s3 {name}=s3://...)"
            )
    for name in s3_uris:
        if name not in spec.channels:
            raise Unsupported(TARGET, f"--s3 {name}", "the job has no channel of that name")


def _channel(name: str, spec: JobSpec, uri: str) -> dict[str, Any]:
    channel = spec.channels[name]
    entry: dict[str, Any] = {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": _s3(f"--s3 {name}", uri),
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "CompressionType": channel.compression,
        "RecordWrapperType": channel.record_wrapper,
        "InputMode": channel.mode,
    }
    if channel.content_type is not None:
        entry["ContentType"] = channel.content_type
    if channel.shuffle_seed is not None:
        entry["ShuffleConfig"] = {"Seed": channel.shuffle_seed}
    return entry


def create_training_job(
    spec: JobSpec,
    *,
    s3_uris: dict[str, str],
    instance_type: str | None,
    role_arn: str | None,
    output_s3: str | None,
    checkpoint_s3: str | None = None,
    volume_size_gb: int = 50,
) -> dict[str, Any]:
    """The request body (botocore's and the AWS CLI's parameter names)."""
    _check(spec, s3_uris)
    assert spec.image is not None
    if not role_arn:
        raise Unsupported(TARGET, "--role-arn", "SageMaker runs a job as an IAM role: name it")
    body: dict[str, Any] = {
        "TrainingJobName": training_job_name(spec),
        "AlgorithmSpecification": {
            "TrainingImage": spec.image,
            # Each channel says its own mode below; this is the default for the others.
            "TrainingInputMode": "File",
        },
        "RoleArn": role_arn,
        "OutputDataConfig": {"S3OutputPath": _s3("--output-s3", output_s3)},
        "ResourceConfig": _resources(spec, instance_type, volume_size_gb),
        "StoppingCondition": {
            "MaxRuntimeInSeconds": spec.max_runtime_seconds or DEFAULT_MAX_RUNTIME
        },
    }
    if spec.hyperparameters:
        body["HyperParameters"] = dict(spec.hyperparameters)
    if spec.channels:
        body["InputDataConfig"] = [_channel(name, spec, s3_uris[name]) for name in spec.channels]
    if spec.environment:
        body["Environment"] = dict(spec.environment)
    if spec.network == "none":
        body["EnableNetworkIsolation"] = True
    if checkpoint_s3 is None and spec.max_retries:
        # A retry there must find the checkpoints, as it would here: beside the job's output.
        output = str(body["OutputDataConfig"]["S3OutputPath"]).rstrip("/")
        checkpoint_s3 = f"{output}/{body['TrainingJobName']}/checkpoints/"
    if checkpoint_s3 is not None:
        body["CheckpointConfig"] = {
            "S3Uri": _s3("--checkpoint-s3", checkpoint_s3),
            "LocalPath": CHECKPOINTS,
        }
    if spec.max_retries:
        body["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_retries}
    return body


def aws_command(body: dict[str, Any], path: str | None = None) -> str:
    """The AWS CLI line that sends `body` (from the file at `path`, when it was written)."""
    source = f"file://{path}" if path is not None else json.dumps(body, separators=(",", ":"))
    return shlex.join(["aws", "sagemaker", "create-training-job", "--cli-input-json", source])
