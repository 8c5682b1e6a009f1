"""What a trainer finds under the SageMaker training-container contract.

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

from trainq.core import mlconfig
from trainq.core.mlconfig import input_data_config, resource_config
from trainq.core.spec import JobSpec

# The config files' one home is trainq.core.mlconfig (other engines' exports carry them too).
CURRENT_HOST = mlconfig.CURRENT_HOST
INSTANCE_GROUP = mlconfig.INSTANCE_GROUP
config_files = mlconfig.config_files
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


# Hyperparameter names the toolkit keeps for itself although they lack the "sagemaker_" prefix.
TOOLKIT_RESERVED_HPS = frozenset({"default_user_module_name", "_tuning_objective_metric"})
# The toolkit's own hyperparameters that are settings of the toolkit, not of the framework:
# they go neither to the script (SM_HPS, SM_USER_ARGS) nor to SM_FRAMEWORK_PARAMS.
TOOLKIT_SETTINGS = frozenset(
    {
        "sagemaker_program",
        "sagemaker_submit_directory",
        "sagemaker_enable_cloudwatch_metrics",
        "sagemaker_region",
        "sagemaker_container_log_level",
        "sagemaker_job_name",
        "sagemaker_s3_output",
        *TOOLKIT_RESERVED_HPS,
    }
)
# Framework parameters that turn on distributed training, and with it the distribution
# instance group.
DISTRIBUTION_SWITCHES = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)
LOG_LEVEL_INFO = 20


def _decoded(value: str) -> Any:
    # The toolkit hands script-mode code hyperparameters decoded from JSON where they parse.
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # nested deeper than Python recurses: text
        return value


def _sm_value(value: Any) -> str:
    """An SM_* variable's text, as the toolkit writes it: strings as they are, None empty,
    anything else compact JSON with sorted keys (so booleans are `true`/`false`)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else _json(value)


def _arg_value(value: Any) -> str:
    # Command-line arguments are Python's str() of the decoded value (True, 1000.0), with a
    # mapping written as k=v pairs: that is what the toolkit passes to a user script.
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return "" if value is None else str(value)


