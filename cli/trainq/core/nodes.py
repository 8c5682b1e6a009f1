"""A job of several nodes: its nodes' names, ranks, groups and GPUs (README.md, "Several
nodes").

SageMaker names the hosts of a training job `algo-1`..`algo-N`, across its instance groups
in their order; a job without groups is one group, `homogeneousCluster`. Node i (rank i-1)
gets the i-th slice of the job's GPUs, so one planner decision places the whole gang. The
daemon lays each node out from this (trainqd.attempts.nodes), and so do the exports.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainq.core.spec import JobSpec

HOST_PREFIX = "algo-"
HOMOGENEOUS = "homogeneousCluster"


@dataclass(frozen=True)
class Node:
    name: str  # algo-<rank + 1>
    rank: int
    group: str
    gpus: int
    command: list[str] | None  # the job's own unless its group gives one
    image: str | None
    environment: dict[str, str]  # the group's, over the job's


def host_name(rank: int) -> str:
    return f"{HOST_PREFIX}{rank + 1}"


def layout(spec: JobSpec) -> list[Node]:
    """The job's nodes in rank order (one node for a job of one)."""
    if not spec.instance_groups:
        return [
            Node(host_name(i), i, HOMOGENEOUS, spec.gpus, spec.command, spec.image, {})
            for i in range(spec.instance_count)
        ]
    nodes: list[Node] = []
    for group in spec.instance_groups:
        for _ in range(group.instance_count):
            rank = len(nodes)
            nodes.append(
                Node(
                    host_name(rank),
                    rank,
                    group.name,
                    group.gpus,
                    group.command if group.command is not None else spec.command,
                    group.image if group.image is not None else spec.image,
                    dict(group.environment),
                )
            )
    return nodes


def is_gang(spec: JobSpec) -> bool:
    """Whether the job runs as several nodes (a single group of one node is one node too,
    but named by its group: it runs as a gang of one)."""
    return spec.node_count > 1 or bool(spec.instance_groups)


def cpu_nodes(spec: JobSpec) -> int:
    """How many of the job's nodes have no GPU: each takes a CPU slot of its own (a job of
    one node without GPUs, one). Counted from the spec alone: the planner asks it of every
    queued job on every plan."""
    if spec.instance_groups:
        return sum(group.instance_count for group in spec.instance_groups if not group.gpus)
    return 0 if spec.gpus else spec.instance_count


def split_gpus(nodes: list[Node], gpus: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Each node's share of the job's GPUs, in order: the planner placed them close
    together, and consecutive ones go to the same node."""
    ordered = sorted(gpus)
    shares, at = [], 0
    for node in nodes:
        shares.append(tuple(ordered[at : at + node.gpus]))
        at += node.gpus
    return shares


def groups_of(nodes: list[Node]) -> dict[str, list[str]]:
    """Group name -> its hosts, in the groups' order."""
    groups: dict[str, list[str]] = {}
    for node in nodes:
        groups.setdefault(node.group, []).append(node.name)
    return groups
