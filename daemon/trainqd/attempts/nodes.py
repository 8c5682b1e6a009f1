"""The launch of a job of several nodes: one Launch per node inside the gang's (README.md,
"Several nodes"; monitor/gang.py runs it).

Each node is laid out as a job of one node would be, with what is its own: its ml root
(`<job>/nodes/<host>`, kept across attempts, so its checkpoints are its own as on SageMaker's
hosts), its attempt directory (`<attempt>/nodes/<host>`: stdout, stderr, exit.json), its
resourceconfig.json (`current_host`, every host, the instance groups), its share of the GPUs
and the variables distributed frameworks look for. Every host name resolves to its node's
address in every node's view (privileges.py binds the hosts file). Under a root trainqd each
node has a network namespace of its own on a bridge of the attempt's (monitor/netns.py),
where it is 10.A.B.<rank + 1>; elsewhere the nodes share the host's network, each on a
loopback address of the attempt's block (loopback.py: no two running jobs share one),
127.A.B.<rank + 1>, which it can bind without the others taking its port (but which any
process of the host can reach).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from trainq.core.mlconfig import resource_config
from trainq.core.node_env import place_environment
from trainq.core.nodes import Node, groups_of, layout, split_gpus
from trainqd.attempts.contract import Assignment
from trainqd.attempts.engine import container_name
from trainqd.attempts.jobdir import AttemptPaths
from trainqd.attempts.launch import Attempt, BuiltLaunch, NodePlace, build_launch
from trainqd.attempts.loopback import BLOCKS
from trainqd.monitor import netns

# Ports a job's nodes meet on, one pair per block: two jobs on the loopback addresses never
# share a block (loopback.py), so neither an address nor, for their masters, which often
# listen on every address, a port.
PORT_BASE = 20000


def node_address(block: int, rank: int, isolated: bool = False) -> str:
    """`isolated`: in a network namespace of the node's own (a root trainqd). `block`: the
    attempt's loopback block, or the job's id where the nodes have a network of their own."""
    block %= BLOCKS
    return f"{10 if isolated else 127}.{1 + block // 256}.{block % 256}.{rank + 1}"


def master_port(block: int) -> int:
    return PORT_BASE + 2 * (block % BLOCKS)


def node_environment(
    block: int,
    node: Node,
    nodes: list[Node],
    isolated: bool = False,
    peers: dict[str, str] | None = None,
    *,
    primary_groups: Collection[str] = (),
) -> dict[str, str]:
    """What torchrun, Paddle and trainq's own name a node's place in the gang with;
    `block`: as node_address's; `peers`: each node's address (container nodes: their host
    names, which the engine's DNS resolves); `primary_groups`: the groups marked primary
    (Paddle's trainers)."""
    if peers is None:
        peers = {n.name: node_address(block, n.rank, isolated) for n in nodes}
    addresses = [peers[n.name] for n in nodes]
    place = place_environment(
        node, nodes, addresses, master_port(block), primary_groups=primary_groups
    )
    return {**place, "TRAINQ_NODE_RESTARTS": "0"}


def build_gang(
    at: Attempt, now: float, node_roots: dict[str, Path], block: int | None = None
) -> BuiltLaunch:
    """The gang's launch: itself in the job's ml root and attempt directory, running no
    trainer, and a launch per node. `node_roots`: each node's ml root (jobdir.py); `block`:
    the attempt's loopback block (loopback.py), where its nodes share the host's network."""
    job = at.job
    spec = job.spec
    nodes = layout(spec)
    shares = split_gpus(nodes, at.gpus.indices)
    uuid_of = dict(zip(at.gpus.indices, at.gpus.uuids, strict=True))
    containers = spec.image is not None
    block = job.id % BLOCKS if block is None else block
    # Subprocess nodes: a network namespace each under a root trainqd, else loopback
    # addresses; container nodes: the engine's network of the attempt's own, its DNS.
    isolated = at.host.as_root and not containers
    engine_network = container_name(at.settings.instance, job.id, at.number)
    bridge = netns.bridge_name(str(at.paths.job_dir.parent), job.id, at.number)
    if containers:
        peers = {n.name: n.name for n in nodes}
        interface = netns.NODE_INTERFACE
    else:
        peers = {n.name: node_address(block, n.rank, isolated) for n in nodes}
        interface = netns.NODE_INTERFACE if isolated else "lo"
    primary_groups = {g.name for g in spec.instance_groups if g.primary}
    launches, env_files = [], []
    for node, share in zip(nodes, shares, strict=True):
        gpus = Assignment(share, tuple(uuid_of[i] for i in share))
        built = build_node(
            at,
            now,
            node,
            nodes,
            gpus=gpus,
            ml_root=node_roots[node.name],
            peers=peers,
            interface=interface,
            engine_network=engine_network if containers else None,
            isolated=isolated,
            block=block,
        )
        if built.env_file is not None:
            env_files.append(built.env_file)
        launches.append(
            replace(
                built.launch,
                peers={} if containers else peers,
                network=netns.veth_name(bridge, node.rank) if isolated else "",
            )
        )
    first = launches[0]
    gang = replace(
        first,
        runtime="subprocess",  # the gang runs no container itself: its nodes do
        argv=[],
        cwd="/",
        ml_root=str(at.paths.ml_root),
        attempt_dir=str(at.paths.attempt_dir),
        pipe_channels=[],
        ml_files={},
        file_channels=[],
        node=None,
        peers={},
        nodes=launches,
        restart=spec.restart,
        transient_exit_codes=list(spec.retry_exit_codes),
        network=bridge if isolated else "",
        primary=[n.name for n in nodes if n.group in primary_groups],
        # A container gang's engine network, made and removed by its monitor (gang.py).
        container=(
            None if first.container is None else replace(first.container, name=engine_network)
        ),
        env=first.env if containers else {},
    )
    return BuiltLaunch(gang, more_env_files=tuple(env_files))


def build_node(
    at: Attempt,
    now: float,
    node: Node,
    nodes: list[Node],
    *,
    gpus: Assignment,
    ml_root: Path,
    peers: dict[str, str],
    interface: str,
    engine_network: str | None = None,
    isolated: bool = False,
    block: int | None = None,
) -> BuiltLaunch:
    """One node's launch, laid out as a job of one node would be with what is its own
    (`at` is the gang's attempt): its ml root, its directory in the attempt, its
    resourceconfig.json, its GPUs and its place in the gang. `peers`: every node's address;
    `interface`: the node's own, where gloo and NCCL find its address; `block`: the
    attempt's loopback block (node_address; the job's id unless given)."""
    job, spec = at.job, at.job.spec
    resources = resource_config(node.name, groups_of(nodes), node.group, interface)
    primary_groups = {g.name for g in spec.instance_groups if g.primary}
    where = job.id if block is None else block
    env = node_environment(where, node, nodes, isolated, peers, primary_groups=primary_groups)
    env.update({"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface})
    own_spec = spec.model_copy(
        update={
            "command": node.command,
            "image": node.image,
            "environment": {**spec.environment, **node.environment},
        }
    )
    built = build_launch(
        Attempt(
            replace(job, spec=own_spec),
            at.number,
            gpus,
            at.account,
            AttemptPaths(
                at.paths.job_dir,
                ml_root,
                at.paths.attempt_dir / "nodes" / node.name,
                at.paths.stop_file,
            ),
            at.settings,
            at.host,
            NodePlace(node.name, resources, env, engine_network),
        ),
        now,
    )
    return replace(built, launch=replace(built.launch, node=node.name))
