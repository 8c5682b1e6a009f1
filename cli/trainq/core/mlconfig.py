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


def resource_config() -> dict[str, Any]:
    return {
        "current_host": CURRENT_HOST,
        "hosts": [CURRENT_HOST],
        "network_interface_name": "lo",
        "current_instance_type": "local",
        "current_group_name": INSTANCE_GROUP,
        "instance_groups": [
            {
                "instance_group_name": INSTANCE_GROUP,
                "instance_type": "local",
                "hosts": [CURRENT_HOST],
            }
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


def config_files(spec: JobSpec) -> dict[str, str]:
    """input/config/*.json, relative to the ml root. Hyperparameters are strings, always."""
    return {
        "input/config/hyperparameters.json": json.dumps(spec.hyperparameters, indent=1),
        "input/config/inputdataconfig.json": json.dumps(input_data_config(spec), indent=1),
        "input/config/resourceconfig.json": json.dumps(resource_config(), indent=1),
    }
