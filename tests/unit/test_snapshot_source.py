"""Which directory a job's snapshot copies at submit (snapshots.source_of)."""

from __future__ import annotations

import json

import pytest

from trainq.core.spec import JobSpec
from trainqd.attempts.snapshots import source_of


def spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"command": ["python3", "train.py"], **fields})


@pytest.mark.parametrize(
    ("fields", "source"),
    [
        ({"source_dir": "/home/ann/proj"}, "/home/ann/proj"),
        ({"source_dir": "/home/ann/proj", "snapshot": False}, None),
        ({"hyperparameters": {"sagemaker_submit_directory": "/home/ann/proj"}}, "/home/ann/proj"),
        # The SageMaker SDK writes its hyperparameters as JSON.
        (
            {"hyperparameters": {"sagemaker_submit_directory": json.dumps("/home/ann/proj")}},
            "/home/ann/proj",
        ),
        # The contract's own paths are the job's ml root seen from inside it.
        ({"hyperparameters": {"sagemaker_submit_directory": "/opt/ml/code"}}, None),
        ({"hyperparameters": {"sagemaker_submit_directory": "/opt/ml"}}, None),
        ({"hyperparameters": {"sagemaker_submit_directory": "s3://bucket/code.tar.gz"}}, None),
        ({"hyperparameters": {"sagemaker_submit_directory": "/opt/mlx/code"}}, "/opt/mlx/code"),
        ({}, None),
    ],
)
def test_the_source_a_snapshot_copies(fields: dict[str, object], source: str | None) -> None:
    assert source_of(spec(**fields)) == source


def test_a_container_jobs_code_is_its_images() -> None:
    container = JobSpec.model_validate({"image": "trainer:1", "source_dir": "/home/ann/proj"})
    assert source_of(container) is None
