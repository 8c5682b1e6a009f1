"""`trainq export` of a job of several nodes: SageMaker's InstanceCount and InstanceGroups,
checked by botocore's own SageMaker model; Kubernetes' Indexed Job with a headless Service,
checked against the Kubernetes schemas; what neither can say, refused in one line."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.support.exports import (
    LAST_THREE,
    ROLE,
    check_with_botocore,
)
from trainq.core.export import Unsupported, kubernetes, sagemaker, slurm
from trainq.core.spec import JobSpec, parse_spec

IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/resnet:1"


def spec(**fields: object) -> JobSpec:
    return parse_spec({"image": IMAGE, "name": "ddp", **fields})


def request(job: JobSpec) -> dict[str, Any]:
    return sagemaker.create_training_job(
        job, s3_uris={}, instance_type=None, role_arn=ROLE, output_s3="s3://bucket/out/"
    )


def test_sagemaker_instance_count() -> None:
    body = request(spec(instance_count=4, gpus=1))
    check_with_botocore(body)
    assert body["ResourceConfig"]["InstanceCount"] == 4
    assert body["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge"


def test_sagemaker_instance_groups() -> None:
    groups = [
        {"name": "pservers", "instance_count": 2},
        {"name": "trainers", "instance_count": 3, "gpus": 4},
    ]
    body = request(spec(instance_groups=groups))
    check_with_botocore(body)
    assert body["ResourceConfig"]["InstanceGroups"] == [
        {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "InstanceGroupName": "pservers"},
        {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 3, "InstanceGroupName": "trainers"},
    ]
    assert "InstanceCount" not in body["ResourceConfig"]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"instance_count": 2, "restart": "node"}, "restart"),
        (
            {"instance_groups": [{"name": "a", "instance_count": 1, "image": "other:1"}]},
            "instance_groups.a",
        ),
        (
            {
                "instance_groups": [
                    {"name": "a", "instance_count": 1, "primary": True},
                    {"name": "b", "instance_count": 1},
                ]
            },
            "instance_groups.a.primary",
        ),
    ],
)
def test_what_sagemaker_cannot_say_is_refused(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(Unsupported) as caught:
        request(spec(**fields))
    assert where in str(caught.value)
    assert "\n" not in str(caught.value)


def nodes_manifest(**fields: object) -> dict[str, Any]:
    return kubernetes.manifest(spec(instance_count=3, gpus=2, **fields), volumes={})


@pytest.mark.parametrize("version", LAST_THREE)
def test_the_indexed_job_and_its_service_pass_the_kubernetes_schema(version: str) -> None:
    for item in nodes_manifest()["items"]:
        kubernetes_validate.validate(item, version, strict=True)


def test_kubernetes_runs_one_pod_per_node_named_by_a_headless_service() -> None:
    items = {item["kind"]: item for item in nodes_manifest()["items"]}
    service, job, config = items["Service"], items["Job"], items["ConfigMap"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"trainq/job": "ddp"}
    body = job["spec"]
    assert (body["completionMode"], body["completions"], body["parallelism"]) == ("Indexed", 3, 3)
    pod = body["template"]["spec"]
    assert pod["subdomain"] == "ddp"
    [trainer] = pod["containers"]
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    env = {e["name"]: e for e in trainer["env"]}
    assert env["WORLD_SIZE"]["value"] == "3"
    assert env["MASTER_ADDR"]["value"] == "ddp-0.ddp"
    assert "job-completion-index" in env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    # Each pod's resourceconfig.json names it, and every pod by its DNS name.
    hosts = ["ddp-0.ddp", "ddp-1.ddp", "ddp-2.ddp"]
    for index, host in enumerate(hosts):
        resources = json.loads(config["data"][f"resourceconfig-{index}.json"])
        assert (resources["current_host"], resources["hosts"]) == (host, hosts)
    assert "JOB_COMPLETION_INDEX" in " ".join(pod["initContainers"][0]["command"])


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"restart": "node"}, "restart"),
        (
            {
                "instance_count": 1,
                "restart": "node",
                "instance_groups": [{"name": "a", "instance_count": 2}],
            },
            "restart",
        ),
    ],
)
def test_what_kubernetes_cannot_say_is_refused(fields: dict[str, Any], where: str) -> None:
    count = {} if "instance_groups" in fields else {"instance_count": 2}
    with pytest.raises(Unsupported) as caught:
        kubernetes.manifest(spec(**count, **fields), volumes={})
    assert where in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"instance_count": 2, "restart": "node"}, "restart"),
        (
            {
                "instance_groups": [
                    {"name": "ps", "instance_count": 1, "primary": False},
                    {"name": "worker", "instance_count": 2, "primary": True},
                ]
            },
            "instance_groups.primary",
        ),
        ({"instance_count": 2, "image": IMAGE, "command": None}, "image"),
    ],
)
def test_what_a_slurm_step_cannot_run_is_refused_in_one_line(
    fields: dict[str, Any], where: str
) -> None:
    job = parse_spec({"command": ["python3", "train.py"], **fields})
    with pytest.raises(Unsupported) as caught:
        slurm.batch_script(job, python="python3")
    said = str(caught.value)
    assert said.startswith(f"cannot export to slurm: {where}: ")
    assert "\n" not in said