def user_args(hps: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key in sorted(hps):
        args += [f"--{key}" if len(key) > 1 else f"-{key}", _arg_value(hps[key])]
    return args


def _module_name(program: str) -> str:
    return program[:-3] if program.endswith(".py") else program


def _model_parallel(hps: dict[str, Any]) -> Any:
    # The toolkit reads SM_HP_MP_PARAMETERS back from its own environment: None when unset,
    # else whether it holds something other than an empty mapping.
    if "mp_parameters" not in hps:
        return None
    text = _sm_value(hps["mp_parameters"])
    return text and text != "{}"


def _distribution_groups(framework: dict[str, Any], group: str) -> Any:
    if "sagemaker_distribution_instance_groups" in framework:
        return framework["sagemaker_distribution_instance_groups"]
    switched_on = any(framework.get(k, False) for k in DISTRIBUTION_SWITCHES)
    return [group] if switched_on else []


def training_env(
    spec: JobSpec,
    base: str,
    num_gpus: int,
    job_name: str,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The toolkit's `Environment` for this job, property by property (SM_TRAINING_ENV).

    `num_gpus` is the job's own count where the toolkit would count what nvidia-smi lists;
    what the toolkit reads from the trainer's image or PATH (SAGEMAKER_PROGRAM,
    SAGEMAKER_TRAINING_MODULE, smddprun) is taken from the job's environment, or absent."""
    decoded = {k: _decoded(v) for k, v in spec.hyperparameters.items()}
    toolkit = {
        k: v for k, v in decoded.items() if k.startswith("sagemaker_") or k in TOOLKIT_RESERVED_HPS
    }
    hps = {k: v for k, v in decoded.items() if k not in toolkit}
    framework = {k: v for k, v in toolkit.items() if k not in TOOLKIT_SETTINGS}
    resources = resources if resources is not None else resource_config()
    group = resources["current_group_name"]
    groups = {g["instance_group_name"]: g for g in resources["instance_groups"]}
    distribution_groups = _distribution_groups(framework, group)
    distribution_hosts = [
        host for name, g in groups.items() if name in distribution_groups for host in g["hosts"]
    ]
    master = distribution_hosts[0] if distribution_hosts else resources["hosts"][0]
    program = spec.environment.get("SAGEMAKER_PROGRAM")
    module = program if program is not None else str(toolkit.get("sagemaker_program"))
    return {
        "additional_framework_parameters": framework,
        "channel_input_dirs": {name: f"{base}/input/data/{name}" for name in spec.channels},
        "current_host": resources["current_host"],
        "current_instance_group": group,
        "current_instance_group_hosts": groups[group]["hosts"],
        "current_instance_type": resources["current_instance_type"],
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distribution_groups,
        "framework_module": spec.environment.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": resources["hosts"],
        "hyperparameters": hps,
        "input_config_dir": f"{base}/input/config",
        "input_data_config": input_data_config(spec),
        "input_dir": f"{base}/input",
        "instance_groups": list(groups),
        "instance_groups_dict": groups,
        "is_hetero": len(groups) > 1,
        "is_master": resources["current_host"] == master,
        "is_modelparallel_enabled": _model_parallel(hps),
        "is_smddpmprun_installed": False,
        "is_smddprun_installed": False,
        "job_name": job_name,
        "log_level": toolkit.get("sagemaker_container_log_level", LOG_LEVEL_INFO),
        "master_hostname": master,
        "model_dir": f"{base}/model",
        "module_dir": str(toolkit.get("sagemaker_submit_directory", f"{base}/code")),
        "module_name": _module_name(module),
        "network_interface_name": resources["network_interface_name"],
        "num_cpus": os.cpu_count() or 1,
        "num_gpus": num_gpus,
        "num_neurons": 0,
        "output_data_dir": f"{base}/output/data",
        "output_dir": f"{base}/output",
        "output_intermediate_dir": f"{base}/output/intermediate",
        "resource_config": resources,
        "topology": [],
        "user_entry_point": program or toolkit.get("sagemaker_program"),
    }


# SM_* variables that repeat a property of the toolkit's Environment under another name.
RENAMED = {
    "hps": "hyperparameters",
    "framework_params": "additional_framework_parameters",
}
# The properties the toolkit also exports one by one, as SM_<NAME>.
EXPORTED = (
    "hosts",
    "network_interface_name",
    "user_entry_point",
    "resource_config",
    "input_data_config",
    "output_data_dir",
    "current_host",
    "current_instance_type",
    "current_instance_group",
    "current_instance_group_hosts",
    "instance_groups",
    "instance_groups_dict",
    "distribution_instance_groups",
    "is_hetero",
    "module_name",
    "log_level",
    "framework_module",
    "input_dir",
    "input_config_dir",
    "output_dir",
    "num_cpus",
    "num_gpus",
    "num_neurons",
    "model_dir",
    "module_dir",
    "output_intermediate_dir",
)


def toolkit_environment(
    spec: JobSpec,
    base: str,
    num_gpus: int,
    job_name: str = "",
    resources: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The SM_* variables the sagemaker-training toolkit's `Environment().to_env_vars()`
    gives for this job (or this node of it: its `resources`), with its names and formats."""
    env = training_env(spec, base, num_gpus, job_name, resources)
    variables: dict[str, Any] = {name: env[name] for name in EXPORTED}
    variables.update({name: env[prop] for name, prop in RENAMED.items()})
    variables["channels"] = sorted(env["channel_input_dirs"])
    variables["training_env"] = env
    variables["user_args"] = user_args(env["hyperparameters"])
    for name, path in env["channel_input_dirs"].items():
        variables[f"channel_{name}"] = path
    for key, value in env["hyperparameters"].items():
        variables[f"hp_{key}"] = value
    return {f"SM_{key.upper()}": _sm_value(value) for key, value in variables.items()}


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
    resources: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The contract's variables, then the job's own environment (which may not override
    them: the spec refuses reserved names)."""
    env = toolkit_environment(spec, base, len(gpus.indices), name, resources)
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
