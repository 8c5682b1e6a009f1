"""The exports' own engines' checks, offline: botocore's SageMaker model and the Kubernetes
versions kubernetes-validate knows (tests/unit/test_export_*.py)."""

from __future__ import annotations

import re
from typing import Any

import botocore.session
from botocore.model import ListShape, MapShape, Shape, StructureShape
from botocore.validate import ParamValidator
from kubernetes_validate.utils import all_versions, major_minor

LAST_THREE = sorted({major_minor(v) for v in all_versions()})[-3:]

ROLE = "arn:aws:iam::123456789012:role/SageMakerTraining"
OPERATION = (
    botocore.session.get_session()
    .get_service_model("sagemaker")
    .operation_model("CreateTrainingJob")
)


def constraint_problems(value: Any, shape: Shape, where: str = "") -> list[str]:
    """What ParamValidator leaves out: the model's patterns, maximums and enums."""
    meta = shape.metadata
    problems = []
    if isinstance(shape, StructureShape):
        for key, item in value.items():
            problems += constraint_problems(item, shape.members[key], f"{where}.{key}")
    elif isinstance(shape, ListShape):
        for i, item in enumerate(value):
            problems += constraint_problems(item, shape.member, f"{where}[{i}]")
    elif isinstance(shape, MapShape):
        for key, item in value.items():
            problems += constraint_problems(key, shape.key, f"{where} key {key}")
            problems += constraint_problems(item, shape.value, f"{where}.{key}")
    if isinstance(value, str | list | dict) and "max" in meta and len(value) > meta["max"]:
        problems.append(f"{where}: longer than {meta['max']}")
    if isinstance(value, int) and "max" in meta and value > meta["max"]:
        problems.append(f"{where}: over {meta['max']}")
    if isinstance(value, str):
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            problems.append(f"{where}: {value!r} does not match {meta['pattern']}")
        if shape.enum and value not in shape.enum:
            problems.append(f"{where}: {value!r} not one of {shape.enum}")
    return problems


def check_with_botocore(body: dict[str, Any]) -> None:
    report = ParamValidator().validate(body, OPERATION.input_shape)
    assert not report.has_errors(), report.generate_report()
    assert constraint_problems(body, OPERATION.input_shape) == []
