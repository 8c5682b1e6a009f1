"""The network of a job of several nodes under a root trainqd: each node in a network
namespace of its own, joined to a bridge of the attempt's own (iproute2's `ip`).

    gang monitor (root, the host's namespace)   ip link add <bridge> type bridge; no IPv6,
                                                    no ARP answered; up
    node monitor (root, before anything else)   unshare(CLONE_NEWNET); "ready" to the gang
    gang monitor                                ip link add <veth> type veth peer name eth0
                                                    netns <node monitor's pid>; no IPv6
                                                ip link set <veth> master <bridge> up; "go"
    node monitor (in its namespace)             lo up; eth0 <address>/24 up
    gang monitor, at the end                    ip link del <veth>...; ip link del <bridge>

The bridge has no address on the host, and the host has no route to the nodes' subnet: no
process outside the attempt (another user's job among them) can reach a node, and the nodes
reach nothing but each other. No address means IPv6's link-local ones too: the kernel gives
every interface that comes up one, which any user can work out from the bridge's table of
the nodes' MACs, so IPv6 is off on the host's ends (the bridge, each pair's end on it)
before they come up; the nodes keep theirs, and reach each other by it across the bridge.
Nor does the host answer ARP through the bridge, which it would for any address of its own.
Every node has its own addresses and ports: each may bind the same port, on every address.
A node's end of its pair vanishes with its namespace; the bridge is the gang's to remove (or
trainqd's, after a gang that vanished: leftovers.py).

Standard library only: the monitor imports this; trainqd uses `bridge_name` and `remove`.
"""

from __future__ import annotations

import hashlib
import os

IP = "/usr/sbin/ip"
NODE_INTERFACE = "eth0"
PREFIX_LENGTH = 24
_TIMEOUT = 30.0


def bridge_name(jobs_dir: str, job_id: int, attempt: int) -> str:
    """A name of at most 15 characters (IFNAMSIZ) of this attempt's alone: no two trainqds
    (their jobs directories) nor attempts share one."""
    key = f"{os.path.normpath(jobs_dir)}\0{job_id}\0{attempt}".encode()
    return "tqb" + hashlib.sha256(key).hexdigest()[:10]


def veth_name(bridge: str, rank: int) -> str:
    return f"tqv{bridge[3:11]}{rank:02d}"


def _ip(*lines: list[str], force: bool = False) -> str | None:
    """Run `ip`, one command per line in one process (`ip -batch`: each `ip` started costs
    milliseconds on a busy host); None, or what went wrong in one line."""
    import subprocess  # noqa: PLC0415 (only jobs of several nodes pay for it)

    batch = [IP, "-force", "-batch", "-"] if force else [IP, "-batch", "-"]
    argv = [IP, *lines[0]] if len(lines) == 1 else batch
    text = "".join(" ".join(line) + "\n" for line in lines) if len(lines) > 1 else None
    try:
        done = subprocess.run(
            argv,
            input=None if text is None else text.encode(),
            stdin=subprocess.DEVNULL if text is None else None,
            capture_output=True,
            timeout=_TIMEOUT,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(argv)}: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        what = "; ".join(" ".join(line) for line in lines)
        return f"ip {what}: {said[-1] if said else f'exit status {done.returncode}'}"
    return None


def _without_ipv6(interface: str) -> str | None:
    """IPv6 off on one of the host's interfaces, before it is up (so it never gets its
    link-local address); a host without IPv6 has nothing to turn off."""
    if not os.path.exists("/proc/sys/net/ipv6"):
        return None
    return _sysctl(f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6", "1")


def _answering_no_arp(bridge: str) -> str | None:
    """The host answers no ARP request that comes through the bridge (arp_ignore 8): by
    default it answers for every address of its own on any interface, so a node whose
    subnet holds one of the host's addresses (a LAN's, an engine's bridge's) could send it
    packets."""
    return _sysctl(f"/proc/sys/net/ipv4/conf/{bridge}/arp_ignore", "8")


def _sysctl(path: str, value: str) -> str | None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    finally:
        os.close(fd)
    return None


def make_bridge(bridge: str) -> str | None:
    remove(bridge)  # a launch of this very attempt that died before its monitor cleaned up
    return (
        _ip(["link", "add", "name", bridge, "type", "bridge"])
        or _without_ipv6(bridge)
        or _answering_no_arp(bridge)
        or _ip(["link", "set", bridge, "up"])
    )


def plug(bridge: str, veth: str, pid: int) -> str | None:
    """A pair of interfaces between the bridge and the namespace of process `pid`, where its
    end is eth0."""
    if os.path.exists(f"/sys/class/net/{veth}"):  # a restarted node's, its namespace lingering
        _ip(["link", "del", veth])
    return (
        _ip(
            ["link", "add", veth, "type", "veth", "peer", "name", NODE_INTERFACE, "netns", str(pid)]
        )
        or _without_ipv6(veth)
        or _ip(["link", "set", veth, "master", bridge, "up"])
    )


def configure(address: str) -> str | None:
    """In the node's own namespace: loopback up, eth0 with its address, up."""
    return _ip(
        ["link", "set", "lo", "up"],
        ["addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", NODE_INTERFACE],
        ["link", "set", NODE_INTERFACE, "up"],
    )


def remove(bridge: str) -> bool:
    """Remove the bridge and the host's ends of the pairs on it, if it is there; whether it
    was. A pair would go with its node's namespace, but only once nothing holds that: the
    job's owner may (a process of theirs that opened a trainer's /proc/PID/ns/net), and
    the pair's end would stay on the host for good."""
    if not os.path.exists(f"/sys/class/net/{bridge}"):
        return False
    try:
        ports = sorted(os.listdir(f"/sys/class/net/{bridge}/brif"))
    except OSError:
        ports = []
    # -force: a pair that went with its namespace meanwhile does not keep the rest.
    _ip(*[["link", "del", port] for port in ports], ["link", "del", bridge], force=True)
    return not os.path.exists(f"/sys/class/net/{bridge}")
