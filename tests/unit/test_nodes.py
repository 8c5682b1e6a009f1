"""A job of several nodes: its spec's checks, its nodes' names, GPUs and variables."""

from __future__ import annotations

import pytest

from trainq.core.errors import InvalidSpec
from trainq.core.nodes import layout, split_gpus
from trainq.core.spec import parse_spec
from trainqd.access.admission import HostFacts, check_nodes
from trainqd.attempts.nodes import master_port, node_address, node_environment


def test_nodes_are_named_across_groups_in_order() -> None:
    spec = parse_spec(
        {
            "command": ["serve"],
            "instance_groups": [
                {"name": "ps", "instance_count": 2},
                {"name": "tr", "instance_count": 2, "gpus": 3, "command": ["train"]},
            ],
        }
    )
    nodes = layout(spec)
    assert [(n.name, n.rank, n.group, n.gpus) for n in nodes] == [
        ("algo-1", 0, "ps", 0),
        ("algo-2", 1, "ps", 0),
        ("algo-3", 2, "tr", 3),
        ("algo-4", 3, "tr", 3),
    ]
    assert [n.command for n in nodes] == [["serve"], ["serve"], ["train"], ["train"]]
    assert spec.total_gpus == 6
    assert split_gpus(nodes, (7, 2, 3, 6, 5, 4)) == [(), (), (2, 3, 4), (5, 6, 7)]


def test_instance_count_multiplies_the_gpus() -> None:
    spec = parse_spec({"command": ["x"], "instance_count": 4, "gpus": 2})
    assert spec.total_gpus == 8
    assert [n.name for n in layout(spec)] == ["algo-1", "algo-2", "algo-3", "algo-4"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"instance_count": 0}, "instance_count: Input should be greater than or equal to 1"),
        ({"instance_count": 65}, "instance_count: Input should be less than or equal to 64"),
        ({"restart": "node"}, 'restart = "node" applies to jobs of several nodes'),
        (
            {"instance_groups": [{"name": "a", "instance_count": 1}] * 2},
            "instance group 'a' is named twice",
        ),
        ({"instance_groups": [{"name": "a", "instance_count": 0}]}, "instance_count"),
        ({"instance_groups": [{"name": "a"}]}, "instance_count: missing"),
        ({"instance_groups": [{"name": "../a", "instance_count": 1}]}, "'/' or '..'"),
        (
            {"gpus": 1, "instance_groups": [{"name": "a", "instance_count": 1}]},
            "give gpus per instance group",
        ),
        (
            {"instance_count": 2, "instance_groups": [{"name": "a", "instance_count": 1}]},
            "give instance_count per instance group",
        ),
        (
            {"instance_groups": [{"name": f"g{i}", "instance_count": 40} for i in range(2)]},
            "the instance groups hold 80 nodes",
        ),
        (
            {"instance_groups": [{"name": "a", "instance_count": 1, "image": "x"}]},
            "gives an image to a subprocess job",
        ),
        (
            {"instance_groups": [{"name": "a", "instance_count": 1, "primary": True}]},
            "every instance group is primary",
        ),
        (
            {"instance_groups": [{"name": "a", "instance_count": 1, "environment": {"SM_X": "1"}}]},
            "SM_X is set by trainq itself",
        ),
    ],
)
def test_refusals_are_one_line(spec: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_spec({"command": ["x"], **spec})
    message = str(caught.value)
    assert says in message
    assert "\n" not in message


def test_each_node_knows_its_place() -> None:
    nodes = layout(parse_spec({"command": ["x"], "instance_count": 3}))
    env = node_environment(300, nodes[1], nodes)
    assert (env["RANK"], env["WORLD_SIZE"], env["TRAINQ_NODE_RANK"]) == ("1", "3", "1")
    assert env["MASTER_ADDR"] == node_address(300, 0) == "127.2.44.1"
    assert env["MASTER_PORT"] == str(master_port(300))
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["PADDLE_TRAINERS_NUM"] == "3"
    port = int(env["PADDLE_PORT"])
    assert env["PADDLE_CURRENT_ENDPOINT"] == f"127.2.44.2:{port}"
    assert env["PADDLE_PSERVERS_IP_PORT_LIST"].split(",") == [
        f"127.2.44.{i}:{port}" for i in (1, 2, 3)
    ]
    # Two jobs never share an address.
    assert node_address(1, 0) != node_address(2, 0)


def test_a_parameter_server_job_tells_paddle_servers_from_trainers() -> None:
    """The groups marked primary are Paddle's trainers, the others its servers: what
    PaddleCloudRoleMaker reads for each (tests/e2e/test_readme.py runs Paddle on it)."""
    groups = [
        {"name": "trainers", "instance_count": 2, "gpus": 1, "primary": True},
        {"name": "pservers", "instance_count": 2},
    ]
    nodes = layout(parse_spec({"command": ["x"], "instance_groups": groups}))
    envs = [node_environment(300, n, nodes, primary_groups={"trainers"}) for n in nodes]
    port = envs[0]["PADDLE_PORT"]
    for env in envs:
        assert env["PADDLE_TRAINER_ENDPOINTS"] == f"127.2.44.1:{port},127.2.44.2:{port}"
        assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == f"127.2.44.3:{port},127.2.44.4:{port}"
        assert env["PADDLE_TRAINERS_NUM"] == "2"
        # The first server keeps the trainers' barrier.
        assert env["PADDLE_GLOO_HTTP_ENDPOINT"] == f"127.2.44.3:{master_port(300)}"
        assert env["PADDLE_PORT"] == port
    assert [e["TRAINING_ROLE"] for e in envs] == ["TRAINER"] * 2 + ["PSERVER"] * 2
    assert [e.get("PADDLE_TRAINER_ID") for e in envs] == ["0", "1", None, None]
    assert envs[3]["POD_IP"] == "127.2.44.4"
    assert envs[3]["PADDLE_CURRENT_ENDPOINT"] == f"127.2.44.4:{port}"


def test_without_primary_groups_every_node_is_trainer_and_server() -> None:
    """Paddle's guide's layout, the role left to the node's processes."""
    groups = [{"name": "a", "instance_count": 1}, {"name": "b", "instance_count": 1}]
    nodes = layout(parse_spec({"command": ["x"], "instance_groups": groups}))
    env = node_environment(300, nodes[1], nodes)
    assert "TRAINING_ROLE" not in env
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["PADDLE_TRAINER_ENDPOINTS"] == env["PADDLE_PSERVERS_IP_PORT_LIST"]


def test_the_slurm_back_end_refuses_what_a_slurm_step_cannot_run_in_one_line() -> None:
    host = HostFacts(gpu_backend="slurm", gpu_count=0, default_engine=None)
    check_nodes(parse_spec({"command": ["x"]}), host)  # one node: as always
    check_nodes(parse_spec({"command": ["x"], "instance_count": 2}), host)  # a Slurm step
    with pytest.raises(InvalidSpec) as caught:
        check_nodes(parse_spec({"command": ["x"], "instance_count": 2, "restart": "node"}), host)
    assert str(caught.value).startswith("the Slurm back end cannot run it: restart: ")
    assert "\n" not in str(caught.value)
