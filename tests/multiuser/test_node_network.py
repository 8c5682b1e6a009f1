"""Under a root trainqd each node of a job of several nodes is in a network namespace of its
own on a bridge of its attempt's (monitor/netns.py): its peers reach it, nobody else does.
Another user's job that knows a node's address and port (they are predictable) cannot
connect to it, and the bridge is gone once the attempt ends."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, pids_alive, python_job
from tests.support.nodes import KNOCK
from tests.support.users import submit_as, trainq_as
from tests.support.waiting import wait_for
from trainqd.attempts.nodes import node_address
from trainqd.monitor import netns

pytestmark = pytest.mark.multiuser


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def node_pids(daemon: Daemon, job_id: int) -> list[int]:
    """The trainers of a gang's nodes, once each has written its pid (as it listens)."""
    pid_files = [Path(node["job_dir"]) / "model" / "pid" for node in daemon.job(job_id)["nodes"]]
    wait_for(
        lambda: all(p.exists() and p.read_text().strip() for p in pid_files),
        what="every node to listen",
    )
    return [int(p.read_text()) for p in pid_files]


def test_another_users_job_cannot_reach_a_node(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    spec = python_job("gang_node.py", "sleep", instance_count=2, working_dir=str(shared_dir))
    gang = submit_as(workstation, accounts.alice, spec)
    nodes = workstation.job(gang["id"])["nodes"]
    pid_file = Path(nodes[0]["job_dir"]) / "model" / "pid"
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(), what="the first node to listen"
    )
    node_pid = int(pid_file.read_text())
    env = environment_of(node_pid)
    address, port = env["TRAINQ_NODE_ADDRESS"], env["PADDLE_PORT"]
    assert os.stat(f"/proc/{node_pid}").st_uid == accounts.alice.uid
    # Its own network: not the host's.
    assert os.readlink(f"/proc/{node_pid}/ns/net") != os.readlink("/proc/self/ns/net")

    knock = {
        "command": ["python3", "-c", KNOCK, address, port],
        "working_dir": str(shared_dir),
        "max_retries": 0,
    }
    attempt = submit_as(workstation, accounts.bob, knock)
    done = workstation.wait_state(attempt["id"], timeout=60)
    assert done["state"] == "COMPLETED", done
    # Nor from the host itself: it has no route to the bridge (whatever answers there, if
    # anything, is where the host's default route leads: never the node).
    accounts.bob.run(["python3", "-c", KNOCK, address, port], cwd=str(shared_dir))
    node_log = workstation.cli("logs", str(gang["id"]), "--node", "1").stdout
    assert "listening" in node_log
    assert "accepted" not in node_log  # no knock reached it

    assert workstation.job(gang["id"])["state"] == "RUNNING"  # untouched
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves on
    bridge = netns.bridge_name(str(workstation.state_dir / "jobs"), gang["id"], 1)
    assert Path(f"/sys/class/net/{bridge}").exists()
    assert trainq_as(workstation, accounts.alice, "stop", str(gang["id"])).returncode == 0
    assert workstation.wait_state(gang["id"], timeout=30)["state"] == "STOPPED"
    assert not pids_alive([node_pid])
    assert not Path(f"/sys/class/net/{bridge}").exists()


# Alice's node: listen on every address of both families, as frameworks often do (torch's
# TCPStore among them), and say who connected.
LISTEN_EVERYWHERE = """
import os, socket
server = socket.create_server(
    ("::", int(os.environ["PADDLE_PORT"])), family=socket.AF_INET6, dualstack_ipv6=True
)
path = os.path.join(os.environ["SM_MODEL_DIR"], "pid")
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".tmp", path)
print("listening", flush=True)
while True:
    conn, peer = server.accept()
    print("accepted", peer[0], flush=True)
    conn.close()
"""

# Bob on the host: the bridge's forwarding table (readable by everyone) lists the nodes'
# MACs; a MAC gives the EUI-64 link-local address the kernel assigns. Knock on each, through
# the bridge.
KNOCK_LINK_LOCAL = """
import socket, sys
bridge, port = sys.argv[1], int(sys.argv[2])
table = open(f"/sys/class/net/{bridge}/brforward", "rb").read()
macs = [table[i : i + 6] for i in range(0, len(table), 16) if not table[i + 7]]
print("macs", len(macs))
for mac in macs:
    eui = bytes([mac[0] ^ 2, *mac[1:3], 0xFF, 0xFE, *mac[3:]])
    address = "fe80::" + ":".join(eui[i : i + 2].hex() for i in range(0, 8, 2))
    try:
        socket.create_connection((f"{address}%{bridge}", port), timeout=3).close()
        print("connected", address)
    except OSError as exc:
        print("refused:", address, exc)
"""


