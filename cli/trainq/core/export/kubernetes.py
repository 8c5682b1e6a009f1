"""A container job as a Kubernetes `batch/v1` Job, with its ml root from a ConfigMap.

    List
    ├── ConfigMap <name>-ml-config   input/config/*.json (trainq.core.mlconfig's text)
    └── Job <name>
        ├── activeDeadlineSeconds    max_runtime_seconds: the Job's whole life, every retry
        │                            included, as trainq counts it; then SIGTERM, the grace,
        │                            SIGKILL
        ├── backoffLimit             max_retries
        ├── podFailurePolicy         Ignore: the pod was disrupted (eviction, preemption,
        │                            a drained node), which spends no retry, as trainq's
        │                            "lost"; Count: the trainer exited with a transient
        │                            status; FailJob: any other status
        └── pod (restartPolicy Never, as a podFailurePolicy requires)
            ├── terminationGracePeriodSeconds   the stop grace
            ├── init container ml-root          lays out /opt/ml (an emptyDir) as trainq does
            └── container trainer               IMAGE train; nvidia.com/gpu limits; each
                                                channel's volume read-only at
                                                /opt/ml/input/data/<channel>; the
                                                checkpoints volume, when given, at
                                                /opt/ml/checkpoints (a retry's new pod
                                                resumes from it; without one the
                                                checkpoints live and die with each pod)

A job of several nodes (`instance_count`) is an Indexed Job (completions = parallelism = N,
one pod per node, `JOB_COMPLETION_INDEX` its rank) beside a headless Service of the job's
name, whose DNS names the pods `<name>-<i>.<name>`: those are the hosts of each pod's
resourceconfig.json (one per index in the ConfigMap; the init container copies its own),
and the rank variables name them as trainqd does (RANK, WORLD_SIZE, MASTER_ADDR, ...).
A job with instance groups is one Indexed Job per group behind that Service, each pod's
variables from a file per node (kubernetes_groups.py, which also says what `primary` is
here).

The trainer finds the config files and the layout; as on SageMaker itself, the SM_*
variables are the image's training toolkit's to derive from them. Where a channel's data
lives on the cluster only the user knows: a PersistentVolumeClaim's name or an absolute
host path, per channel.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from trainq.core.export import kubernetes_groups as groups
from trainq.core.export.common import Unsupported, ceil_seconds, job_name
from trainq.core.layout import ML_DIRS
from trainq.core.mlconfig import config_files, resource_config
from trainq.core.nodes import HOMOGENEOUS, is_gang
from trainq.core.spec import JobSpec

TARGET = "kubernetes"
BASE = "/opt/ml"
CONFIG_MOUNT = "/etc/trainq/ml-config"
DEFAULT_GRACE = 120.0
DEFAULT_INIT_IMAGE = "busybox:1.36"
MAX_NAME = 63
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
MASTER_PORT = 29500  # torchrun's default: each pod has its own address
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def dns_label(name: str) -> str:
    """A name Kubernetes accepts (RFC 1123 label): lower case, '-' for anything else."""
    label = _NOT_DNS.sub("-", name.lower()).strip("-")[:MAX_NAME].rstrip("-")
    return label or "trainq-job"


def _check(spec: JobSpec, volumes: dict[str, str]) -> None:
    if spec.image is None and not spec.instance_groups:
        raise Unsupported(
            TARGET, "command", "a Kubernetes Job runs images; give the job an image to export it"
        )
    if spec.restart != "job":
        raise Unsupported(
            TARGET, "restart", "an Indexed Job's failing pod ends the job here (restart = job)"
        )
    if spec.network == "none":
        raise Unsupported(
            TARGET, "network", "a pod always has a network; 'none' needs a NetworkPolicy"
        )
    for name, channel in spec.channels.items():
        if channel.mode == "Pipe":
            raise Unsupported(
                TARGET,
                f"channels.{name}",
                "Pipe mode needs trainq's feeder beside the trainer; use File mode",
            )
        if name not in volumes:
            raise Unsupported(
                TARGET,
                f"channels.{name}",
                f"say where its data is on the cluster (--volume {name}=CLAIM or "
                f"{name}=/host/path)",
            )
    for name, source in volumes.items():
        if name not in spec.channels:
            raise Unsupported(TARGET, f"--volume {name}", "the job has no channel of that name")
        if not source or "\0" in source:
            raise Unsupported(TARGET, f"--volume {name}", "give a claim name or a host path")


def _volume(name: str, source: str, read_only: bool) -> dict[str, Any]:
    """A claim's name, or an absolute host path (a directory)."""
    if source.startswith("/"):
        kind = "Directory" if read_only else "DirectoryOrCreate"
        return {"name": name, "hostPath": {"path": source, "type": kind}}
    claim: dict[str, Any] = {"claimName": dns_label(source)}
    if read_only:
        claim["readOnly"] = True
    return {"name": name, "persistentVolumeClaim": claim}


