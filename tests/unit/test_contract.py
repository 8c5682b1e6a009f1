from __future__ import annotations

import json

from trainq.core.spec import parse_spec
from trainqd.attempts.contract import (
    Assignment,
    config_files,
    gpu_environment,
    toolkit_environment,
    trainer_environment,
)

SPEC = parse_spec(
    {
        "command": ["python3", "train.py"],
        "gpus": 2,
        "hyperparameters": {"lr": 0.1, "batch-size": 64, "opt": "sgd", "amp": True},
        "environment": {"WANDB_MODE": "offline"},
        "channels": {
            "train": {
                "source": "/data/train",
                "mode": "Pipe",
                "content_type": "text/csv",
                "record_wrapper": "RecordIO",
            },
            "val": {"source": "/data/val"},
        },
    }
)


def test_config_files_follow_sagemaker() -> None:
    files = {k: json.loads(v) for k, v in config_files(SPEC).items()}
    hps = files["input/config/hyperparameters.json"]
    assert hps == {"lr": "0.1", "batch-size": "64", "opt": "sgd", "amp": "true"}
    assert all(isinstance(v, str) for v in hps.values())
    idc = files["input/config/inputdataconfig.json"]
    assert idc["train"] == {
        "ContentType": "text/csv",
        "TrainingInputMode": "Pipe",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": "RecordIO",
    }
    assert idc["val"] == {
        "TrainingInputMode": "File",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": "None",
    }
    rc = files["input/config/resourceconfig.json"]
    assert rc["current_host"] == "algo-1"
    assert rc["hosts"] == ["algo-1"]
    assert rc["network_interface_name"] == "lo"


def test_environment_for_script_mode() -> None:
    env = trainer_environment(
        spec=SPEC,
        job_id=7,
        name="resnet",
        owner_uid=1000,
        attempt=2,
        base="/ml",
        gpus=Assignment((2, 3), ("GPU-a", "GPU-b")),
        host_ml_root="/state/jobs/7/ml",
    )
    assert env["SM_MODEL_DIR"] == "/ml/model"
    assert env["SM_INPUT_CONFIG_DIR"] == "/ml/input/config"
    assert env["SM_OUTPUT_DATA_DIR"] == "/ml/output/data"
    assert env["SM_CHANNELS"] == '["train","val"]'
    assert env["SM_CHANNEL_TRAIN"] == "/ml/input/data/train"
    assert env["SM_CHANNEL_VAL"] == "/ml/input/data/val"
    assert json.loads(env["SM_HPS"]) == {"lr": 0.1, "batch-size": 64, "opt": "sgd", "amp": True}
    assert env["SM_HP_LR"] == "0.1"
    assert env["SM_HP_OPT"] == "sgd"
    assert env["SM_HP_AMP"] == "true"
    assert env["SM_NUM_GPUS"] == "2"
    assert env["SM_HOSTS"] == '["algo-1"]'
    assert env["SM_CURRENT_HOST"] == "algo-1"
    # The toolkit passes a script str() of each decoded value: a JSON `true` is `True`.
    assert json.loads(env["SM_USER_ARGS"]) == [
        "--amp",
        "True",
        "--batch-size",
        "64",
        "--lr",
        "0.1",
        "--opt",
        "sgd",
    ]
    assert json.loads(env["SM_TRAINING_ENV"])["hyperparameters"]["lr"] == 0.1
    assert json.loads(env["SM_TRAINING_ENV"])["job_name"] == "resnet"
    assert env["SAGEMAKER_BASE_DIR"] == "/ml"
    assert env["TRAINING_JOB_NAME"] == "resnet"
    assert env["TRAINING_JOB_ARN"].endswith(":1000:training-job/resnet-7")
    assert env["TRAINQ_ATTEMPT"] == "2"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"
    assert env["WANDB_MODE"] == "offline"


def test_gpu_environment() -> None:
    none = gpu_environment(Assignment((), ()))
    assert none["CUDA_VISIBLE_DEVICES"] == ""
    assert none["NVIDIA_VISIBLE_DEVICES"] == "void"
    passed = gpu_environment(Assignment((5, 7), ("GPU-x", "GPU-y"), renumbered=True))
    assert passed["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert passed["TRAINQ_GPUS"] == "5,7"


def _toolkit_env(hyperparameters: dict[str, str], **environment: str) -> dict[str, str]:
    spec = parse_spec(
        {
            "command": ["true"],
            "hyperparameters": hyperparameters,
            "environment": environment,
        }
    )
    return toolkit_environment(spec, "/ml", 0, "job")


def test_toolkit_hyperparameters_are_kept_from_the_script() -> None:
    env = _toolkit_env(
        {
            "lr": "0.1",
            "sagemaker_program": "train.py",
            "sagemaker_region": "us-east-1",
            "_tuning_objective_metric": "loss",
            "sagemaker_pytorch_ddp_enabled": "true",
        }
    )
    assert json.loads(env["SM_HPS"]) == {"lr": 0.1}
    assert json.loads(env["SM_USER_ARGS"]) == ["--lr", "0.1"]
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {"sagemaker_pytorch_ddp_enabled": True}
    assert "SM_HP_SAGEMAKER_PROGRAM" not in env
    assert env["SM_MODULE_NAME"] == "train"
    assert env["SM_USER_ENTRY_POINT"] == "train.py"
    assert env["SM_DISTRIBUTION_INSTANCE_GROUPS"] == '["homogeneousCluster"]'
    assert json.loads(env["SM_TRAINING_ENV"])["distribution_hosts"] == ["algo-1"]


def test_toolkit_defaults_without_a_program() -> None:
    env = _toolkit_env({})
    # The toolkit's own text for "no program": str(None), and an empty entry point.
    assert env["SM_MODULE_NAME"] == "None"
    assert env["SM_USER_ENTRY_POINT"] == ""
    assert env["SM_FRAMEWORK_MODULE"] == ""
    assert env["SM_MODULE_DIR"] == "/ml/code"
    assert env["SM_LOG_LEVEL"] == "20"
    assert env["SM_DISTRIBUTION_INSTANCE_GROUPS"] == "[]"
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert training_env["user_entry_point"] is None
    assert training_env["is_modelparallel_enabled"] is None
    assert training_env["master_hostname"] == "algo-1"


def test_program_from_the_jobs_environment_wins() -> None:
    env = _toolkit_env(
        {"sagemaker_program": "other.py"},
        SAGEMAKER_PROGRAM="main.py",
        SAGEMAKER_TRAINING_MODULE="fw.training:main",
    )
    assert env["SM_MODULE_NAME"] == "main"
    assert env["SM_USER_ENTRY_POINT"] == "main.py"
    assert env["SM_FRAMEWORK_MODULE"] == "fw.training:main"


def test_nested_and_boolean_values_keep_the_toolkits_formats() -> None:
    env = _toolkit_env({"opt": '{"name": "sgd", "nesterov": false}', "flag": "True", "n": "null"})
    assert env["SM_HP_OPT"] == '{"name":"sgd","nesterov":false}'
    assert env["SM_HP_FLAG"] == "True"
    assert env["SM_HP_N"] == ""
    assert json.loads(env["SM_USER_ARGS"]) == [
        "--flag",
        "True",
        "-n",
        "",
        "--opt",
        "name=sgd,nesterov=False",
    ]
