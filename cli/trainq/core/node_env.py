"""What a node of a job of several nodes is told of its place: trainq's own names,
torchrun's and PaddlePaddle's, on whatever addresses the nodes reach each other by. One
home for trainqd's gang (trainqd.attempts.nodes) and the Kubernetes export."""

from __future__ import annotations

from collections.abc import Collection

from trainq.core.nodes import Node
from trainq.core.paddle_env import paddle_environment


def place_environment(
    node: Node,
    nodes: list[Node],
    addresses: list[str],
    port: int,
    *,
    primary_groups: Collection[str] = (),
) -> dict[str, str]:
    """`addresses`: each node's, in rank order; `port`: torchrun's master port, with
    Paddle's beside it (`port + 1`) and Paddle's trainers' barrier on it, which a
    parameter-server job leaves free."""
    rank, size = str(node.rank), str(len(nodes))
    return {
        "TRAINQ_NODE_RANK": rank,
        "TRAINQ_NUM_NODES": size,
        "TRAINQ_NODE_NAME": node.name,
        "TRAINQ_NODE_ADDRESS": addresses[node.rank],
        # torchrun's, one process per node: the node is the rank.
        "RANK": rank,
        "WORLD_SIZE": size,
        "NODE_RANK": rank,
        "GROUP_RANK": rank,
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": addresses[0],
        "MASTER_PORT": str(port),
        **paddle_environment(
            node, nodes, addresses, port + 1, barrier_port=port, primary_groups=primary_groups
        ),
    }
