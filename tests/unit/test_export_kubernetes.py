"""`trainq export --to kubernetes`: the List of a ConfigMap and a batch/v1 Job, validated
against the Kubernetes schemas of the last three minor versions kubernetes-validate ships
(offline), and what it says: GPUs, channels, limits, grace and the failure policy."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.support.exports import (
    LAST_THREE,
)
from trainq.core.export import Unsupported, kubernetes
from trainq.core.spec import JobSpec, parse_spec
from trainqd.attempts import contract
from trainqd.monitor.mlroot import ML_DIRS


def spec(**fields: object) -> JobSpec:
    return parse_spec({"image": "registry.example/resnet:1.2", **fields})


FULL = {
    "name": "ResNet_a.v2",
    "gpus": 2,
    "hyperparameters": {"lr": "0.1", "epochs": "3"},
    "environment": {"WANDB_MODE": "offline"},
    "channels": {
        "train": {"source": "/data/train", "content_type": "text/csv"},
        "val": {"source": "/data/val", "mode": "FastFile"},
    },
    "max_runtime_seconds": 7200,
    "stop_grace_seconds": 45.5,
    "max_retries": 4,
    "retry_exit_codes": [139, 6, 134, 11],
}


def full_manifest() -> dict[str, Any]:
    return kubernetes.manifest(
        spec(**FULL),
        volumes={"train": "imagenet-train", "val": "/mnt/datasets/val"},
        namespace="ml",
        checkpoints="resnet-checkpoints",
    )


def parts(manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    config_map, job = manifest["items"]
    return config_map, job


@pytest.mark.parametrize("version", LAST_THREE)
def test_every_item_passes_the_kubernetes_schema(version: str) -> None:
    assert len(LAST_THREE) == 3
    minimal = kubernetes.manifest(spec(), volumes={})
    for manifest in (full_manifest(), minimal):
        for item in manifest["items"]:
            # strict: no field the schema does not know
            kubernetes_validate.validate(item, version, strict=True)


@pytest.mark.parametrize("version", LAST_THREE)
def test_the_schema_check_is_real(version: str) -> None:
    _, job = parts(full_manifest())
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = "two GPUs"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, version, strict=True)


def test_the_job_says_what_the_spec_says() -> None:
    _, job = parts(full_manifest())
    assert job["metadata"] == {
        "name": "resnet-a-v2",
        "labels": {"trainq/job": "resnet-a-v2"},
        "namespace": "ml",
    }
    body = job["spec"]
    assert body["activeDeadlineSeconds"] == 7200
    assert body["backoffLimit"] == 4
    pod = body["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["terminationGracePeriodSeconds"] == 46
    trainer = pod["containers"][0]
    assert trainer["image"] == "registry.example/resnet:1.2"
    assert trainer["args"] == ["train"]
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert {"name": "WANDB_MODE", "value": "offline"} in trainer["env"]
    mounts = {m["mountPath"]: m for m in trainer["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    train = mounts["/opt/ml/input/data/train"]
    assert train["readOnly"]
    assert volumes[train["name"]]["persistentVolumeClaim"] == {
        "claimName": "imagenet-train",
        "readOnly": True,
    }
    val = mounts["/opt/ml/input/data/val"]
    assert volumes[val["name"]]["hostPath"] == {"path": "/mnt/datasets/val", "type": "Directory"}
    checkpoints = mounts["/opt/ml/checkpoints"]
    assert not checkpoints.get("readOnly")
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "resnet-checkpoints"}
    assert volumes["ml"] == {"name": "ml", "emptyDir": {}}


def test_the_failure_policy_retries_exactly_the_transient_exits() -> None:
    _, job = parts(full_manifest())
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {
            "action": "Count",
            "onExitCodes": {
                "containerName": "trainer",
                "operator": "In",
                "values": [6, 11, 134, 139],
            },
        },
        {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "trainer",
                "operator": "NotIn",
                "values": [0, 6, 11, 134, 139],
            },
        },
    ]


def test_no_transient_codes_fail_every_crash() -> None:
    manifest = kubernetes.manifest(spec(retry_exit_codes=[]), volumes={})
    rules = parts(manifest)[1]["spec"]["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "FailJob"]
    assert rules[1]["onExitCodes"]["values"] == [0]


def test_the_config_map_holds_trainqs_own_config_files() -> None:
    job_spec = spec(**FULL)
    config_map, job = parts(full_manifest())
    files = contract.config_files(job_spec)
    assert config_map["data"] == {path.rsplit("/", 1)[1]: text for path, text in files.items()}
    assert json.loads(config_map["data"]["hyperparameters.json"]) == {"lr": "0.1", "epochs": "3"}
    pod = job["spec"]["template"]["spec"]
    assert {"name": "ml-config", "configMap": {"name": "resnet-a-v2-ml-config"}} in pod["volumes"]
    layout = pod["initContainers"][0]["command"][-1]
    for rel in ML_DIRS:  # the same layout the monitor makes
        assert f"/opt/ml/{rel}" in layout
    assert kubernetes.ML_DIRS == ML_DIRS


@pytest.mark.parametrize(
    ("fields", "volumes", "field"),
    [
        ({"image": None, "command": ["python3", "train.py"]}, {}, "command"),
        ({"network": "none"}, {}, "network"),
        (
            {"channels": {"train": {"source": "/data", "mode": "Pipe"}}},
            {"train": "c"},
            "channels.train",
        ),
        ({"channels": {"train": {"source": "/data"}}}, {}, "channels.train"),
        ({}, {"nope": "claim"}, "--volume nope"),
    ],
)
def test_what_kubernetes_cannot_express_is_refused(
    fields: dict[str, object], volumes: dict[str, str], field: str
) -> None:
    with pytest.raises(Unsupported) as refused:
        kubernetes.manifest(spec(**fields), volumes=volumes)
    assert refused.value.field == field
    assert refused.value.message.startswith(f"cannot export to kubernetes: {field}: ")
    assert "\n" not in refused.value.message
