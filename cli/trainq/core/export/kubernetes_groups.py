"""What each pod of a job with instance groups is told on Kubernetes: one Indexed Job per
group, all behind the job's headless Service (kubernetes.py assembles them).

Kubernetes names a pod of an Indexed Job `<Job>-<index>` (its hostname; the template cannot
set another), so the pod of group g with completion index k, the node of rank
offset(g) + k (trainq.core.nodes: SageMaker's `algo-<rank + 1>`), is
`<name>-<group>-<k>.<name>` in the Service's DNS: those names, in rank order, are the
hosts. A node's variables depend on its rank, which Kubernetes cannot compute from the
index, so the ConfigMap holds one file per node (`node-<rank>.env`) and the trainer's shell
sources its own before it runs `train`: the image needs a /bin/sh and `train` on its PATH
(the shell takes the entrypoint's place, as SageMaker's images allow).

`primary` groups: the job is done when the Job of each primary group has completed; the
other groups' Jobs (servers that never exit) are not stopped by Kubernetes itself, as no Job
field reaches another Job (a successPolicy ends only its own Job's pods): delete them
(`kubectl delete job -l trainq/job=NAME`).
"""

from __future__ import annotations

import shlex

from trainq.core.export.common import Unsupported
from trainq.core.node_env import place_environment
from trainq.core.nodes import Node, layout
from trainq.core.spec import JobSpec

TARGET = "kubernetes"
MASTER_PORT = 29500  # torchrun's default: each pod has its own address


def group_job_name(name: str, group: str) -> str:
    """The group's Job; its pods are `<this>-<index>` (at most 63 characters)."""
    return f"{name}-{group.lower().replace('_', '-')}"


def check_groups(spec: JobSpec, name: str) -> None:
    longest = max(g.instance_count for g in spec.instance_groups) - 1
    for group in spec.instance_groups:
        pod = f"{group_job_name(name, group.name)}-{longest}"
        if len(pod) > 63 or not group.name.replace("-", "").replace("_", "").isalnum():
            raise Unsupported(
                TARGET,
                f"instance_groups.{group.name}",
                f"its pods' name {pod!r} is no DNS label of 63 characters: shorten the names",
            )
        if group.image is None and spec.image is None:
            raise Unsupported(
                TARGET, f"instance_groups.{group.name}", "a Kubernetes Job runs images: give one"
            )


def hosts(spec: JobSpec, name: str) -> list[str]:
    """Each node's DNS name, in rank order."""
    return [
        f"{group_job_name(name, g.name)}-{k}.{name}"
        for g in spec.instance_groups
        for k in range(g.instance_count)
    ]


def offsets(spec: JobSpec) -> dict[str, int]:
    """The rank of each group's first node."""
    at, result = 0, {}
    for group in spec.instance_groups:
        result[group.name] = at
        at += group.instance_count
    return result


def node_environment(
    spec: JobSpec, node: Node, nodes: list[Node], names: list[str]
) -> dict[str, str]:
    """What trainqd gives the node (trainqd.attempts.nodes), on the cluster's names."""
    primary = {g.name for g in spec.instance_groups if g.primary}
    return {
        "SM_HOSTS": ",".join(names),
        "SM_CURRENT_HOST": names[node.rank],
        "SM_CURRENT_INSTANCE_GROUP": node.group,
        **place_environment(node, nodes, names, MASTER_PORT, primary_groups=primary),
    }


def env_files(spec: JobSpec, name: str) -> dict[str, str]:
    """`node-<rank>.env` for each node: shell assignments the trainer's shell sources."""
    nodes, names = layout(spec), hosts(spec, name)
    return {
        f"node-{node.rank}.env": "".join(
            f"{key}={shlex.quote(value)}\n"
            for key, value in node_environment(spec, node, nodes, names).items()
        )
        for node in nodes
    }


def own_file(offset: int) -> str:
    """The shell's rank of this pod: its group's offset plus its completion index."""
    return f"$(({offset} + JOB_COMPLETION_INDEX))"


def trainer_command(config_mount: str, offset: int) -> list[str]:
    """The trainer's shell: its node's variables, then `train` (the container's args)."""
    script = f'set -a; . {config_mount}/node-{own_file(offset)}.env; set +a; exec "$@"'
    return ["/bin/sh", "-c", script, "sh"]