def pod_hosts(spec: JobSpec, name: str) -> list[str]:
    """The pods' names in the headless Service's DNS: `<name>-<index>.<name>`."""
    return [f"{name}-{index}.{name}" for index in range(spec.instance_count)]


def config_map(spec: JobSpec, name: str) -> dict[str, Any]:
    files = config_files(spec)
    data = {path.rsplit("/", 1)[1]: text for path, text in files.items()}
    if spec.instance_groups:
        hosts = groups.hosts(spec, name)
        by_group = groups.offsets(spec)
        del data["resourceconfig.json"]
        members = {
            g.name: hosts[by_group[g.name] : by_group[g.name] + g.instance_count]
            for g in spec.instance_groups
        }
        for group, own in members.items():
            for host in own:
                resources = resource_config(host, members, group, "eth0")
                data[f"resourceconfig-{hosts.index(host)}.json"] = json.dumps(resources, indent=1)
        data.update(groups.env_files(spec, name))
    elif is_gang(spec):
        hosts = pod_hosts(spec, name)
        del data["resourceconfig.json"]
        for index, host in enumerate(hosts):
            resources = resource_config(host, {HOMOGENEOUS: hosts}, HOMOGENEOUS, "eth0")
            data[f"resourceconfig-{index}.json"] = json.dumps(resources, indent=1)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-ml-config", "labels": {"trainq/job": name}},
        "data": data,
    }


def _layout_command(gang: bool = False, rank: str = "$JOB_COMPLETION_INDEX") -> list[str]:
    """`rank`: the shell's expression of the pod's node, whose resourceconfig.json it keeps."""
    dirs = " ".join(shlex.quote(f"{BASE}/{rel}") for rel in ML_DIRS)
    config = f"{BASE}/input/config"
    own = (
        f"mv {config}/resourceconfig-{rank}.json {config}/resourceconfig.json; "
        f"rm -f {config}/resourceconfig-*.json {config}/node-*.env; "
        if gang
        else ""
    )
    return [
        "/bin/sh",
        "-ec",
        f"mkdir -p {dirs}; cp {CONFIG_MOUNT}/*.json {config}/; {own}rm -f {BASE}/output/failure",
    ]