def test_a_node_has_no_link_local_address_the_host_reaches(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    spec = {
        "command": ["python3", "-c", LISTEN_EVERYWHERE],
        "instance_count": 2,
        "working_dir": str(shared_dir),
    }
    gang = submit_as(workstation, accounts.alice, spec)
    pids = node_pids(workstation, gang["id"])
    port = environment_of(pids[0])["PADDLE_PORT"]
    bridge = netns.bridge_name(str(workstation.state_dir / "jobs"), gang["id"], 1)
    forwarding = Path(f"/sys/class/net/{bridge}/brforward")
    # The nodes' MACs are in the table once each has sent a frame (as it comes up), and the
    # link-local addresses are usable once the kernel's duplicate check is done, the nodes'
    # and the host's alike.
    node_tables = [Path(f"/proc/{pid}/net/if_inet6") for pid in pids]
    wait_for(
        lambda: (
            sum(not e[7] for e in _entries(forwarding.read_bytes())) >= 2
            and all(_settled(table, netns.NODE_INTERFACE, needed=True) for table in node_tables)
            and _settled(Path("/proc/self/net/if_inet6"), bridge, needed=False)
        ),
        what="the nodes' MACs on the bridge and their addresses settled",
    )

    knock = accounts.bob.run(["python3", "-c", KNOCK_LINK_LOCAL, bridge, port], cwd=str(shared_dir))
    assert knock.returncode == 0, knock.stderr
    assert "macs 0" not in knock.stdout
    assert "connected" not in knock.stdout, knock.stdout
    for rank in (1, 2):
        node_log = workstation.cli("logs", str(gang["id"]), "--node", str(rank)).stdout
        assert "listening" in node_log
        assert "accepted" not in node_log, node_log

    assert workstation.job(gang["id"])["state"] == "RUNNING"  # untouched
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves on
    assert trainq_as(workstation, accounts.alice, "stop", str(gang["id"])).returncode == 0
    assert workstation.wait_state(gang["id"], timeout=30)["state"] == "STOPPED"


def _entries(table: bytes) -> list[bytes]:
    """The kernel's `struct __fdb_entry` records: 16 bytes, the MAC first, is_local at 7."""
    return [table[i : i + 16] for i in range(0, len(table), 16)]


def _settled(table: Path, interface: str, *, needed: bool) -> bool:
    """Whether `interface`'s IPv6 addresses in a /proc/net/if_inet6 table are past the
    kernel's duplicate check (none tentative: flag 0x40), and there is one if `needed`."""
    flags = [
        int(f[4], 16) for f in map(str.split, table.read_text().splitlines()) if f[5] == interface
    ]
    return (bool(flags) or not needed) and not any(flag & 0x40 for flag in flags)


# Alice on the host: hold her nodes' network namespaces open (her trainers are hers, so she
# may open their /proc/PID/ns/net), so that the kernel cannot free them when the job ends.
HOLD_NAMESPACES = """
import os, sys, time
held = [os.open(f"/proc/{pid}/ns/net", os.O_RDONLY) for pid in sys.argv[1:]]
print("held", len(held), flush=True)
time.sleep(600)
"""


def test_a_held_namespace_leaves_no_interface_on_the_host(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    spec = python_job("gang_node.py", "sleep", instance_count=2, working_dir=str(shared_dir))
    gang = submit_as(workstation, accounts.alice, spec)
    pids = node_pids(workstation, gang["id"])
    bridge = netns.bridge_name(str(workstation.state_dir / "jobs"), gang["id"], 1)
    ports = {netns.veth_name(bridge, rank) for rank in range(2)}
    assert ports <= set(os.listdir("/sys/class/net"))
    holder = accounts.alice.popen(
        ["python3", "-c", HOLD_NAMESPACES, *map(str, pids)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held 2"
        assert trainq_as(workstation, accounts.alice, "stop", str(gang["id"])).returncode == 0
        assert workstation.wait_state(gang["id"], timeout=30)["state"] == "STOPPED"
        assert not pids_alive(pids)
        # The namespaces live on while she holds them; nothing of them stays on the host.
        assert not Path(f"/sys/class/net/{bridge}").exists()
        assert not ports & set(os.listdir("/sys/class/net"))
        assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves on
    finally:
        holder.kill()
        holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()


# Alice's nodes: send datagrams to the address .200 of their own subnet, which the host
# holds too, then try a connection there (which settles whether the host answered ARP).
SEND_TO_THE_HOST = """
import os, socket, sys
target = os.environ["TRAINQ_NODE_ADDRESS"].rsplit(".", 1)[0] + ".200"
port = int(sys.argv[1])
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def send():
    for _ in range(3):
        try:
            udp.sendto(b"from a node", (target, port))
        except OSError:
            pass
send()
try:
    socket.create_connection((target, port), timeout=5).close()
    print("tcp connected", flush=True)
except OSError as exc:
    print("tcp:", exc, flush=True)
send()
print("done", flush=True)
"""


def test_a_node_cannot_send_to_the_hosts_own_address_in_its_subnet(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """The host holds an address inside the nodes' subnet (a LAN's or an engine bridge's may
    be one): it answers no ARP through the job's bridge, so no packet of a node reaches it."""
    spec = {
        "command": ["python3", "-c", SEND_TO_THE_HOST, "20999"],
        "instance_count": 2,
        "working_dir": str(shared_dir),
        "max_retries": 0,
    }
    # The next job's nodes' subnet, from its id (attempts/nodes.py), held by the host first.
    probe = submit_as(workstation, accounts.bob, {"command": ["true"]})
    workstation.wait_state(probe["id"], timeout=30)
    subnet = node_address(probe["id"] + 1, 0, isolated=True).rsplit(".", 1)[0]
    dummy = f"tqd{probe['id'] % 100000}"
    # A pair of the host's own holds the address (no dummy interfaces on every kernel).
    subprocess.run(["ip", "link", "add", dummy, "type", "veth", "peer", f"{dummy}p"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", f"{subnet}.200/32", "dev", dummy], check=True)
        subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host:
            host.bind((f"{subnet}.200", 20999))
            gang = submit_as(workstation, accounts.alice, spec)
            assert gang["id"] == probe["id"] + 1
            done = workstation.wait_state(gang["id"], timeout=60)
            assert done["state"] == "COMPLETED", done
            for rank in (1, 2):
                node_log = workstation.cli("logs", str(gang["id"]), "--node", str(rank)).stdout
                assert "done" in node_log, node_log
                assert "tcp connected" not in node_log
            host.setblocking(False)
            with pytest.raises(BlockingIOError):
                print("the host received", host.recvfrom(100))
    finally:
        subprocess.run(["ip", "link", "del", dummy], check=False)
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves on
