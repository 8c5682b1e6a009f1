"""`trainq export --to kubernetes` of a job with instance groups: one Indexed Job per group
behind one headless Service, each pod told what trainqd tells its node (trainq.core.nodes'
ranks across the groups, SageMaker's hosts and groups, torchrun's and Paddle's variables),
checked against the Kubernetes schemas."""

from __future__ import annotations

import json
import shlex
from typing import Any

import kubernetes_validate
import pytest

from tests.support.exports import LAST_THREE
from tests.support.k8s_groups import GROUPS, HOSTS, IMAGE, groups_manifest, items_of
from trainq.core.export import Unsupported


def node_env(config: dict[str, Any], rank: int) -> dict[str, str]:
    """A node's file as the trainer's shell reads it."""
    pairs = shlex.split(config["data"][f"node-{rank}.env"])
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize("version", LAST_THREE)
def test_every_item_passes_the_kubernetes_schema(version: str) -> None:
    for item in groups_manifest(max_runtime_seconds=3600)["items"]:
        kubernetes_validate.validate(item, version, strict=True)


def test_one_indexed_job_per_group_behind_one_service() -> None:
    items = items_of(groups_manifest())
    assert sorted(items) == [
        "ConfigMap/ps-ml-config",
        "Job/ps-pservers",
        "Job/ps-trainers",
        "Service/ps",
    ]
    service = items["Service/ps"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"trainq/job": "ps"}
    want = {
        "ps-pservers": (2, None, IMAGE, "ps"),
        "ps-trainers": (3, {"limits": {"nvidia.com/gpu": 2}}, GROUPS[1]["image"], None),
    }
    for name, (count, resources, image, role) in want.items():
        body = items[f"Job/{name}"]["spec"]
        assert (body["completionMode"], body["completions"], body["parallelism"]) == (
            "Indexed",
            count,
            count,
        )
        template = body["template"]
        # The Service selects every group's pods.
        assert template["metadata"]["labels"]["trainq/job"] == "ps"
        assert template["spec"]["subdomain"] == "ps"
        [trainer] = template["spec"]["containers"]
        assert trainer.get("resources") == resources
        assert trainer["image"] == image
        assert trainer["args"] == ["train"]
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        assert env.get("ROLE") == role


def test_each_node_gets_its_rank_across_the_groups() -> None:
    config = items_of(groups_manifest())["ConfigMap/ps-ml-config"]
    assert "resourceconfig.json" not in config["data"]
    for rank, host in enumerate(HOSTS):
        resources = json.loads(config["data"][f"resourceconfig-{rank}.json"])
        assert resources["current_host"] == host
        assert resources["hosts"] == HOSTS
        group = "pservers" if rank < 2 else "trainers"
        assert resources["current_group_name"] == group
        assert resources["instance_groups"] == [
            {"instance_group_name": "pservers", "instance_type": "local", "hosts": HOSTS[:2]},
            {"instance_group_name": "trainers", "instance_type": "local", "hosts": HOSTS[2:]},
        ]
        env = node_env(config, rank)
        assert env["SM_HOSTS"] == ",".join(HOSTS)
        assert env["SM_CURRENT_HOST"] == host
        assert (env["RANK"], env["WORLD_SIZE"], env["TRAINQ_NODE_NAME"]) == (
            str(rank),
            "5",
            f"algo-{rank + 1}",
        )
        assert env["MASTER_ADDR"] == HOSTS[0]


def test_primary_groups_are_paddles_trainers_and_the_others_its_servers() -> None:
    config = items_of(groups_manifest())["ConfigMap/ps-ml-config"]
    servers = ",".join(f"{host}:29501" for host in HOSTS[:2])
    trainers = ",".join(f"{host}:29501" for host in HOSTS[2:])
    for rank in range(5):
        env = node_env(config, rank)
        assert env["TRAINING_ROLE"] == ("PSERVER" if rank < 2 else "TRAINER")
        assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == servers
        assert env["PADDLE_TRAINER_ENDPOINTS"] == trainers
        assert env["PADDLE_TRAINERS_NUM"] == "3"
        assert env.get("PADDLE_TRAINER_ID") == (None if rank < 2 else str(rank - 2))


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"restart": "node"}, "restart"),
        ({"instance_groups": [{"name": "g" * 60, "instance_count": 1}]}, "instance_groups.g"),
        ({"instance_groups": [{"name": "a.b", "instance_count": 1}]}, "instance_groups.a.b"),
    ],
)
def test_what_is_still_not_carried_is_refused_in_one_line(
    fields: dict[str, Any], where: str
) -> None:
    groups = fields.pop("instance_groups", GROUPS)
    with pytest.raises(Unsupported) as caught:
        groups_manifest(groups, **fields)
    said = str(caught.value)
    assert said.startswith(f"cannot export to kubernetes: {where}")
    assert "\n" not in said
