"""`trainq export --to sagemaker`: a CreateTrainingJob request, checked against botocore's
own SageMaker service model (offline): its ParamValidator (names, types, required members,
minimums), then every pattern, maximum and enum the model states."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from botocore.validate import ParamValidator

from tests.support.exports import (
    OPERATION,
    ROLE,
    check_with_botocore,
    constraint_problems,
)
from trainq.core.export import Unsupported, sagemaker
from trainq.core.spec import JobSpec, parse_spec


def spec(**fields: object) -> JobSpec:
    return parse_spec({"image": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/resnet:1", **fields})


FULL = {
    "name": "resnet_a.v2",
    "gpus": 4,
    "hyperparameters": {"lr": 0.1, "epochs": 3, "augment": True},
    "environment": {"WANDB_MODE": "offline"},
    "channels": {
        "train": {
            "source": "/data/train.rec",
            "mode": "Pipe",
            "record_wrapper": "RecordIO",
            "compression": "Gzip",
            "shuffle_seed": 7,
        },
        "val": {"source": "/data/val", "content_type": "text/csv"},
    },
    "max_runtime_seconds": 7200,
    "stop_grace_seconds": 60.0,
    "max_retries": 2,
    "network": "none",
}


def full_request() -> dict[str, Any]:
    return sagemaker.create_training_job(
        spec(**FULL),
        s3_uris={"train": "s3://bucket/train/", "val": "s3://bucket/val/"},
        instance_type=None,
        role_arn=ROLE,
        output_s3="s3://bucket/output/",
        checkpoint_s3="s3://bucket/checkpoints/resnet/",
    )


def test_the_request_passes_botocores_validation() -> None:
    check_with_botocore(full_request())
    minimal = sagemaker.create_training_job(
        spec(), s3_uris={}, instance_type="ml.c5.xlarge", role_arn=ROLE, output_s3="s3://b/o"
    )
    check_with_botocore(minimal)


def test_botocores_validation_is_real() -> None:
    body = full_request()
    body["ResourceConfig"]["InstanceCount"] = "one"
    assert ParamValidator().validate(body, OPERATION.input_shape).has_errors()
    body = full_request()
    body["TrainingJobName"] = "resnet_a.v2"
    assert constraint_problems(body, OPERATION.input_shape)


def test_the_request_says_what_the_spec_says() -> None:
    body = full_request()
    assert body["TrainingJobName"] == "resnet-a-v2"
    assert body["AlgorithmSpecification"]["TrainingImage"].endswith("/resnet:1")
    assert body["HyperParameters"] == {"lr": "0.1", "epochs": "3", "augment": "true"}
    assert body["ResourceConfig"] == {
        "InstanceType": "ml.g5.12xlarge",  # four GPUs
        "InstanceCount": 1,
        "VolumeSizeInGB": 50,
    }
    assert body["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200}
    assert body["CheckpointConfig"] == {
        "S3Uri": "s3://bucket/checkpoints/resnet/",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert body["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert body["EnableNetworkIsolation"] is True
    assert body["Environment"] == {"WANDB_MODE": "offline"}
    train, val = body["InputDataConfig"]
    assert train == {
        "ChannelName": "train",
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": "s3://bucket/train/",
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "CompressionType": "Gzip",
        "RecordWrapperType": "RecordIO",
        "InputMode": "Pipe",
        "ShuffleConfig": {"Seed": 7},
    }
    assert (val["InputMode"], val["ContentType"]) == ("File", "text/csv")


def test_retries_without_a_checkpoint_uri_checkpoint_beside_the_output() -> None:
    body = sagemaker.create_training_job(
        spec(name="resnet", max_retries=2),
        s3_uris={},
        instance_type="ml.m5.xlarge",
        role_arn=ROLE,
        output_s3="s3://bucket/output/",
    )
    assert body["CheckpointConfig"] == {
        "S3Uri": "s3://bucket/output/resnet/checkpoints/",
        "LocalPath": "/opt/ml/checkpoints",
    }
    check_with_botocore(body)
    no_retries = sagemaker.create_training_job(
        spec(name="resnet", max_retries=0),
        s3_uris={},
        instance_type="ml.m5.xlarge",
        role_arn=ROLE,
        output_s3="s3://bucket/output",
    )
    assert "CheckpointConfig" not in no_retries


def test_the_aws_command_sends_the_same_request() -> None:
    body = full_request()
    words = shlex.split(sagemaker.aws_command(body))
    assert words[:4] == ["aws", "sagemaker", "create-training-job", "--cli-input-json"]
    assert json.loads(words[4]) == body
    assert shlex.split(sagemaker.aws_command(body, "/tmp/a b.json"))[4] == "file:///tmp/a b.json"


@pytest.mark.parametrize(
    ("fields", "options", "field"),
    [
        ({"image": None, "command": ["python3", "train.py"]}, {}, "command"),
        ({"working_dir": "/workspace"}, {}, "working_dir"),
        ({"stop_grace_seconds": 300.0}, {}, "stop_grace_seconds"),
        ({"max_retries": 31}, {}, "max_retries"),
        ({"environment": {"BIG": "x" * 513}}, {}, "environment.BIG"),
        (
            {"channels": {"t": {"source": "/d", "mode": "Pipe", "epochs": 2}}},
            {"s3_uris": {"t": "s3://b/t"}},
            "channels.t.epochs",
        ),
        ({"channels": {"train": {"source": "/d"}}}, {}, "channels.train"),
        ({}, {"s3_uris": {"x": "s3://b/x"}}, "--s3 x"),
        ({"channels": {"t": {"source": "/d"}}}, {"s3_uris": {"t": "/local/path"}}, "--s3 t"),
        ({}, {"role_arn": None}, "--role-arn"),
        ({}, {"output_s3": None}, "--output-s3"),
        ({"gpus": 3}, {}, "gpus"),
    ],
)
def test_what_sagemaker_cannot_express_is_refused(
    fields: dict[str, object], options: dict[str, Any], field: str
) -> None:
    kwargs: dict[str, Any] = {
        "s3_uris": {},
        "instance_type": None,
        "role_arn": ROLE,
        "output_s3": "s3://bucket/out",
        **options,
    }
    with pytest.raises(Unsupported) as refused:
        sagemaker.create_training_job(spec(**fields), **kwargs)
    assert refused.value.field == field
    assert refused.value.message.startswith(f"cannot export to sagemaker: {field}: ")
