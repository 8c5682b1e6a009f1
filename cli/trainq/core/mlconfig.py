"""The three files of a trainer's input/config/, as the SageMaker contract writes them.

trainqd's monitor writes them into each attempt's ml root (trainqd.attempts.contract); the exports
to other engines carry the same text (trainq.core.export.kubernetes puts it in a
ConfigMap). One home for them, so every engine's trainer reads the same files.
"""

from __future__ import annotations

import json
from typing import Any

from trainq.core.spec import JobSpec

CURRENT_HOST = "algo-1"
INSTANCE_GROUP = "homogeneousCluster"


def resource_config(
    current_host: str = CURRENT_HOST,
    groups: dict[str, list[str]] | None = None,
    current_group: str = INSTANCE_GROUP,
    interface: str = "lo",
) -> dict[str, Any]:
    """resourceconfig.json of `current_host`; `groups`: each instance group's hosts, in order
    (a job of one node: one group of one host); `interface`: the one its peers are on."""
    groups = groups or {INSTANCE_GROUP: [CURRENT_HOST]}
    return {
        "current_host": current_host,
        "hosts": [host for hosts in groups.values() for host in hosts],
        "network_interface_name": interface,
        "current_instance_type": "local",
        "current_group_name": current_group,
        "instance_groups": [
            {"instance_group_name": name, "instance_type": "local", "hosts": list(hosts)}
            for name, hosts in groups.items()
        ],
    }


def input_data_config(spec: JobSpec) -> dict[str, dict[str, str]]:
    config: dict[str, dict[str, str]] = {}
    for name, channel in spec.channels.items():
        entry = {}
        if channel.content_type is not None:
            entry["ContentType"] = channel.content_type
        entry["TrainingInputMode"] = channel.mode
        entry["S3DistributionType"] = "FullyReplicated"
        entry["RecordWrapperType"] = channel.record_wrapper
        config[name] = entry
    return config


def config_files(spec: JobSpec, resources: dict[str, Any] | None = None) -> dict[str, str]:
    """input/config/*.json, relative to the ml root. Hyperparameters are strings, always.
    `resources`: a node's resourceconfig.json (a job of one node: `resource_config()`)."""
    return {
        "input/config/hyperparameters.json": json.dumps(spec.hyperparameters, indent=1),
        "input/config/inputdataconfig.json": json.dumps(input_data_config(spec), indent=1),
        "input/config/resourceconfig.json": json.dumps(
            resources if resources is not None else resource_config(), indent=1
        ),
    }
