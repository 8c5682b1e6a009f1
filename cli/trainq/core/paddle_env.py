"""The variables PaddlePaddle's fleet reads to place a node of a job of several nodes
(README.md, "Several nodes"): what `PaddleCloudRoleMaker` and `paddle.distributed.launch`
name a node's role, id, peers and port with.

Two layouts. A job whose instance groups mark some `primary` and leave others not is a
parameter-server job: the primary groups' nodes are Paddle's trainers and the others its
parameter servers (which never exit on their own, as trainq's primary rule expects), each
told its role (`TRAINING_ROLE`), the servers' and the trainers' endpoints apart, and where
the first server keeps the trainers' barrier (gloo over HTTP, as Paddle's launcher sets it
up). Any other job is the layout of Paddle's Kubernetes guide: every node both a trainer and
a parameter server, its role left to the processes it starts.
"""

from __future__ import annotations

from collections.abc import Collection

from trainq.core.nodes import Node

TRAINER = "TRAINER"
PSERVER = "PSERVER"


def paddle_environment(
    node: Node,
    nodes: list[Node],
    addresses: list[str],
    port: int,
    *,
    barrier_port: int,
    primary_groups: Collection[str] = (),
) -> dict[str, str]:
    """`addresses`: each node's, in rank order; `port`: the one every node serves on (each
    on its own address); `barrier_port`: where the first server keeps the trainers'
    barrier in a parameter-server job."""
    endpoint = {n.name: f"{addresses[n.rank]}:{port}" for n in nodes}
    common = {
        "PADDLE_PORT": str(port),
        "POD_IP": addresses[node.rank],
        "PADDLE_CURRENT_ENDPOINT": endpoint[node.name],
    }
    trainers = [n for n in nodes if n.group in primary_groups]
    servers = [n for n in nodes if n.group not in primary_groups]
    if not trainers or not servers:
        every = ",".join(endpoint[n.name] for n in nodes)
        return {
            **common,
            "PADDLE_TRAINER_ID": str(node.rank),
            "PADDLE_TRAINERS_NUM": str(len(nodes)),
            "PADDLE_TRAINER_ENDPOINTS": every,
            "PADDLE_PSERVERS_IP_PORT_LIST": every,
        }
    role = TRAINER if node.group in primary_groups else PSERVER
    env = {
        **common,
        "TRAINING_ROLE": role,
        "PADDLE_ROLE": role,
        "PADDLE_TRAINERS_NUM": str(len(trainers)),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoint[n.name] for n in trainers),
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(endpoint[n.name] for n in servers),
        "PADDLE_WITH_GLOO": "1",
        "PADDLE_GLOO_RENDEZVOUS": "3",  # HTTP, served by the first server
        "PADDLE_GLOO_HTTP_ENDPOINT": f"{addresses[servers[0].rank]}:{barrier_port}",
    }
    if role == TRAINER:
        env["PADDLE_TRAINER_ID"] = str(trainers.index(node))
    return env
