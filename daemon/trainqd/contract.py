"""What a trainer finds under the SageMaker training-container contract (DESIGN §2).

The three config files of input/config/ and the environment: SageMaker's own variables
(TRAINING_JOB_NAME, TRAINING_JOB_ARN), the sagemaker-training toolkit's SM_* variables that
script-mode code reads (SM_MODEL_DIR, SM_CHANNEL_<NAME>, SM_HPS, SM_NUM_GPUS, ...), the GPU
assignment, and trainq's own (TRAINQ_JOB_ID, TRAINQ_ATTEMPT, ...). `base` is the ml root as
the trainer sees it: the host path for a subprocess, /opt/ml inside a container.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from trainq.spec import JobSpec

CURRENT_HOST = "algo-1"
INSTANCE_GROUP = "homogeneousCluster"
CONTAINER_BASE = "/opt/ml"


@dataclass(frozen=True)
class Assignment:
    """The GPUs one attempt runs on."""

    indices: tuple[int, ...]  # NVML indices on the host
    uuids: tuple[str, ...]
    # True when a container engine passes the devices through: inside, CUDA numbers the GPUs
    # it can see from 0, so the host's NVML indices would name devices that do not exist.
    renumbered: bool = False


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


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


def _decoded(value: str) -> Any:
    # The toolkit hands script-mode code hyperparameters decoded from JSON where they parse.
    try:
        return json.loads(value)
    except ValueError:
        return value


def _sm_value(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def toolkit_environment(spec: JobSpec, base: str, num_gpus: int) -> dict[str, str]:
    """The SM_* variables the sagemaker-training toolkit would set for this job."""
    hps = {k: _decoded(v) for k, v in spec.hyperparameters.items()}
    channels = {name: f"{base}/input/data/{name}" for name in spec.channels}
    user_args: list[str] = []
    for key in sorted(hps):
        user_args += [f"--{key}" if len(key) > 1 else f"-{key}", spec.hyperparameters[key]]
    env: dict[str, Any] = {
        "hosts": [CURRENT_HOST],
        "current_host": CURRENT_HOST,
        "current_instance_type": "local",
        "current_instance_group": INSTANCE_GROUP,
        "current_instance_group_hosts": [CURRENT_HOST],
        "instance_groups": [INSTANCE_GROUP],
        "distribution_instance_groups": [],
        "is_hetero": False,
        "network_interface_name": "lo",
        "hps": hps,
        "framework_params": {},
        "resource_config": resource_config(),
        "input_data_config": input_data_config(spec),
        "channels": sorted(channels),
        "log_level": 20,
        "input_dir": f"{base}/input",
        "input_config_dir": f"{base}/input/config",
        "output_dir": f"{base}/output",
        "output_data_dir": f"{base}/output/data",
        "output_intermediate_dir": f"{base}/output/intermediate",
        "model_dir": f"{base}/model",
        "module_dir": f"{base}/code",
        "num_gpus": num_gpus,
        "num_cpus": len(os.sched_getaffinity(0)),
        "user_args": user_args,
    }
    env["training_env"] = dict(env)
    for name, path in channels.items():
        env[f"channel_{name}"] = path
    for key, value in hps.items():
        env[f"hp_{key}"] = value
    return {f"SM_{key.upper()}": _sm_value(value) for key, value in env.items()}


def job_arn(job_id: int, owner_uid: int, name: str) -> str:
    # SageMaker's shape (arn:partition:service:region:account:training-job/name) with the
    # host for the region and the owner for the account: stable for the job's whole life.
    return f"arn:trainq:training:{socket.gethostname()}:{owner_uid}:training-job/{name}-{job_id}"


def gpu_environment(gpus: Assignment) -> dict[str, str]:
    if not gpus.indices:
        # "void" overrides the NVIDIA_VISIBLE_DEVICES=all that CUDA base images carry, and an
        # empty CUDA_VISIBLE_DEVICES hides every GPU from a job that was given none.
        return {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": "",
            "NVIDIA_VISIBLE_DEVICES": "void",
            "TRAINQ_GPUS": "",
            "TRAINQ_GPU_UUIDS": "",
        }
    visible = range(len(gpus.indices)) if gpus.renumbered else gpus.indices
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in visible),
        "NVIDIA_VISIBLE_DEVICES": ",".join(gpus.uuids),
        "TRAINQ_GPUS": ",".join(str(i) for i in gpus.indices),
        "TRAINQ_GPU_UUIDS": ",".join(gpus.uuids),
    }


def trainer_environment(
    *,
    spec: JobSpec,
    job_id: int,
    name: str,
    owner_uid: int,
    attempt: int,
    base: str,
    gpus: Assignment,
    host_ml_root: str,
) -> dict[str, str]:
    """The contract's variables, then the job's own environment (which may not override
    them: the spec refuses reserved names)."""
    env = toolkit_environment(spec, base, len(gpus.indices))
    env.update(gpu_environment(gpus))
    env.update(
        {
            "TRAINING_JOB_NAME": name,
            "TRAINING_JOB_ARN": job_arn(job_id, owner_uid, name),
            "SAGEMAKER_BASE_DIR": base,
            "TRAINQ_JOB_ID": str(job_id),
            "TRAINQ_ATTEMPT": str(attempt),
            "TRAINQ_JOB_DIR": host_ml_root,
        }
    )
    env.update(spec.environment)
    return env


def login_environment(user: str, home: str, shell: str, path: str | None) -> dict[str, str]:
    """What a subprocess trainer starts from, as a login would give it (not trainqd's own)."""
    return {
        "HOME": home,
        "USER": user,
        "LOGNAME": user,
        "SHELL": shell or "/bin/sh",
        "PATH": path or "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
