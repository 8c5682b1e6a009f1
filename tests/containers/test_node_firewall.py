"""Under a root trainqd the engine's network of a container job of several nodes gives the
host an address and a route to every node: a table of trainq's own in nftables
(monitor/enginewall.py) keeps the host's users off it. Another user on the host and that
user's job, knowing a listening node's address and port, cannot connect to it; the nodes
still meet (test_nodes.py), and the table goes with the attempt."""

from __future__ import annotations

import pytest

from tests.support.accounts import User
from tests.support.containers import Engine, container_job, firewall_tables
from tests.support.daemon import Daemon
from tests.support.nodes import KNOCK
from tests.support.users import http_as, submit_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers


def link_local(engine: Engine, container: str, network: str) -> str:
    """The container's IPv6 link-local address (its MAC's EUI-64), through the bridge."""
    networks = "{{range .NetworkSettings.Networks}}{{.MacAddress}}{{end}}"
    mac = bytes.fromhex(
        engine.run("inspect", container, "--format", networks).stdout.strip().replace(":", "")
    )
    eui = bytes([mac[0] ^ 2, *mac[1:3], 0xFF, 0xFE, *mac[3:]])
    bridge = engine.run("network", "inspect", network, "--format", "{{.NetworkInterface}}")
    address = "fe80::" + ":".join(eui[i : i + 2].hex() for i in range(0, 8, 2))
    return f"{address}%{bridge.stdout.strip()}"


def address_and_port(engine: Engine, container: str) -> tuple[str, str]:
    networks = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    address = engine.run("inspect", container, "--format", networks).stdout.strip()
    env = engine.run("inspect", container, "--format", "{{range .Config.Env}}{{println .}}{{end}}")
    ports = [
        line.split("=", 1)[1] for line in env.stdout.splitlines() if line.startswith("PADDLE_PORT=")
    ]
    assert address, address
    assert ports, env.stdout
    return address, ports[0]


@pytest.mark.parametrize("which", ["podman_daemon", "docker_daemon"])
def test_the_hosts_users_cannot_reach_a_container_node(
    which: str, request: pytest.FixtureRequest, engine: Engine, submitter: User
) -> None:
    daemon: Daemon = request.getfixturevalue(which)
    spec = container_job("gang_node.py", "sleep", network=None, instance_count=2, max_retries=0)
    gang = daemon.submit(spec)
    job = str(gang["id"])

    def node_log() -> str:
        return str(daemon.cli("logs", job, "--node", "1").stdout)

    wait_for(lambda: "listening" in node_log(), timeout=90, what="the first node to listen")
    first = next(name for name in engine.job_containers() if name.endswith("-algo-1"))
    address, port = address_and_port(engine, first)
    table = first.removesuffix("-algo-1")  # named as the engine's network
    assert table in firewall_tables()

    # Another user on the host, and that user's job, try the node's address and port.
    nobody = User.lookup("nobody")
    tried = nobody.run(["python3", "-c", KNOCK, address, port])
    assert tried.stdout.startswith("refused"), tried
    # And through the bridge, to the node's link-local address: the node listens on its
    # IPv4 address alone, so a knock that reached it would be reset by it (refused).
    tried = nobody.run(["python3", "-c", KNOCK, link_local(engine, first, table), port])
    assert tried.stdout.startswith("refused"), tried
    assert "ConnectionRefusedError" not in tried.stdout, tried
    knock = {"command": ["python3", "-c", KNOCK, address, port], "max_retries": 0}
    attempt = submit_as(daemon, submitter, knock)
    done = daemon.wait_state(attempt["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    said = daemon.cli("logs", str(attempt["id"])).stdout
    assert said.startswith("refused"), said
    assert "accepted" not in node_log()  # no knock reached it

    assert daemon.job(gang["id"])["state"] == "RUNNING"  # untouched
    assert http_as(daemon, submitter, "GET", "/v1/jobs")[0] == 200  # trainqd serves on
    daemon.cli("stop", job)
    assert daemon.wait_state(gang["id"], timeout=90)["state"] == "STOPPED"
    assert table not in firewall_tables()
