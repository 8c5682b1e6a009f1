"""A job with instance groups exported to Kubernetes, for the unit and integration tests
of that export."""

from __future__ import annotations

from typing import Any

from trainq.core.export import kubernetes
from trainq.core.spec import parse_spec

IMAGE = "registry.example/paddle:1"
GROUPS = [
    {"name": "pservers", "instance_count": 2, "environment": {"ROLE": "ps"}},
    {
        "name": "trainers",
        "instance_count": 3,
        "gpus": 2,
        "primary": True,
        "image": "registry.example/paddle-gpu:1",
    },
]
HOSTS = [
    "ps-pservers-0.ps",
    "ps-pservers-1.ps",
    "ps-trainers-0.ps",
    "ps-trainers-1.ps",
    "ps-trainers-2.ps",
]


def groups_manifest(groups: list[dict[str, Any]] = GROUPS, **fields: object) -> dict[str, Any]:
    spec = parse_spec({"image": IMAGE, "name": "ps", "instance_groups": groups, **fields})
    return kubernetes.manifest(spec, volumes={})


def items_of(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{item['kind']}/{item['metadata']['name']}": item for item in manifest["items"]}