def _rank_environment(spec: JobSpec, name: str) -> list[dict[str, Any]]:
    """What trainqd gives each node of a job of several nodes, from the pod's index."""
    index = {"valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}}
    size = str(spec.instance_count)
    return [
        *({"name": key, **index} for key in ("TRAINQ_NODE_RANK", "RANK", "NODE_RANK")),
        {"name": "PADDLE_TRAINER_ID", **index},
        *({"name": key, "value": size} for key in ("TRAINQ_NUM_NODES", "WORLD_SIZE")),
        {"name": "PADDLE_TRAINERS_NUM", "value": size},
        {"name": "LOCAL_RANK", "value": "0"},
        {"name": "MASTER_ADDR", "value": pod_hosts(spec, name)[0]},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def headless_service(name: str) -> dict[str, Any]:
    """DNS for the pods of an Indexed Job: each `<name>-<index>.<name>`, no load balancing."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"trainq/job": name}},
        "spec": {
            "clusterIP": "None",
            "selector": {"trainq/job": name},
            # The nodes find each other while starting, before any is "ready".
            "publishNotReadyAddresses": True,
        },
    }


def _failure_policy(spec: JobSpec) -> dict[str, Any]:
    transient = sorted(set(spec.retry_exit_codes))
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
    ]
    if transient:
        rules.append(
            {
                "action": "Count",
                "onExitCodes": {
                    "containerName": "trainer",
                    "operator": "In",
                    "values": transient,
                },
            }
        )
    rules.append(
        {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "trainer",
                "operator": "NotIn",
                "values": sorted({0, *transient}),
            },
        }
    )
    return {"rules": rules}


def job(
    spec: JobSpec,
    name: str,
    volumes: dict[str, str],
    init_image: str,
    checkpoints: str | None = None,
) -> dict[str, Any]:
    assert spec.image is not None
    grace = DEFAULT_GRACE if spec.stop_grace_seconds is None else spec.stop_grace_seconds
    ml_mount = {"name": "ml", "mountPath": BASE}
    channel_volumes = []
    trainer_mounts: list[dict[str, Any]] = [ml_mount]
    for index, channel in enumerate(spec.channels, start=1):
        volume = _volume(f"channel-{index}", volumes[channel], read_only=True)
        channel_volumes.append(volume)
        trainer_mounts.append(
            {
                "name": volume["name"],
                "mountPath": f"{BASE}/input/data/{channel}",
                "readOnly": True,
            }
        )
    if checkpoints is not None:
        channel_volumes.append(_volume("checkpoints", checkpoints, read_only=False))
        trainer_mounts.append({"name": "checkpoints", "mountPath": f"{BASE}/checkpoints"})
    env = [
        {"name": "TRAINING_JOB_NAME", "value": job_name(spec)},
        {"name": "SAGEMAKER_BASE_DIR", "value": BASE},
        *({"name": key, "value": value} for key, value in spec.environment.items()),
        *(_rank_environment(spec, name) if is_gang(spec) else []),
    ]
    trainer: dict[str, Any] = {
        "name": "trainer",
        "image": spec.image,
        "args": ["train"],
        "env": env,
        "volumeMounts": trainer_mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            **({"runAsUser": 0} if spec.run_as_root else {}),
        },
    }
    if spec.working_dir is not None:
        trainer["workingDir"] = spec.working_dir
    if spec.gpus:
        trainer["resources"] = {"limits": {"nvidia.com/gpu": spec.gpus}}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": ceil_seconds(grace),
        "initContainers": [
            {
                "name": "ml-root",
                "image": init_image,
                "command": _layout_command(is_gang(spec)),
                "volumeMounts": [
                    ml_mount,
                    {"name": "ml-config", "mountPath": CONFIG_MOUNT, "readOnly": True},
                ],
            }
        ],
        "containers": [trainer],
        "volumes": [
            {"name": "ml", "emptyDir": {}},
            {"name": "ml-config", "configMap": {"name": f"{name}-ml-config"}},
            *channel_volumes,
        ],
    }
    if spec.network == "host":
        pod["hostNetwork"] = True
    body: dict[str, Any] = {
        "backoffLimit": spec.max_retries,
        "podFailurePolicy": _failure_policy(spec),
        "template": {"metadata": {"labels": {"trainq/job": name}}, "spec": pod},
    }
    if is_gang(spec):
        pod["subdomain"] = name  # the headless Service: <name>-<index>.<name>
        body.update(
            completionMode="Indexed",
            completions=spec.instance_count,
            parallelism=spec.instance_count,
        )
    if spec.max_runtime_seconds is not None:
        body["activeDeadlineSeconds"] = spec.max_runtime_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"trainq/job": name}},
        "spec": body,
    }


def group_jobs(
    spec: JobSpec, name: str, volumes: dict[str, str], init_image: str, checkpoints: str | None
) -> list[dict[str, Any]]:
    """One Indexed Job per instance group (kubernetes_groups.py), each the Job of a job of
    one node with the group's image, GPUs and environment, its pods named for the Service."""
    offsets = groups.offsets(spec)
    jobs = []
    for group in spec.instance_groups:
        alone = spec.model_copy(
            update={
                "instance_groups": [],
                "image": group.image or spec.image,
                "gpus": group.gpus,
                "environment": {**spec.environment, **group.environment},
            }
        )
        item = job(alone, name, volumes, init_image, checkpoints)
        item["metadata"]["name"] = groups.group_job_name(name, group.name)
        item["metadata"]["labels"]["trainq/group"] = group.name
        body = item["spec"]
        body.update(
            completionMode="Indexed",
            completions=group.instance_count,
            parallelism=group.instance_count,
        )
        body["template"]["metadata"]["labels"]["trainq/group"] = group.name
        pod = body["template"]["spec"]
        pod["subdomain"] = name
        rank = groups.own_file(offsets[group.name])
        pod["initContainers"][0]["command"] = _layout_command(True, rank)
        [trainer] = pod["containers"]
        trainer["command"] = groups.trainer_command(CONFIG_MOUNT, offsets[group.name])
        trainer["volumeMounts"].append(
            {"name": "ml-config", "mountPath": CONFIG_MOUNT, "readOnly": True}
        )
        jobs.append(item)
    return jobs


def manifest(
    spec: JobSpec,
    *,
    volumes: dict[str, str],
    namespace: str | None = None,
    checkpoints: str | None = None,
    init_image: str = DEFAULT_INIT_IMAGE,
) -> dict[str, Any]:
    """The List to `kubectl apply -f`: the ConfigMap, then the Job."""
    _check(spec, volumes)
    if checkpoints is not None and not checkpoints:
        raise Unsupported(TARGET, "--checkpoints", "give a claim name or a host path")
    name = dns_label(job_name(spec))
    if spec.instance_groups:
        groups.check_groups(spec, name)
        jobs = group_jobs(spec, name, volumes, init_image, checkpoints)
    else:
        jobs = [job(spec, name, volumes, init_image, checkpoints)]
    items = [config_map(spec, name), *jobs]
    if is_gang(spec):
        items.insert(1, headless_service(name))
    if namespace is not None:
        for item in items:
            item["metadata"]["namespace"] = dns_label(namespace)
    return {"apiVersion": "v1", "kind": "List", "items": items}
